/**
 * A gateway failure as the client sees it: an HTTP status and one of the
 * spec's codes. Each protocol module writes it in its own error body (see
 * `ChatCompletions.errorBody` and the others), so the official SDKs raise
 * their typed errors; 429 and 503 carry Retry-After.
 */
import type { ApiError } from "@agent-runtime/domain"
import type { ModelError } from "@agent-runtime/models"
import { Schema } from "effect"

export class GatewayError extends Schema.TaggedError<GatewayError>()("GatewayError", {
  status: Schema.Number,
  code: Schema.String,
  message: Schema.String,
  /** The request field at fault (OpenAI's `param`). */
  param: Schema.optional(Schema.String),
  /** Seconds, sent as Retry-After. */
  retryAfter: Schema.optional(Schema.Number)
}) {}

/** Stops decoding a request: decoders throw this, the handler answers it. */
export const invalid = (message: string, param?: string): never => {
  throw new GatewayError({ status: 400, code: "INVALID_REQUEST", message, ...(param === undefined ? {} : { param }) })
}

export const unauthorized = (message: string) => new GatewayError({ status: 401, code: "UNAUTHORIZED", message })

export const notFound = (message: string) => new GatewayError({ status: 404, code: "NOT_FOUND", message })

export const rateLimited = (message: string, retryAfter: number) =>
  new GatewayError({ status: 429, code: "RATE_LIMITED", message, retryAfter })

export const internal = () => new GatewayError({ status: 500, code: "INTERNAL", message: "internal error" })

/** The node cannot reach its database (see `DatabaseHealth.isUnreachable`): another node, or this one shortly, can serve. */
export const databaseUnreachable = () =>
  new GatewayError({
    status: 503,
    code: "UNAVAILABLE",
    message: "the database cannot be reached from this node; try again shortly",
    retryAfter: 2
  })

/** A model name the tenant cannot use: unknown (or another tenant's), or its provider has no key. */
export const fromModelError = (error: ModelError.UnknownModel | ModelError.ModelKeyMissing): GatewayError =>
  error._tag === "UnknownModel"
    ? new GatewayError({ status: 404, code: "NOT_FOUND", message: error.message, param: "model" })
    : new GatewayError({ status: 400, code: "model_key_missing", message: error.message, param: "model" })

/**
 * A prepaid tenant's credit is spent, its monthly cap reached or its free credit's hourly limit: 402, as the
 * REST API answers.
 */
export const paymentOf = (
  error: ApiError.InsufficientCredit | ApiError.SpendLimit | ApiError.PaymentRequired
): GatewayError =>
  new GatewayError({
    status: 402,
    code: error._tag === "InsufficientCredit"
      ? "INSUFFICIENT_CREDIT"
      : error._tag === "SpendLimit"
      ? "SPEND_LIMIT"
      : "PAYMENT_REQUIRED",
    message: error.error
  })
