/**
 * Requests to the runtime: the address checks (HTTPS, except on the local
 * machine), the bearer token, redirects refused, error bodies read as
 * ApiError, and retries of what is safe to repeat.
 *
 * Retries: a request marked `retry` (a GET, or a POST carrying a request id,
 * which the runtime answers once however often it is sent) is sent again on
 * a transport failure, a timeout or a 5xx: 3 more times, 100 ms, 200 ms and
 * 400 ms apart; on 429 up to 8 more times. A `Retry-After` header sets the
 * wait (at most 30 s). Each attempt has its own timeout (10 s, plus the long
 * poll it asks for).
 */
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import type { HttpClientResponse } from "@effect/platform"
import { Duration, Effect, Either, Layer, Option } from "effect"
import { ApiError, InvalidOptions, TransportError } from "../SdkError.ts"

/** Where a request goes and with which token. */
export interface Target {
  readonly baseUrl: URL
  readonly token: string
}

const localHosts = new Set(["localhost", "127.0.0.1", "[::1]"])

/** The base URL, refused unless it is `https:`, or `http:` to this machine. */
export const checkBaseUrl = (input: string | URL): Either.Either<URL, InvalidOptions> => {
  let url: URL
  try {
    url = new URL(input)
  } catch {
    return Either.left(new InvalidOptions({ message: `baseUrl is not a URL: ${String(input)}` }))
  }
  if (url.protocol === "https:") return Either.right(url)
  if (url.protocol === "http:" && localHosts.has(url.hostname)) return Either.right(url)
  return Either.left(
    new InvalidOptions({
      message: `baseUrl must be https (http only for localhost or 127.0.0.1), got ${url.protocol}//${url.host}`
    })
  )
}

export const target = (baseUrl: string | URL, token: string): Effect.Effect<Target, InvalidOptions> =>
  Either.match(checkBaseUrl(baseUrl), {
    onLeft: Effect.fail,
    onRight: (url) =>
      typeof token === "string" && token.length > 0
        ? Effect.succeed({ baseUrl: url, token })
        : Effect.fail(new InvalidOptions({ message: "a token is required" }))
  })

export type Query = Readonly<Record<string, string | number | boolean | undefined>>

/** The full URL of `path` (which starts with `/`) under the base URL, with the defined query parameters. */
export const url = (base: URL, path: string, query?: Query): URL => {
  const out = new URL(base)
  out.pathname = base.pathname.replace(/\/+$/, "") + path
  out.search = ""
  out.hash = ""
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== undefined) out.searchParams.set(name, String(value))
  }
  return out
}

/** A path segment, encoded. */
export const segment = (value: string): string => encodeURIComponent(value)

/**
 * Runs a request with redirects turned off for the fetch client (other
 * clients do not follow them unless asked). Any 3xx that comes back is
 * answered as an error by the callers.
 */
export const noRedirects = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(
    Effect.serviceOption(FetchHttpClient.RequestInit),
    (init) =>
      Effect.provideService(effect, FetchHttpClient.RequestInit, {
        ...Option.getOrElse(init, () => ({})),
        redirect: "manual"
      })
  )

/** The HTTP client the Promise API runs on: fetch (the given one, or the global), redirects refused. */
export const fetchLayer = (fetch?: typeof globalThis.fetch): Layer.Layer<HttpClient.HttpClient> => {
  const base = Layer.merge(FetchHttpClient.layer, Layer.succeed(FetchHttpClient.RequestInit, { redirect: "manual" }))
  return fetch === undefined ? base : Layer.provideMerge(base, Layer.succeed(FetchHttpClient.Fetch, fetch))
}

/** `Retry-After` in seconds (a number, or an HTTP date), when the answer has one. */
export const retryAfter = (headers: Readonly<Record<string, string | undefined>>): number | undefined => {
  const value = headers["retry-after"]
  if (value === undefined) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds)) return Math.max(0, seconds)
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000)
}

