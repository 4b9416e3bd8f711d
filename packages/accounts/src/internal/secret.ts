import * as Crypto from "node:crypto"

/** A bearer secret: a prefix and 256 bits of randomness. */
export const generate = (prefix: string): string => prefix + Crypto.randomBytes(32).toString("base64url")

export const hash = (secret: string): Buffer => Crypto.createHash("sha256").update(secret).digest()

/** Compares a presented secret with a stored hash in constant time. */
export const matches = (secret: string, expected: Buffer): boolean => Crypto.timingSafeEqual(hash(secret), expected)
