/**
 * The one way out to a URL a tenant supplied: model provider base URLs now;
 * webhooks, tool servers, MCP sources and OTLP endpoints later.
 *
 * A URL must be https to public unicast addresses only. It is checked when
 * saved (`check`) and again at every call; the connection itself goes through
 * an undici connect hook that resolves the name once, checks every address
 * and connects to a checked one, so a DNS answer that changes between check
 * and connect (rebinding) cannot reach a private address. Redirects are never
 * followed. `ALLOW_PRIVATE_URLS=true` lifts the public/https rule for
 * self-hosted setups (local model servers) and tests.
 */
import { Cause, Config, type ConfigError, Context, Duration, Effect, Exit, Layer, Runtime } from "effect"
import {
  Agent,
  buildConnector,
  type Dispatcher,
  fetch as undiciFetch,
  request as undiciRequest,
  type RequestInit as UndiciRequestInit
} from "undici"
import * as EgressError from "./EgressError.ts"
import * as Address from "./internal/address.ts"
import { Resolver } from "./Resolver.ts"

export interface Options {
  /** Lifts the public/https rule: http and private, loopback or link-local addresses are allowed. */
  readonly allowPrivate: boolean
  /** Time to open the TCP connection and finish the TLS handshake, per address tried. Default 10 seconds. */
  readonly connectTimeout?: Duration.DurationInput
  /** Time for the name lookup. Default 10 seconds. */
  readonly resolveTimeout?: Duration.DurationInput
}

export interface Service {
  readonly allowPrivate: boolean
  /** The save-time check: the parsed URL, or why it may not be called. */
  readonly check: (url: string | URL) => Effect.Effect<URL, EgressError.EgressError>
  /** Checks again, then requests through `dispatcher`; a 3xx is returned as it is. Interruption aborts the request. */
  readonly fetch: (url: string | URL, init?: RequestInit) => Effect.Effect<Response, EgressError.EgressError>
  /** The undici dispatcher whose connect hook checks and pins every address. */
  readonly dispatcher: Dispatcher
  /**
   * A `fetch` for SDK clients (model SDKs take a custom fetch): checks the URL, goes through
   * `dispatcher`, never follows redirects. A refusal rejects with the `EgressError`.
   */
  readonly fetchFunction: typeof globalThis.fetch
  /**
   * Checks the URL, then sends with undici's `request` through `dispatcher`: the answer's body is a Node
   * stream, without fetch's WHATWG request, response and streams around it, for a caller that reads a
   * streamed answer on every turn. Never follows redirects. A refusal rejects with the `EgressError`.
   */
  readonly requestFunction: (url: string | URL, options: RequestOptions) => Promise<Dispatcher.ResponseData>
}

/** What `requestFunction` sends. */
export interface RequestOptions {
  readonly method: Dispatcher.HttpMethod
  readonly headers: Record<string, string>
  readonly body?: string
  readonly signal?: AbortSignal | undefined
}

export class Egress extends Context.Tag("@agent-runtime/egress/Egress")<Egress, Service>() {}

/** Connect errors after which the next checked address of the name is worth trying. */
const tryNextAddress = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "ETIMEDOUT",
  "UND_ERR_CONNECT_TIMEOUT"
])

const codeOf = (error: unknown): string => {
  if (typeof error !== "object" || error === null) return "error"
  const { code, name } = error as { code?: unknown; name?: unknown }
  return typeof code === "string" ? code : typeof name === "string" ? name : "error"
}

