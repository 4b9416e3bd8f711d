/**
 * An agent's event stream (server-sent events) that stays connected: it
 * reconnects by itself from the last cursor it saw (`Last-Event-ID`),
 *
 * - at once when the runtime ends the stream on purpose (`event: reconnect`:
 *   a drain, the agent moved; a second such end within a second of the
 *   first waits as after a failure, so a runtime that keeps ending streams
 *   is not hammered),
 * - after 250 ms, doubling up to 5 s, when the connection fails, ends
 *   without a word, answers 5xx or 429 (a `Retry-After` sets the wait), or
 *   is silent for 20 s (the runtime writes a heartbeat every 5 s: a silent
 *   stream is a dead one, a half-open socket),
 * - asking for a snapshot (`snapshot=1`) when its cursor fell behind the
 *   runtime's replay buffer (409 REPLAY_GAP).
 *
 * Only frames with their own `id:` line move the cursor: the events, and the
 * `ready` frame (the cursor its stream goes on from, so a stream cut before
 * its first event resumes from there); frames without one (`mcp`, `closed`)
 * never do. `event: closed` ends the stream for
 * good. Other refusals (401, 404, 410, 409 APPLICATION_CONNECTED) fail it.
 *
 * As an Effect `Stream` (`make`, needing an `HttpClient`) and as an async
 * iterable on fetch (`iterate`).
 */
import { ServerSentEvents } from "@agent-runtime/domain"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Duration, Effect, Option, Stream } from "effect"
import * as Http from "./internal/http.ts"
import type { InvalidOptions } from "./SdkError.ts"
import { ApiError, TransportError } from "./SdkError.ts"

/** One frame of the stream. */
export interface Frame {
  /** The `event:` name; `message` when the frame names none (the agent's events and responses). */
  readonly event: string
  /** The frame's cursor (its own `id:` line), when it has one. */
  readonly id: number | undefined
  /** The `data:` parsed as JSON; the text itself when it is not JSON; undefined when the frame has none. */
  readonly data: unknown
}

export interface Options {
  readonly baseUrl: string | URL
  /** An agent token on `/clients/{id}/events`, an API key on `/v1/agents/{id}/events`. */
  readonly token: string
  /** `/clients/{id}/events` or `/v1/agents/{id}/events`. */
  readonly path: string
  /** Start after this cursor (sent as `Last-Event-ID`); from now when absent. */
  readonly cursor?: number | undefined
  /** Query parameters; a function is asked again before every connection. */
  readonly query?: Http.Query | (() => Http.Query) | undefined
  /** A stream without a byte for this long is dead; 20 s by default. */
  readonly watchdog?: Duration.DurationInput | undefined
  /** The first wait after a failure (250 ms) and the longest (5 s). */
  readonly backoff?: {
    readonly initial?: Duration.DurationInput | undefined
    readonly max?: Duration.DurationInput | undefined
  } | undefined
  /** Asked for once per connection: when it completes, that connection is dropped and made again at once. */
  readonly reconnectWhen?: Effect.Effect<void> | undefined
}

/** Options of a stream of one agent's own events, read with its token (`watch=1`: never serves tools). */
export interface AgentOptions {
  readonly baseUrl: string | URL
  readonly agentId: string
  readonly token: string
  readonly cursor?: number | undefined
  readonly watchdog?: Duration.DurationInput | undefined
}

type Next = "now" | "backoff" | "stop"

interface State {
  cursor: string | undefined
  snapshot: boolean
  next: Next
  failures: number
  quickReconnects: number
  retryAfter: number | undefined
  first: boolean
}

const defaults = {
  watchdog: Duration.seconds(20),
  initial: Duration.millis(250),
  max: Duration.seconds(5)
}

/** The frame as the stream gives it. */
const toFrame = (event: string | undefined, id: string | undefined, text: string | undefined): Frame => {
  let data: unknown = text
  if (text !== undefined) {
    try {
      data = JSON.parse(text)
    } catch {
      // not JSON: the text itself
    }
  }
  const cursor = id === undefined || id.trim() === "" ? undefined : Number(id)
  return { event: event ?? "message", id: cursor !== undefined && Number.isFinite(cursor) ? cursor : undefined, data }
}

const resolveQuery = (query: Options["query"]): Http.Query => typeof query === "function" ? query() : query ?? {}