/** The ApiError for an answer that is not a success, from its `{error, code}` body when it has one. */
export const apiError = (
  status: number,
  headers: Readonly<Record<string, string | undefined>>,
  text: string
): ApiError => {
  const after = retryAfter(headers)
  const extra = after === undefined ? {} : { retryAfter: after }
  if (status >= 300 && status < 400) {
    const location = headers["location"]
    return new ApiError({
      status,
      code: "REDIRECT",
      message: `the runtime answered a redirect (${status}${
        location === undefined ? "" : ` to ${location}`
      }); redirects are never followed`,
      ...extra
    })
  }
  try {
    const body = JSON.parse(text) as unknown
    if (typeof body === "object" && body !== null) {
      const { code, error } = body as { readonly error?: unknown; readonly code?: unknown }
      if (typeof code === "string" && typeof error === "string") {
        return new ApiError({ status, code, message: error, ...extra })
      }
    }
  } catch {
    // not the runtime's body
  }
  return new ApiError({
    status,
    code: `HTTP_${status}`,
    message: text.length > 0 ? text.slice(0, 500) : `the runtime answered HTTP ${status}`,
    ...extra
  })
}

export const transportError = (cause: unknown, what: string): TransportError =>
  new TransportError({
    message: `${what}: ${cause instanceof Error ? cause.message : String(cause)}`,
    cause
  })

export interface Retry {
  /** Retries after a transport failure or a 5xx. */
  readonly attempts: number
  /** Retries after a 429. */
  readonly rateLimited: number
  readonly initialDelay: Duration.Duration
  readonly maxRetryAfter: Duration.Duration
}

export const defaultRetry: Retry = {
  attempts: 3,
  rateLimited: 8,
  initialDelay: Duration.millis(100),
  maxRetryAfter: Duration.seconds(30)
}

/** How long to wait before the next attempt, or None to give up. */
export const retryDelay = (
  error: ApiError | TransportError,
  failures: { readonly other: number; readonly rateLimited: number },
  policy: Retry = defaultRetry
): Option.Option<Duration.Duration> => {
  const backoff = (n: number) => Duration.times(policy.initialDelay, 2 ** n)
  const after = (seconds: number | undefined, n: number) =>
    seconds === undefined ? backoff(n) : Duration.min(Duration.seconds(seconds), policy.maxRetryAfter)
  if (error._tag === "TransportError") {
    return failures.other < policy.attempts ? Option.some(backoff(failures.other)) : Option.none()
  }
  if (error.status === 429) {
    return failures.rateLimited < policy.rateLimited
      ? Option.some(after(error.retryAfter, Math.min(failures.rateLimited, 5)))
      : Option.none()
  }
  if (error.status >= 500) {
    return failures.other < policy.attempts ? Option.some(after(error.retryAfter, failures.other)) : Option.none()
  }
  return Option.none()
}

/** Repeats `attempt` as `retryDelay` says. */
export const withRetries = <A, R>(
  attempt: Effect.Effect<A, ApiError | TransportError, R>,
  policy: Retry = defaultRetry
): Effect.Effect<A, ApiError | TransportError, R> => {
  const loop = (other: number, rateLimited: number): Effect.Effect<A, ApiError | TransportError, R> =>
    Effect.catchAll(attempt, (error) =>
      Option.match(retryDelay(error, { other, rateLimited }, policy), {
        onNone: () => Effect.fail(error),
        onSome: (delay) =>
          Effect.zipRight(
            Effect.sleep(delay),
            error._tag === "ApiError" && error.status === 429
              ? loop(other, rateLimited + 1)
              : loop(other + 1, rateLimited)
          )
      }))
  return loop(0, 0)
}

export interface Request {
  readonly method: "GET" | "POST" | "PUT" | "DELETE"
  readonly path: string
  readonly query?: Query | undefined
  readonly json?: unknown
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** Whether sending it again is safe (a GET, or a POST with a request id). */
  readonly retry: boolean
  /** Per attempt; 10 s when absent. */
  readonly timeout?: Duration.DurationInput | undefined
}

export const defaultTimeout = Duration.seconds(10)

/** The request as the HTTP client sends it. */
export const build = (target: Target, request: Request): HttpClientRequest.HttpClientRequest => {
  let out = HttpClientRequest.make(request.method)(url(target.baseUrl, request.path, request.query)).pipe(
    HttpClientRequest.bearerToken(target.token),
    HttpClientRequest.acceptJson
  )
  if (request.headers !== undefined) out = HttpClientRequest.setHeaders(out, request.headers)
  if (request.json !== undefined) out = HttpClientRequest.bodyUnsafeJson(out, request.json)
  return out
}

