/**
 * The agent package's errors. The API's own errors (`ApiError` in the domain
 * package) are what clients see; these are what the journal, the event log
 * and the entity tell each other.
 */
import { Effect, Schema } from "effect"

/**
 * The journal could not be read or written (the database failed, or a row
 * did not decode). `cause` keeps the `SqlError`, so `DatabaseHealth` can tell
 * an unreachable database (503) from a fault of ours.
 */
export class PersistenceError extends Schema.TaggedError<PersistenceError>()("PersistenceError", {
  cause: Schema.Defect
}) {
  /** Wraps an effect's failures in a PersistenceError; defects and interruptions pass as they are. */
  static refail<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, PersistenceError, R> {
    return Effect.mapError(effect, (cause) => new PersistenceError({ cause }))
  }
}

/** A journal write by a node that no longer owns the agent: another node claimed it since. */
export class Fenced extends Schema.TaggedError<Fenced>()("Fenced", {
  agentId: Schema.String,
  epoch: Schema.Number
}) {}

/** The cursor is behind what the agent's event log still holds: events after it were evicted or predate it. */
export class ReplayGap extends Schema.TaggedError<ReplayGap>()("ReplayGap", {
  cursor: Schema.Number,
  /** The oldest id still buffered (the next id when the buffer is empty). */
  oldest: Schema.Number
}) {
  override get message() {
    return `cursor ${this.cursor} is behind the replay buffer (oldest ${this.oldest})`
  }
}

/** A subscriber's own buffer overflowed; its stream ends so the client reconnects from `lastId`. */
export class SubscriberLagged extends Schema.TaggedError<SubscriberLagged>()("SubscriberLagged", {
  /** The last id delivered on the stream before it ended. */
  lastId: Schema.Number
}) {
  override get message() {
    return `subscriber fell behind after event ${this.lastId}`
  }
}
