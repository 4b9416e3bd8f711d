/**
 * The errors of the REST API. Each is a tagged error for typed handling in
 * code and travels on the wire as the spec's body `{error, code}` with its own
 * HTTP status; `ApiError.X.Wire` is the schema endpoints declare.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

/** The spec's error body. */
export const ErrorBody = Schema.Struct({
  error: Schema.String.annotations({ description: "human-readable" }),
  code: Schema.String.annotations({ description: "machine code" })
}).annotations({ identifier: "ErrorBody" })

type ErrorClass<Self> = Schema.Schema<Self, any> & {
  new(props: { readonly error: string }): Self
}

/** Seconds a client should wait before retrying; sent as the Retry-After header, not in the body. */
const retryAfter = Schema.optional(Schema.Number)

const wire = <Self extends { readonly error: string }, const Code extends string>(
  self: ErrorClass<Self>,
  code: Code,
  status: number
) =>
  Schema.transform(
    Schema.Struct({ error: Schema.String, code: Schema.Literal(code) }),
    Schema.typeSchema(self),
    {
      strict: true,
      decode: (body) => new self({ error: body.error }),
      encode: (error) => ({ error: error.error, code })
    }
  ).annotations({
    ...HttpApiSchema.annotations({ status }),
    identifier: code,
    description: `{error, code: "${code}"} with HTTP ${status}`
  })

export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", { error: Schema.String }) {
  static readonly Wire = wire(this, "INVALID_REQUEST", 400)
}

export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", { error: Schema.String }) {
  static readonly Wire = wire(this, "UNAUTHORIZED", 401)
}

export class PaymentRequired extends Schema.TaggedError<PaymentRequired>()("PaymentRequired", {
  error: Schema.String
}) {
  static readonly Wire = wire(this, "PAYMENT_REQUIRED", 402)
}

export class SpendLimit extends Schema.TaggedError<SpendLimit>()("SpendLimit", { error: Schema.String }) {
  static readonly Wire = wire(this, "SPEND_LIMIT", 402)
}

export class InsufficientCredit extends Schema.TaggedError<InsufficientCredit>()("InsufficientCredit", {
  error: Schema.String
}) {
  static readonly Wire = wire(this, "INSUFFICIENT_CREDIT", 402)
}

export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", { error: Schema.String }) {
  static readonly Wire = wire(this, "FORBIDDEN", 403)
}

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", { error: Schema.String }) {
  static readonly Wire = wire(this, "NOT_FOUND", 404)
}

export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", { error: Schema.String }) {
  static readonly Wire = wire(this, "CONFLICT", 409)
}

export class IdempotencyConflict extends Schema.TaggedError<IdempotencyConflict>()("IdempotencyConflict", {
  error: Schema.String
}) {
  static readonly Wire = wire(this, "IDEMPOTENCY_CONFLICT", 409)
}

export class IdempotencyInProgress extends Schema.TaggedError<IdempotencyInProgress>()("IdempotencyInProgress", {
  error: Schema.String
}) {
  static readonly Wire = wire(this, "IDEMPOTENCY_IN_PROGRESS", 409)
}

export class ApplicationConnected extends Schema.TaggedError<ApplicationConnected>()("ApplicationConnected", {
  error: Schema.String
}) {
  static readonly Wire = wire(this, "APPLICATION_CONNECTED", 409)
}

export class ApplicationNotConnected
  extends Schema.TaggedError<ApplicationNotConnected>()("ApplicationNotConnected", { error: Schema.String })
{
  static readonly Wire = wire(this, "APPLICATION_NOT_CONNECTED", 409)
}

/** The connection was taken over (takeover=true) and holds no call this message could answer. */
export class ApplicationReplaced
  extends Schema.TaggedError<ApplicationReplaced>()("ApplicationReplaced", { error: Schema.String })
{
  static readonly Wire = wire(this, "APPLICATION_REPLACED", 409)
}

export class ReplayGap extends Schema.TaggedError<ReplayGap>()("ReplayGap", { error: Schema.String }) {
  static readonly Wire = wire(this, "REPLAY_GAP", 409)
}

export class AgentKeyless extends Schema.TaggedError<AgentKeyless>()("AgentKeyless", { error: Schema.String }) {
  static readonly Wire = wire(this, "AGENT_KEYLESS", 409)
}

export class Gone extends Schema.TaggedError<Gone>()("Gone", { error: Schema.String }) {
  static readonly Wire = wire(this, "GONE", 410)
}

export class TooLarge extends Schema.TaggedError<TooLarge>()("TooLarge", { error: Schema.String }) {
  static readonly Wire = wire(this, "TOO_LARGE", 413)
}

/** Answered with a `Retry-After` header. */
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  error: Schema.String,
  retryAfter
}) {
  static readonly Wire = wire(this, "RATE_LIMITED", 429)
}

export class Internal extends Schema.TaggedError<Internal>()("Internal", { error: Schema.String }) {
  static readonly Wire = wire(this, "INTERNAL", 500)
}

/** Answered with a `Retry-After` header. */
export class Unavailable extends Schema.TaggedError<Unavailable>()("Unavailable", {
  error: Schema.String,
  retryAfter
}) {
  static readonly Wire = wire(this, "UNAVAILABLE", 503)
}

const all = [
  InvalidRequest,
  Unauthorized,
  PaymentRequired,
  SpendLimit,
  InsufficientCredit,
  Forbidden,
  NotFound,
  Conflict,
  IdempotencyConflict,
  IdempotencyInProgress,
  ApplicationConnected,
  ApplicationNotConnected,
  ApplicationReplaced,
  ReplayGap,
  AgentKeyless,
  Gone,
  TooLarge,
  RateLimited,
  Internal,
  Unavailable
] as const

/** Every API error, for exhaustive handling. */
export type ApiError = InstanceType<(typeof all)[number]>

export const isApiError = (u: unknown): u is ApiError => all.some((error) => u instanceof error)
