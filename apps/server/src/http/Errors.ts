/**
 * Turns whatever went wrong outside a handler's typed errors into the API's
 * error body: schema failures, unreadable or oversized bodies, unknown
 * routes and defects. Applied around the whole API, before its errors are
 * encoded.
 */
import { Api, ApiError, Validation, Volume } from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import {
  HttpApiBuilder,
  type HttpApiEndpoint,
  HttpApiError,
  HttpApiSchema,
  type HttpApp,
  HttpServerError,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { Cause, Effect, type Layer, Option, type ParseResult, Schema } from "effect"
import * as Http from "node:http"
import type { Duplex } from "node:stream"
import { ServerConfig } from "../ServerConfig.ts"

type Issue = HttpApiError.HttpApiDecodeError["issues"][number]

/** A field a body's schema does not know (`Api.payloadOptions` refuses it): said so, not as Effect's list of known ones. */
const isUnknownField = (issue: Issue) => issue._tag === "Unexpected" && typeof issue.path.at(-1) === "string"

/**
 * An optional field's other alternative, absence ("Expected undefined"), when what is wrong with its value is
 * named too: the value is there, and the other problem is the one to fix.
 */
const isAbsentAlternative = (issue: Issue, issues: ReadonlyArray<Issue>) =>
  issue._tag === "Type" && issue.message.startsWith("Expected undefined, actual") &&
  issues.some((other) =>
    other !== issue && other.path.length >= issue.path.length &&
    issue.path.every((key, index) => other.path[index] === key)
  )

/** Each failing field and why, each said once (a union's members may name the same field). */
const describe = (error: HttpApiError.HttpApiDecodeError) =>
  error.issues.length === 0
    ? error.message
    : Array.from(
      new Set(
        error.issues.filter((issue) => !isAbsentAlternative(issue, error.issues)).map((issue) =>
          `${issue.path.length > 0 ? issue.path.join(".") : "value"}: ${
            isUnknownField(issue) ? "unknown field" : issue.message
          }`
        )
      )
    ).join("; ")

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
          : unreadableJson
      )
    }
  }
  return Option.none()
}

/** An API error's `Wire` schema: its `{error, code}` body and its status. */
const wireOf = (error: ApiError.ApiError) =>
  (error.constructor as unknown as { readonly Wire: Schema.Schema<ApiError.ApiError, unknown> }).Wire

/** The answer for an API error: its status, its `{error, code}` body, and Retry-After for 429 and 503. */
export const answerOf = (error: ApiError.ApiError) => {
  const wire = wireOf(error)
  return {
    status: HttpApiSchema.getStatusError(wire),
    body: Schema.encodeSync(wire)(error),
    headers: error instanceof ApiError.RateLimited || error instanceof ApiError.Unavailable
      ? { "retry-after": String(Math.max(1, Math.ceil(error.retryAfter ?? 1))) }
      : undefined
  }
}

/** 429 and 503 tell the client when to come back. */
const withRetryAfter = (error: ApiError.RateLimited | ApiError.Unavailable) => {
  const { body, headers, status } = answerOf(error)
  return HttpServerResponse.json(body, { status, headers }).pipe(Effect.orDie)
}

/**
 * 503 for a request this node could not carry through: it needed the
 * database while the node could not reach it, or it was cut short (the node
 * stopping, a call to the agent's owner interrupted). A write may have taken
 * effect before, so its answer says the outcome is unknown; a prompt sent
 * again with the same requestId runs once.
 */
const unavailable = (method: string | undefined, why: string, retryAfter: number) =>
  new ApiError.Unavailable({
    error: method === "GET" || method === "HEAD"
      ? `${why}; try again shortly`
      : `${why}; whether this request took effect is unknown (a prompt sent again with the same requestId ` +
        "runs once)",
    retryAfter
  })

/**
 * The API error a request answers with when it failed with `cause`: a handler's own API error as it is, a
 * request cut short or a database out of reach as 503, a schema or body failure as 400 (see `toApiError`),
 * anything else (a defect, logged here) as 500.
 */