/** The refusal inside a rejected undici call, if it came from the connect hook. */
const egressErrorIn = (error: unknown): EgressError.EgressError | undefined => {
  for (let current = error, depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    if (current instanceof EgressError.EgressError) return current
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/** undici's fetch fails with `TypeError("fetch failed")`; the reason is its cause. Only the code is kept. */
const failureOf = (error: unknown, host: string): EgressError.EgressError =>
  egressErrorIn(error) ??
    EgressError.make("connect_failed", host, codeOf((error as { cause?: unknown }).cause ?? error))

const notHttps = (host: string | undefined, protocol: string, allowPrivate: boolean) =>
  EgressError.make(
    "not_https",
    host === "" ? undefined : host,
    `the ${protocol} scheme is not allowed; ${allowPrivate ? "use http or https" : "use https"}`
  )

/** A global `Request` as a URL and init for undici's own fetch, which only knows its own Request class. */
const unpackRequest = (request: Request, init: RequestInit | undefined): RequestInit => {
  const fromRequest: RequestInit & { duplex?: "half" } = {
    method: request.method,
    headers: request.headers,
    signal: request.signal,
    ...(request.body === null ? {} : { body: request.body, duplex: "half" as const })
  }
  return { ...fromRequest, ...init }
}

export const make = (options: Options) =>
  Effect.gen(function*() {
    const resolver = yield* Resolver
    const runtime = yield* Effect.runtime<never>()
    const { allowPrivate } = options
    const connectTimeout = Duration.toMillis(options.connectTimeout ?? Duration.seconds(10))
    const resolveTimeout = options.resolveTimeout ?? Duration.seconds(10)

    const checkAddress = (host: string, address: string): Effect.Effect<string, EgressError.EgressError> => {
      const parsed = Address.parseLiteral(address)
      if (parsed === undefined) {
        return Effect.fail(
          EgressError.make(
            "resolution_failed",
            host,
            `the resolver answered ${JSON.stringify(address)}, not an address`
          )
        )
      }
      const why = allowPrivate ? undefined : Address.refusal(parsed)
      return why === undefined
        ? Effect.succeed(address)
        : Effect.fail(EgressError.make("private_address", host, `${address} is not a public address: ${why}`))
    }

    /** The addresses to connect to for `hostname`: resolved once, every one checked. */
    const addressesOf = (
      hostname: string,
      host: string
    ): Effect.Effect<ReadonlyArray<string>, EgressError.EgressError> => {
      if (Address.parseLiteral(hostname) !== undefined) {
        return Effect.map(checkAddress(host, Address.unbracket(hostname)), (address) => [address])
      }
      if (!allowPrivate && Address.isLocalhostName(hostname)) {
        return Effect.fail(EgressError.make("private_address", host, "localhost names are this machine"))
      }
      return resolver.lookupAll(hostname).pipe(
        Effect.timeoutFail({
          duration: resolveTimeout,
          onTimeout: () => EgressError.make("resolution_failed", host, "the name lookup timed out")
        }),
        Effect.flatMap((answers) =>
          answers.length === 0
            ? Effect.fail(EgressError.make("resolution_failed", host, "the name has no addresses"))
            : Effect.forEach(answers, (answer) => checkAddress(host, answer.address))
        )
      )
    }

    const check = (input: string | URL): Effect.Effect<URL, EgressError.EgressError> =>
      Effect.gen(function*() {
        const url = yield* Effect.try({
          try: () => new URL(input),
          catch: () => EgressError.make("invalid_url", undefined, "not a valid absolute URL")
        })
        if (!(url.protocol === "https:" || (allowPrivate && url.protocol === "http:"))) {
          return yield* notHttps(url.host, url.protocol, allowPrivate)
        }
        if (url.username !== "" || url.password !== "") {
          return yield* EgressError.make(
            "credentials_in_url",
            url.host,
            "the URL carries a user name or password; send credentials in headers"
          )
        }
        yield* addressesOf(url.hostname, url.host)
        return url
      })

    const runOrReject = <A>(effect: Effect.Effect<A, EgressError.EgressError>): Promise<A> =>
      Runtime.runPromiseExit(runtime)(effect).then((exit) =>
        Exit.isSuccess(exit) ? exit.value : Promise.reject(Cause.squash(exit.cause))
      )

    const connectTo = buildConnector({ timeout: connectTimeout })

    // undici calls this for every new connection, whoever made the request (fetch, fetchFunction, the dispatcher).
    const connect: buildConnector.connector = (connectOptions, callback) => {
      const host = connectOptions.host ?? connectOptions.hostname
      const addresses = !allowPrivate && connectOptions.protocol !== "https:"
        ? Effect.fail(notHttps(host, connectOptions.protocol, allowPrivate))
        : addressesOf(connectOptions.hostname, host)
      Runtime.runCallback(runtime)(addresses, {
        onExit: (exit) => {
          if (Exit.isFailure(exit)) {
            // undici's own connector never answers synchronously; keep it that way for a refusal from a quick resolver.
            const error = Cause.squash(exit.cause) as Error
            return queueMicrotask(() => callback(error, null))
          }
          // The socket goes to the checked address; SNI and the certificate check stay on the name.
          const servername = connectOptions.servername ??
            (Address.parseLiteral(connectOptions.hostname) === undefined ? connectOptions.hostname : undefined)
          const attempt = (index: number): void =>
            connectTo({
              ...connectOptions,
              hostname: exit.value[index]!,
              ...(servername === undefined ? {} : { servername })
            }, (...result) => {
              if (result[0] !== null && index + 1 < exit.value.length && tryNextAddress.has(codeOf(result[0]))) {
                return attempt(index + 1)
              }
              callback(...result)
            })
          attempt(0)
        }
      })
    }

    const dispatcher = yield* Effect.acquireRelease(
      Effect.sync(() => new Agent({ connect })),
      // Lets finished exchanges close cleanly; anything still streaming after a grace period is cut.
      (agent) =>
        Effect.promise(() => agent.close()).pipe(
          Effect.timeout("5 seconds"),
          Effect.catchAll(() => Effect.promise(() => agent.destroy()))
        )
    )

    const fetch = (input: string | URL, init?: RequestInit): Effect.Effect<Response, EgressError.EgressError> =>
      Effect.flatMap(check(input), (url) =>
        Effect.tryPromise({
          try: (signal) =>
            undiciFetch(url, {
              ...(init as UndiciRequestInit | undefined),
              signal: init?.signal ? AbortSignal.any([init.signal, signal]) : signal,
              dispatcher,
              redirect: "manual"
            }) as unknown as Promise<Response>,
          catch: (error) => failureOf(error, url.host)
        }))

    const fetchFunction: typeof globalThis.fetch = async (input, init) => {
      const [target, merged] = typeof input === "string" || input instanceof URL
        ? [input, init]
        : [input.url, unpackRequest(input, init)]
      const url = await runOrReject(check(target))
      try {
        return await (undiciFetch(url, {
          ...(merged as UndiciRequestInit | undefined),
          dispatcher,
          redirect: "manual"
        }) as unknown as Promise<Response>)
      } catch (error) {
        // A refusal from the connect hook surfaces as itself; anything else (aborts included) stays as undici made it.
        throw egressErrorIn(error) ?? error
      }
    }

    const requestFunction = async (input: string | URL, options: RequestOptions) => {
      const url = await runOrReject(check(input))
      try {
        return await undiciRequest(url, { ...options, dispatcher })
      } catch (error) {
        throw egressErrorIn(error) ?? error
      }
    }

    return Egress.of({ allowPrivate, check, fetch, dispatcher, fetchFunction, requestFunction })
  })

/** Needs a `Resolver`: `Resolver.layer` in a node, `Resolver.layerTest` in tests. */
export const layer = (options: Options): Layer.Layer<Egress, never, Resolver> => Layer.scoped(Egress, make(options))

/** `layer` with ALLOW_PRIVATE_URLS (default false). */
export const layerConfig: Layer.Layer<Egress, ConfigError.ConfigError, Resolver> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const allowPrivate = yield* Config.boolean("ALLOW_PRIVATE_URLS").pipe(Config.withDefault(false))
    if (allowPrivate) {
      yield* Effect.logWarning(
        "ALLOW_PRIVATE_URLS=true: outbound requests to tenant URLs may use plain http and reach loopback, " +
          "private, link-local and cloud metadata addresses. Only for self-hosted setups and tests; never on a shared node."
      )
    }
    return layer({ allowPrivate })
  })
)
