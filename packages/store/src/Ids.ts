/**
 * Resource ids: a type prefix, then characters that sort by creation time.
 * Most are 26 characters of Crockford base32 (48 bits of milliseconds, 80
 * random bits). Agents and volumes take lowercase hex instead (`agent`,
 * `volume`): 12 hex digits of milliseconds, then random ones, the lengths the
 * camelRun client checks (`client_` + 40, `vol_` + 24), so its applications
 * work against us unchanged.
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

/** `prefix_` and `length` lowercase hex digits: 12 of milliseconds (time order), the rest random. */
const hex = (prefix: string, length: number): string => {
  const random = Crypto.randomBytes(Math.ceil((length - 12) / 2)).toString("hex").slice(0, length - 12)
  return `${prefix}_${Date.now().toString(16).padStart(12, "0")}${random}`
}

/** An agent's id: `client_` and 40 hex digits (112 random bits). */
export const agent = (): string => hex("client", 40)

/** A volume's id: `vol_` and 24 hex digits (48 random bits). */
export const volume = (): string => hex("vol", 24)