/** One connection's frames; how it ended is left in `state.next`. */
const connection = (
  target: Http.Target,
  options: Options,
  state: State
): Stream.Stream<Frame, ApiError, HttpClient.HttpClient> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    state.next = "backoff"
    state.retryAfter = undefined
    const watchdog = options.watchdog ?? defaults.watchdog
    const client = HttpClient.withScope(yield* HttpClient.HttpClient)
    const query = { ...resolveQuery(options.query), ...(state.snapshot ? { snapshot: "1" } : {}) }
    let request = HttpClientRequest.get(Http.url(target.baseUrl, options.path, query)).pipe(
      HttpClientRequest.bearerToken(target.token),
      HttpClientRequest.setHeaders({ accept: "text/event-stream", "cache-control": "no-cache" })
    )
    if (state.cursor !== undefined) request = HttpClientRequest.setHeader(request, "last-event-id", state.cursor)
    const response = yield* client.execute(request).pipe(
      Http.noRedirects,
      Effect.timeoutFail({
        duration: watchdog,
        onTimeout: () => new TransportError({ message: "no answer to the event stream request" })
      }),
      Effect.option
    )
    if (Option.isNone(response)) return Stream.empty
    const { headers, status } = response.value
    if (status !== 200) {
      const text = yield* Effect.orElseSucceed(response.value.text, () => "")
      const error = Http.apiError(status, headers, text)
      if (error.code === "REPLAY_GAP" && !state.snapshot) {
        // Behind the buffer: ask for a snapshot of the running turn instead of the replay.
        state.snapshot = true
        state.next = "now"
        return Stream.empty
      }
      if (status === 429 || status >= 500) {
        state.retryAfter = error.retryAfter
        return Stream.empty
      }
      return Stream.fail(error)
    }
    if (!(headers["content-type"] ?? "").includes("text/event-stream")) {
      return Stream.fail(
        new ApiError({
          status,
          code: "NOT_EVENT_STREAM",
          message: `the answer is ${headers["content-type"] ?? "untyped"}, not text/event-stream`
        })
      )
    }
    state.snapshot = false
    const opened = Date.now()
    const parser = new ServerSentEvents.Parser()
    const frames = response.value.stream.pipe(
      Stream.timeoutFail(() => new TransportError({ message: "the event stream was silent too long" }), watchdog),
      Stream.decodeText(),
      Stream.mapConcat((text) => parser.push(text)),
      Stream.tap((item) =>
        Effect.sync(() => {
          // A heartbeat or a frame beyond the greeting: the connection works, so the next failure waits the
          // shortest time again.
          if (item._tag === "Comment" || (item.event !== "ready" && item.event !== "reconnect")) state.failures = 0
        })
      ),
      Stream.filterMap((item) =>
        item._tag === "Frame"
          ? Option.some({ frame: toFrame(item.event, item.id, item.data), id: item.id })
          : Option.none()
      ),
      Stream.map(({ frame, id }) => {
        if (id !== undefined) state.cursor = id
        return frame
      }),
      Stream.takeUntil((frame) => frame.event === "reconnect" || frame.event === "closed"),
      Stream.tap((frame) =>
        Effect.sync(() => {
          if (frame.event === "closed") state.next = "stop"
          if (frame.event === "reconnect") {
            state.quickReconnects = Date.now() - opened < 1000 ? state.quickReconnects + 1 : 0
            state.next = state.quickReconnects >= 2 ? "backoff" : "now"
          }
        })
      ),
      Stream.filter((frame) => frame.event !== "reconnect"),
      // A transport failure, the watchdog, a body cut short: reconnect after a wait.
      Stream.catchAll(() => Stream.empty)
    )
    return options.reconnectWhen === undefined
      ? frames
      : Stream.interruptWhen(frames, Effect.tap(options.reconnectWhen, () => Effect.sync(() => (state.next = "now"))))
  }))

/** The delay before the next connection. */
const delay = (options: Options, state: State): Duration.Duration => {
  if (state.first || state.next === "now") return Duration.zero
  const initial = Duration.decode(options.backoff?.initial ?? defaults.initial)
  const max = Duration.decode(options.backoff?.max ?? defaults.max)
  if (state.retryAfter !== undefined) return Duration.seconds(state.retryAfter)
  return Duration.min(Duration.times(initial, 2 ** Math.min(state.failures, 16)), max)
}

/**
 * The stream of frames, reconnecting as the module says. It fails only with
 * a refusal that another try would not change (and InvalidOptions for a
 * base URL that is not https); it ends after `event: closed`.
 */
export const make = (options: Options): Stream.Stream<Frame, ApiError | InvalidOptions, HttpClient.HttpClient> =>
  Stream.unwrap(Effect.map(Http.target(options.baseUrl, options.token), (target) =>
    Stream.suspend(() => {
      const state: State = {
        cursor: options.cursor === undefined ? undefined : String(options.cursor),
        snapshot: false,
        next: "now",
        failures: 0,
        quickReconnects: 0,
        retryAfter: undefined,
        first: true
      }
      const next = Effect.suspend(() => {
        if (state.next === "stop") return Effect.fail(Option.none())
        const wait = delay(options, state)
        if (state.next === "backoff") state.failures++
        state.first = false
        return Effect.as(Effect.sleep(wait), connection(target, options, state))
      })
      return Stream.flatten(Stream.repeatEffectOption(next))
    })))

/** The options of an agent's own stream, as a follower (`watch=1`). */
export const agentOptions = (options: AgentOptions): Options => ({
  baseUrl: options.baseUrl,
  token: options.token,
  path: `/clients/${Http.segment(options.agentId)}/events`,
  query: { watch: "1" },
  cursor: options.cursor,
  watchdog: options.watchdog
})

/** An agent's own events, read with its token. */
export const agent = (
  options: AgentOptions
): Stream.Stream<Frame, ApiError | InvalidOptions, HttpClient.HttpClient> => make(agentOptions(options))

/**
 * The stream as an async iterable on fetch (the given one, or the global).
 * Leaving the loop (`break`, `return`, a throw) closes the connection, and
 * so does `signal`; a failure is thrown from the loop as its SDK error.
 */
export const iterate = (
  options: Options & {
    readonly fetch?: typeof globalThis.fetch | undefined
    readonly signal?: AbortSignal | undefined
  }
): AsyncIterable<Frame> => {
  const { signal } = options
  const stream = Stream.provideLayer(make(options), Http.fetchLayer(options.fetch))
  return Stream.toAsyncIterable(
    signal === undefined ? stream : Stream.interruptWhen(
      stream,
      Effect.async<void>((resume) => {
        if (signal.aborted) return resume(Effect.void)
        const abort = () => resume(Effect.void)
        signal.addEventListener("abort", abort, { once: true })
        return Effect.sync(() => signal.removeEventListener("abort", abort))
      })
    )
  )
}
