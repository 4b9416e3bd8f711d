/**
 * The SDK's errors, one module for the package. They are tagged errors
 * (`_tag`) for `Effect.catchTag`, and plain `Error`s for `try`/`catch`:
 * the Promise API throws them as they are.
 */
import { Schema } from "effect"

/**
 * The runtime answered with an error status: the HTTP `status` and the
 * `{error, code}` of its body (`message` is the body's `error`). A redirect
 * (3xx), which the SDK never follows, is an ApiError with code `REDIRECT`;
 * a body that is not the runtime's is one with code `HTTP_<status>`.
 */
export class ApiError extends Schema.TaggedError<ApiError>()("ApiError", {
  status: Schema.Number,
  code: Schema.String,
  message: Schema.String,
  /** Seconds to wait before retrying, from the `Retry-After` header (429, 503). */
  retryAfter: Schema.optional(Schema.Number)
}) {
  /** Whether `u` is an ApiError, with this code when one is given. */
  static is(u: unknown, code?: string): u is ApiError {
    return u instanceof ApiError && (code === undefined || u.code === code)
  }
}

/**
 * The runtime could not be reached: a refused or broken connection, no
 * answer in time, a body cut short. Requests that are safe to repeat were
 * retried before this was reported.
 */
export class TransportError extends Schema.TaggedError<TransportError>()("TransportError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/** Options refused before anything is sent: an `http:` URL to a remote host, a malformed tool. */
export class InvalidOptions extends Schema.TaggedError<InvalidOptions>()("InvalidOptions", {
  message: Schema.String
}) {}

/**
 * The connection serving the agent's tools was taken over by another
 * (`takeover`): it takes no new calls and has stopped serving. Its `code` is
 * the wire's `APPLICATION_REPLACED`.
 */
export class ApplicationReplaced extends Schema.TaggedError<ApplicationReplaced>()("ApplicationReplaced", {
  message: Schema.String,
  /** The connection that was replaced. */
  connection: Schema.NullOr(Schema.String)
}) {
  get code(): "APPLICATION_REPLACED" {
    return "APPLICATION_REPLACED"
  }
}

/**
 * A structured run's output fit the JSON Schema the runtime checked, but not the Effect Schema it was made
 * from (a refinement, a transformation): the wire's `output_invalid`.
 */
export class OutputInvalid extends Schema.TaggedError<OutputInvalid>()("OutputInvalid", {
  message: Schema.String,
  runId: Schema.String
}) {
  get code(): "output_invalid" {
    return "output_invalid"
  }
}

/** Everything the SDK reports. */
export type SdkError = ApiError | TransportError | InvalidOptions | ApplicationReplaced | OutputInvalid
