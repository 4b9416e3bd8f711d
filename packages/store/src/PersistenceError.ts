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