const readText = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.mapError(response.text, (cause) => transportError(cause, "reading the answer failed"))

/** A 2xx answer: its parsed JSON (undefined when empty) and its headers. */
export interface Answer {
  readonly body: unknown
  readonly headers: Readonly<Record<string, string | undefined>>
}

/** One attempt: the parsed JSON of a 2xx answer, else its ApiError. */
export const attempt = (
  target: Target,
  request: Request
): Effect.Effect<unknown, ApiError | TransportError, HttpClient.HttpClient> =>
  Effect.map(attemptAnswer(target, request), (answer) => answer.body)

/** One attempt: the parsed JSON and headers of a 2xx answer, else its ApiError. */
const attemptAnswer = (
  target: Target,
  request: Request
): Effect.Effect<Answer, ApiError | TransportError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.execute(build(target, request)).pipe(
      noRedirects,
      Effect.mapError((cause) => transportError(cause, `${request.method} ${request.path} failed`))
    )
    const text = yield* readText(response)
    if (response.status < 200 || response.status >= 300) {
      return yield* Effect.fail(apiError(response.status, response.headers, text))
    }
    if (text.length === 0) return { body: undefined, headers: response.headers }
    try {
      return { body: JSON.parse(text) as unknown, headers: response.headers }
    } catch {
      return yield* Effect.fail(
        new ApiError({ status: response.status, code: "INVALID_RESPONSE", message: "the answer is not JSON" })
      )
    }
  }).pipe(
    Effect.timeoutFail({
      duration: request.timeout ?? defaultTimeout,
      onTimeout: () =>
        new TransportError({
          message: `${request.method} ${request.path}: no answer within ${
            Duration.format(Duration.decode(request.timeout ?? defaultTimeout))
          }`
        })
    })
  )

/** A request and its JSON answer, retried when `request.retry` says it is safe. */
export const json = (
  target: Target,
  request: Request,
  policy: Retry = defaultRetry
): Effect.Effect<unknown, ApiError | TransportError, HttpClient.HttpClient> =>
  request.retry ? withRetries(attempt(target, request), policy) : attempt(target, request)

/**
 * The query of the next page a `Link: <...>; rel="next"` header (RFC 8288) names, when it names one. Only the
 * query is taken: the next page is asked of the same path under the same base URL, so a proxy that rewrites
 * paths, or a link to another host, cannot send the token elsewhere.
 */
export const nextPageQuery = (link: string | undefined): Option.Option<Query> => {
  const next = link?.split(",").map((value) => /^\s*<([^>]*)>\s*;\s*rel="?next"?\s*$/i.exec(value)).find(
    (match) => match !== null && match !== undefined
  )
  if (next === undefined || next === null) return Option.none()
  return Option.some(Object.fromEntries(new URL(next[1]!, "http://localhost").searchParams))
}

/**
 * Every item of a paged list (a GET answering a JSON array): the first page, then each page its `Link` header
 * names, until one names none. Each page is retried like any GET.
 */
export const allPages = (
  target: Target,
  request: Request,
  policy: Retry = defaultRetry
): Effect.Effect<ReadonlyArray<unknown>, ApiError | TransportError, HttpClient.HttpClient> => {
  const page = (query: Query | undefined, seen: ReadonlyArray<unknown>): Effect.Effect<
    ReadonlyArray<unknown>,
    ApiError | TransportError,
    HttpClient.HttpClient
  > =>
    Effect.flatMap(withRetries(attemptAnswer(target, { ...request, query }), policy), (answer) => {
      if (!Array.isArray(answer.body)) {
        return Effect.fail(
          new ApiError({ status: 200, code: "INVALID_RESPONSE", message: "the answer is not a JSON array" })
        )
      }
      const all = [...seen, ...answer.body]
      return Option.match(nextPageQuery(answer.headers["link"]), {
        onNone: () => Effect.succeed(all),
        onSome: (next) => page(next, all)
      })
    })
  return page(request.query, [])
}