export const failureOf = (
  health: DatabaseHealth.DatabaseHealth["Type"],
  method: string | undefined,
  cause: Cause.Cause<unknown>
): Effect.Effect<ApiError.ApiError> => {
  // Cut short on this side: the spec's 503, not the platform's bare one (a client that left hears none).
  if (Cause.isInterruptedOnly(cause)) {
    return Effect.succeed(unavailable(method, "the request was cut short on this node", 1))
  }
  const failure = Cause.squash(cause)
  if (ApiError.isApiError(failure)) return Effect.succeed(failure)
  // The node cannot reach the database now (the outage itself is logged once, by DatabaseHealth).
  if (DatabaseHealth.isUnreachable(cause)) {
    health.observe(cause)
    return Effect.succeed(unavailable(method, "the database cannot be reached from this node", 2))
  }
  return Option.match(toApiError(failure), {
    onSome: Effect.succeed<ApiError.ApiError>,
    onNone: () =>
      Effect.as(Effect.logError("request failed", cause), new ApiError.Internal({ error: "internal error" }))
  })
}

/**
 * A group's handlers, taking handlers that may also fail with `PersistenceError`: the services say a
 * database fault in their types, the endpoints do not. Each handler added is run through
 * `PersistenceError.orDie`, so the fault becomes the defect of its cause (what those services used to die
 * with), which `failureOf` answers 503 when the database cannot be reached and 500 otherwise. Groups whose
 * services touch the database build on these, so it is mapped in this one place rather than in each handler.
 */
export const handlers = <E, Provides, R, Endpoints extends HttpApiEndpoint.HttpApiEndpoint.Any>(
  group: HttpApiBuilder.Handlers<E, Provides, R, Endpoints>
): HttpApiBuilder.Handlers<E | PersistenceError.PersistenceError, Provides, R, Endpoints> => {
  // The platform's own `handle` and `handleRaw`, given a handler that dies instead; what they answer is
  // wrapped again, so every handler of the group is.
  const adding = (method: "handle" | "handleRaw") => {
    const add = group[method] as (this: typeof group, ...args: ReadonlyArray<unknown>) => typeof group
    return {
      value: (
        name: string,
        handler: (request: unknown) => Effect.Effect<unknown, unknown, unknown>,
        options?: unknown
      ) => handlers(add.call(group, name, (request: unknown) => PersistenceError.orDie(handler(request)), options))
    }
  }
  return Object.create(group, { handle: adding("handle"), handleRaw: adding("handleRaw") })
}

/** A payload, path or query the endpoint's schema refused, as the API refuses it (each field and why). */
export const invalidInput = (error: ParseResult.ParseError) =>
  Effect.flatMap(
    HttpApiError.HttpApiDecodeError.fromParseError(error),
    (decodeError) => Effect.fail(new ApiError.InvalidRequest({ error: `invalid request: ${describe(decodeError)}` }))
  )

const methodOf = Effect.map(
  Effect.serviceOption(HttpServerRequest.HttpServerRequest),
  (request) => Option.getOrUndefined(request)?.method
)

/**
 * Why a request's URL cannot be served, if it cannot: escapes that are not
 * UTF-8 name nothing, and a NUL (%00) could reach PostgreSQL as part of an
 * id or a cursor, which refuses it in text. Checked once here, before the
 * router, instead of in every handler that takes a path or query value.
 */
const urlProblem = (url: string): string | undefined => {
  const query = url.indexOf("?")
  const path = query === -1 ? url : url.slice(0, query)
  try {
    if (decodeURIComponent(path).includes("\u0000")) return "path: must not contain NUL (%00)"
  } catch {
    return "path: not valid percent-encoded UTF-8"
  }
  if (query === -1) return undefined
  for (const pair of url.slice(query + 1).split("&")) {
    const equals = pair.indexOf("=")
    const name = equals === -1 ? pair : pair.slice(0, equals)
    try {
      if (decodeURIComponent(pair.replaceAll("+", " ")).includes("\u0000")) {
        return `${JSON.stringify(decodeURIComponent(name)).slice(1, -1)}: must not contain NUL (%00)`
      }
    } catch {
      return `${name}: not valid percent-encoded UTF-8`
    }
  }
  return undefined
}

const notJson = Effect.fail(
  new ApiError.InvalidRequest({ error: "invalid request: the body must be JSON (content-type application/json)" })
)

/**
 * The request as the router and handlers see it, with its body checked
 * where it is decoded (so authentication still runs first, and routes that
 * take no body never read one): JSON with a string or key PostgreSQL
 * cannot store (NUL, a lone surrogate) or nested deeper than
 * `Validation.maxJsonDepth` is refused naming the field (see
 * `Validation.jsonInputProblem`); form and multipart bodies are refused
 * outright, since the API takes JSON only and their decoders would hand on
 * what the JSON check refuses (and a malformed multipart body failed as a
 * defect).
 */
