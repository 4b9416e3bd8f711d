import { SealedSecret } from "@agent-runtime/store"
import { expect, it } from "@effect/vitest"
import { Effect, Either, Redacted } from "effect"
import * as Crypto from "node:crypto"

const newKey = () => SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64"))

it.effect("seals with the current key's id and opens only for the same owner", () =>
  Effect.gen(function*() {
    const key = newKey()
    const sealer = SealedSecret.make(key)
    const sealed = sealer.seal("sk-live-123", "tenant:tn_a/key:openai")
    expect(sealed).not.toContain("sk-live-123")
    expect(sealed.split(".").slice(0, 2)).toEqual(["v1", key.id])
    expect(Redacted.value(yield* sealer.open(sealed, "tenant:tn_a/key:openai"))).toBe("sk-live-123")
    // The same ciphertext copied to another tenant's row does not open.
    const moved = yield* Effect.either(sealer.open(sealed, "tenant:tn_b/key:openai"))
    expect(Either.isLeft(moved)).toBe(true)
    // Two seals of one secret differ (fresh IV each time).
    expect(sealer.seal("sk-live-123", "x")).not.toBe(sealer.seal("sk-live-123", "x"))
  }))

it.effect("a tampered ciphertext is refused", () =>
  Effect.gen(function*() {
    const sealer = SealedSecret.make(newKey())
    const sealed = sealer.seal("secret", "ctx")
    const parts = sealed.split(".")
    const body = Buffer.from(parts[3]!, "base64url")
    body[0] = body[0]! ^ 1
    parts[3] = body.toString("base64url")
    const result = yield* Effect.either(sealer.open(parts.join("."), "ctx"))
    expect(Either.isLeft(result)).toBe(true)
  }))

it.effect("after a rotation old secrets still open with the previous key and new ones use the new key", () =>
  Effect.gen(function*() {
    const old = newKey()
    const sealedBefore = SealedSecret.make(old).seal("before", "ctx")
    const next = newKey()
    const rotated = SealedSecret.make(next, [old])
    expect(Redacted.value(yield* rotated.open(sealedBefore, "ctx"))).toBe("before")
    const sealedAfter = rotated.seal("after", "ctx")
    expect(sealedAfter.split(".")[1]).toBe(next.id)
    // Without the previous key the old secret names a key nobody has.
    const error = yield* Effect.flip(SealedSecret.make(next).open(sealedBefore, "ctx"))
    expect(error.message).toContain(`unknown key ${old.id}`)
    expect(error.message).not.toContain("before")
  }))

it("refuses a sealing key that is not 32 bytes", () => {
  expect(() => SealedSecret.parseKey(Buffer.alloc(16).toString("base64"))).toThrow("32 bytes")
})
