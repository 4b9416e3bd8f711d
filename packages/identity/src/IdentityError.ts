/**
 * The one error of identity tokens: why a token could not be signed. Its
 * message never carries key material (a sealed key that does not open says
 * so, not what it holds).
 */
import { PersistenceError } from "@agent-runtime/store"
import { Effect, Schema } from "effect"

export const Reason = Schema.Literal(
  /** No stored key is active and unretired (nothing to sign with). */
  "no_signing_key",
  /** The signing key's sealed private half did not open (a sealing key missing from the node's). */
  "key_unreadable",
  /** The keys could not be read from the database. */
  "storage",
  /** The signature itself failed. */
  "signing_failed"
)
export type Reason = typeof Reason.Type

export class IdentityError extends Schema.TaggedError<IdentityError>()("IdentityError", {
  reason: Reason,
  message: Schema.String
}) {}

export const is = (u: unknown): u is IdentityError => u instanceof IdentityError

/** What a failure says; a database fault (`PersistenceError`) says what its cause says. */
const describe = (cause: unknown): string =>
  cause instanceof PersistenceError.PersistenceError
    ? describe(cause.cause)
    : typeof cause === "object" && cause !== null && typeof (cause as { message?: unknown }).message === "string"
    ? (cause as { message: string }).message
    : String(cause)

/** Fails with an `IdentityError` of `reason` for any failure of `effect`, its message prefixed by `what`. */
export const refail = (reason: Reason, what: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.mapError(
    effect,
    (cause): IdentityError => is(cause) ? cause : new IdentityError({ reason, message: `${what}: ${describe(cause)}` })
  )
