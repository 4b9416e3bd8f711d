/**
 * Turns whatever went wrong outside a handler's typed errors into the API's
 * error body: schema failures, unreadable or oversized bodies, unknown
 * routes and defects. Applied around the whole API, before its errors are
 * encoded.
 */
import { Api, ApiError } from "@agent-runtime/domain"
import {
  HttpApiBuilder,
  HttpApiError,
  type HttpApp,
  HttpServerError,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { Cause, Effect, Option, Schema } from "effect"
import { ServerConfig } from "../ServerConfig.ts"

const describe = (error: HttpApiError.HttpApiDecodeError) =>
  error.issues.length === 0
    ? error.message
    : error.issues.map((issue) => `${issue.path.length > 0 ? issue.path.join(".") : "value"}: ${issue.message}`)
      .join("; ")

const isBodyTooLarge = (error: HttpServerError.RequestError) =>
  error.cause instanceof Error && error.cause.message === "maxBytes exceeded"

/** The API error a failure from outside the handlers stands for, or none when it is a defect. */
const toApiError = (
  failure: unknown
): Option.Option<ApiError.InvalidRequest | ApiError.NotFound | ApiError.TooLarge> => {
  if (failure instanceof HttpApiError.HttpApiDecodeError) {
    return Option.some(new ApiError.InvalidRequest({ error: `invalid request: ${describe(failure)}` }))
  }
  if (HttpServerError.isServerError(failure)) {
    if (failure._tag === "RouteNotFound") {
      return Option.some(
        new ApiError.NotFound({ error: `no route ${failure.request.method} ${failure.request.url}` })
      )
    }
    if (failure._tag === "RequestError") {
      return Option.some(
        isBodyTooLarge(failure)
          ? new ApiError.TooLarge({ error: "request body too large" })
          : new ApiError.InvalidRequest({ error: "request body is not valid JSON" })
      )
    }
  }
  return Option.none()
}

/** 429 and 503 tell the client when to come back. */
const withRetryAfter = (error: ApiError.RateLimited | ApiError.Unavailable) => {
  const wire = error instanceof ApiError.RateLimited ? ApiError.RateLimited.Wire : ApiError.Unavailable.Wire
  return HttpServerResponse.json(Schema.encodeSync(wire as Schema.Schema<typeof error, unknown>)(error), {
    status: error instanceof ApiError.RateLimited ? 429 : 503,
    headers: { "retry-after": String(Math.max(1, Math.ceil(error.retryAfter ?? 1))) }
  }).pipe(Effect.orDie)
}

export const layer = HttpApiBuilder.middleware(
  Api.Api,
  Effect.map(ServerConfig, (config) => (app: HttpApp.Default) =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const length = Number(request.headers["content-length"] ?? 0)
      if (length > config.maxBodyBytes) {
        return yield* new ApiError.TooLarge({ error: `request body over ${config.maxBodyBytes} bytes` })
      }
      return yield* app
    }).pipe(
      HttpServerRequest.withMaxBodySize(Option.some(config.maxBodyBytes)),
      Effect.catchAllCause((cause): Effect.Effect<
        HttpServerResponse.HttpServerResponse,
        ApiError.InvalidRequest | ApiError.NotFound | ApiError.TooLarge | ApiError.Internal
      > => {
        const failure = Cause.squash(cause)
        if (failure instanceof ApiError.RateLimited || failure instanceof ApiError.Unavailable) {
          return withRetryAfter(failure)
        }
        // Handlers' own API errors and interruptions go on as they are.
        if (Cause.isInterruptedOnly(cause) || ApiError.isApiError(failure)) {
          return Effect.failCause(cause as Cause.Cause<never>)
        }
        return Option.match(toApiError(failure), {
          onSome: (error) => Effect.fail(error),
          onNone: () =>
            Effect.zipRight(
              Effect.logError("request failed", cause),
              Effect.fail(new ApiError.Internal({ error: "internal error" }))
            )
        })
      })
    ))
)
