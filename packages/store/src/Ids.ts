/**
 * Resource ids: a type prefix, then 26 characters of Crockford base32 that
 * sort by creation time (48 bits of milliseconds, 80 random bits).
 */
import * as Crypto from "node:crypto"

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

export const make = (prefix: string): string => {
  let time = Date.now()
  let out = ""
  for (let i = 0; i < 10; i++) {
    out = alphabet[time % 32] + out
    time = Math.floor(time / 32)
  }
  const random = Crypto.randomBytes(16)
  for (let i = 0; i < 16; i++) out += alphabet[random[i]! % 32]
  return `${prefix}_${out}`
}