const checkedBody = (request: HttpServerRequest.HttpServerRequest): HttpServerRequest.HttpServerRequest =>
  Object.create(request, {
    json: {
      get: () => Effect.flatMap(request.json, checkedJson)
    },
    urlParamsBody: { get: () => notJson },
    multipart: { get: () => notJson }
  })

/** A JSON body that cannot be read or parsed. */
export const unreadableJson = new ApiError.InvalidRequest({ error: "request body is not valid JSON" })

/** A parsed JSON body, refused naming the field when PostgreSQL could not store it or it nests too deep. */
export const checkedJson = (json: unknown): Effect.Effect<unknown, ApiError.InvalidRequest> => {
  const problem = Validation.jsonInputProblem(json)
  return problem === undefined
    ? Effect.succeed(json)
    : Effect.fail(new ApiError.InvalidRequest({ error: `invalid request: ${problem.path}: ${problem.message}` }))
}

/** Routes whose body is a file: up to the largest file allowed, not MAX_BODY_BYTES. */
const fileRoute = /^\/v1\/(volumes\/[^/?]+\/file|agents\/[^/?]+\/uploads\/)/

export const layer: Layer.Layer<never, never, DatabaseHealth.DatabaseHealth | ServerConfig> = HttpApiBuilder.middleware(
  Api.Api,
  Effect.map(
    Effect.all([ServerConfig, DatabaseHealth.DatabaseHealth, Effect.orDie(Volumes.config)]),
    ([config, health, files]) => (app: HttpApp.Default) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const limit = fileRoute.test(request.url)
          ? files.maxFileBytes ?? Volume.defaultMaxFileBytes
          : config.maxBodyBytes
        const length = Number(request.headers["content-length"] ?? 0)
        if (length > limit) {
          return yield* new ApiError.TooLarge({ error: `request body over ${limit} bytes` })
        }
        const refused = urlProblem(request.url)
        if (refused !== undefined) return yield* new ApiError.InvalidRequest({ error: `invalid request: ${refused}` })
        return yield* Effect.provideService(app, HttpServerRequest.HttpServerRequest, checkedBody(request)).pipe(
          HttpServerRequest.withMaxBodySize(Option.some(limit))
        )
      }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.flatMap(methodOf, (method) => failureOf(health, method, cause)).pipe(
            Effect.flatMap((error) =>
              error instanceof ApiError.RateLimited || error instanceof ApiError.Unavailable
                ? withRetryAfter(error)
                // A handler's own API errors go on as they are: the API encodes each with its Wire schema.
                : Effect.fail(
                  error as ApiError.InvalidRequest | ApiError.NotFound | ApiError.TooLarge | ApiError.Internal
                )
            )
          )
        )
      )
  )
)

/** A request node:http refused while parsing it, as one of the spec's errors. */
const parseFailure = (error: NodeJS.ErrnoException) =>
  error.code === "HPE_HEADER_OVERFLOW" || error.code === "HPE_CHUNK_EXTENSIONS_OVERFLOW"
    ? { status: 413, code: "TOO_LARGE", message: "request headers too large" }
    : { status: 400, code: "INVALID_REQUEST", message: "malformed HTTP request" }

/**
 * Requests node:http refuses before any handler sees them (malformed
 * framing, headers over its limit) answer with an error body too, instead
 * of node's bare status line; `body` writes it in the listener's own shape
 * (the path is the request line's, when the parser got that far). As in
 * node's default, nothing is written once an answer on the connection has
 * started, and the connection is closed.
 */
export const answerClientErrors = (
  server: Http.Server,
  body: (error: { status: number; code: string; message: string }, path: string | undefined) => unknown
): Http.Server =>
  server.on("clientError", (error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) => {
    // node's own check (lib/_http_server.js): an answer already under way on this socket must not be corrupted.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage
    if (error.code !== "ECONNRESET" && socket.writable && inFlight?.headersSent !== true) {
      const failure = parseFailure(error)
      const path = error.rawPacket?.toString("latin1").match(/^\S+ ([^\s?]+)/)?.[1]
      const text = JSON.stringify(body(failure, path))
      socket.write(
        `HTTP/1.1 ${failure.status} ${Http.STATUS_CODES[failure.status]}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`
      )
    }
    socket.destroy()
  })

/** The REST API's body for a request node:http refused. */
export const restClientError = (error: { code: string; message: string }) => ({
  error: error.message,
  code: error.code
})
