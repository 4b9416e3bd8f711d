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

/** Random bytes drawn from the system a block at a time: one call per 256 ids, not one per id. */
const pool = Buffer.alloc(4096)
let used = pool.length

/** `length` random bytes, read before the next call (they are the pool's own). */
const randomBytes = (length: number): Buffer => {
  if (used + length > pool.length) {
    Crypto.randomFillSync(pool)
    used = 0
  }
  used += length
  return pool.subarray(used - length, used)
}

export const make = (prefix: string): string => {
  let time = Date.now()
  let out = ""
  for (let i = 0; i < 10; i++) {
    out = alphabet[time % 32] + out
    time = Math.floor(time / 32)
  }
  const random = randomBytes(16)
  for (let i = 0; i < 16; i++) out += alphabet[random[i]! % 32]
  return `${prefix}_${out}`
}

/** `prefix_` and `length` lowercase hex digits: 12 of milliseconds (time order), the rest random. */
const hex = (prefix: string, length: number): string => {
  const random = randomBytes(Math.ceil((length - 12) / 2)).toString("hex").slice(0, length - 12)
  return `${prefix}_${Date.now().toString(16).padStart(12, "0")}${random}`
}

/** An agent's id: `client_` and 40 hex digits (112 random bits). */
export const agent = (): string => hex("client", 40)

/** A volume's id: `vol_` and 24 hex digits (48 random bits). */
export const volume = (): string => hex("vol", 24)
