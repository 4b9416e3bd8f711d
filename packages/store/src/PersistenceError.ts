/**
 * The one error of a service's storage: the database failed, or a row did
 * not decode. Services that read and write SQL fail with it rather than
 * dying, so each caller decides what a database fault means where it is:
 * the HTTP edge answers 503 or 500, a background loop logs it and goes on,
 * the journal tries again. `cause` keeps what the driver said (a `SqlError`,
 * a `ParseError`), so `DatabaseHealth.isUnreachable` and `isPermanent` read
 * through it, telling an unreachable database from a fault of ours.
 */
import { Effect, Schema } from "effect"

export class PersistenceError extends Schema.TaggedError<PersistenceError>()("PersistenceError", {
  cause: Schema.Defect
}) {
  /** Wraps an effect's failures in a PersistenceError; defects and interruptions pass as they are. */
  static refail<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, PersistenceError, R> {
    return Effect.mapError(effect, (cause) => new PersistenceError({ cause }))
  }
}

/**
 * A storage fault as the defect of its cause, where the caller has no answer for it: a turn stops and
 * resumes from the journal, the HTTP edge answers 503 or 500 (DatabaseHealth reads the cause either way).
 */
export const orDie = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, PersistenceError>, R> =>
  Effect.catchIf(
    effect,
    (error): error is Extract<E, PersistenceError> => error instanceof PersistenceError,
    (error) => Effect.die(error.cause)
    // The same type, which TypeScript does not see for a generic E.
  ) as Effect.Effect<A, Exclude<E, PersistenceError>, R>
