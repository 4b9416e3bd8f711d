/**
 * A gateway failure as the client sees it: an HTTP status and one of the
 * spec's codes. Each protocol module writes it in its own error body (see
 * `ChatCompletions.errorBody` and the others), so the official SDKs raise
 * their typed errors; 429 and 503 carry Retry-After.
 */
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

/**
 * A model layer failure of a translated call. The provider's own status
 * stays where it means the same to the client (429, 5xx, 400); a refused
 * provider key is ours, not the client's, so it is 502 rather than 401.
 */
export const fromModelError = (error: ModelError.ModelError): GatewayError => {
  const retry = "retryAfter" in error && error.retryAfter !== undefined ? { retryAfter: Math.ceil(error.retryAfter) } : {}
  switch (error._tag) {
    case "UnknownModel":
      return new GatewayError({ status: 404, code: "NOT_FOUND", message: error.message, param: "model" })
    case "ModelKeyMissing":
      return new GatewayError({ status: 400, code: "model_key_missing", message: error.message, param: "model" })
    case "ModelKeyInvalid":
      return new GatewayError({ status: 502, code: "model_key_invalid", message: error.message })
    case "ModelRateLimited":
      return new GatewayError({ status: 429, code: "RATE_LIMITED", message: error.message, retryAfter: 1, ...retry })
    case "ModelOverloaded":
      return new GatewayError({ status: 503, code: "UNAVAILABLE", message: error.message, retryAfter: 1, ...retry })
    case "ContextOverflow":
      return new GatewayError({ status: 400, code: "INVALID_REQUEST", message: error.message })
    case "ModelRequestRefused":
      return new GatewayError({
        status: error.status >= 400 && error.status < 500 ? error.status : 502,
        code: "INVALID_REQUEST",
        message: error.message
      })
    case "ModelNetworkError":
    case "ModelEndpointRefused":
      return new GatewayError({ status: 502, code: "UPSTREAM_UNREACHABLE", message: error.message })
  }
}
