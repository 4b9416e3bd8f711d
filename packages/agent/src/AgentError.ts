/**
 * The agent package's errors. The API's own errors (`ApiError` in the domain
 * package) are what clients see; these are what the journal, the event log
 * and the entity tell each other.
 */
import { PersistenceError as StorePersistenceError } from "@agent-runtime/store"
import { Schema } from "effect"

/**
 * The journal could not be read or written (the database failed, or a row did not decode): the store's one
 * storage error, shared with every package that reads and writes SQL.
 */
export const PersistenceError = StorePersistenceError.PersistenceError
export type PersistenceError = StorePersistenceError.PersistenceError

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

/** Another connection serves the agent's tools; the new one did not ask to take over. */
export class ApplicationConnected extends Schema.TaggedError<ApplicationConnected>()("ApplicationConnected", {
  holder: Schema.String
}) {
  override get message() {
    return `connection ${this.holder} serves this agent's tools; connect with takeover=true to replace it`
  }
}

/** A message named a connection the agent's owner does not hold (the agent moved, or it was dropped). */
export class ConnectionUnknown extends Schema.TaggedError<ConnectionUnknown>()("ConnectionUnknown", {
  connection: Schema.String
}) {
  override get message() {
    return `no connection ${this.connection} serves this agent here; reconnect`
  }
}

/** A replaced connection sent something other than an answer to a call it holds. */
export class ConnectionReplaced extends Schema.TaggedError<ConnectionReplaced>()("ConnectionReplaced", {
  connection: Schema.String
}) {
  override get message() {
    return `connection ${this.connection} was taken over and holds no such call`
  }
}

/** An answer came for a call that had already ended without it (its deadline, or its connection, went first). */
export class CallEnded extends Schema.TaggedError<CallEnded>()("CallEnded", {
  callId: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `call ${this.callId} already ended (${this.reason}); the model was told its outcome is unknown`
  }
}

/** The agent's owner is draining: a connection made now would end at once; connect again shortly. */
export class Draining extends Schema.TaggedError<Draining>()("Draining", {}) {
  override get message() {
    return "the agent's runner is draining; the agent moves to another runner: connect again shortly"
  }
}

/**
 * An answer to human input that cannot be recorded: `reason` says which of the API's refusals it is
 * (not_found: no such input of the agent; forbidden: `from` is outside its audience and approvers;
 * conflict: it settled otherwise; invalid: the content does not fit the input).
 */
export class AnswerRefused extends Schema.TaggedError<AnswerRefused>()("AnswerRefused", {
  reason: Schema.Literal("not_found", "forbidden", "conflict", "invalid"),
  inputId: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `input ${this.inputId}: ${this.detail}`
  }
}
