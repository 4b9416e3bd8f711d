/**
 * Server-sent events for the display stream: a ready frame, then `id:`/
 * `data:` frames, a heartbeat comment every few seconds, and a reconnect
 * frame when the runtime ends the stream on purpose.
 */
import { Duration, Effect, Fiber, Option, Runtime, Schedule, Stream } from "effect"
import { PassThrough } from "node:stream"
import type * as EventLog from "./EventLog.ts"

const encoder = new TextEncoder()

/**
 * `event: ready` with the connection's details; the first frame of every stream. Its `id:` is the cursor the
 * stream goes on from, so a stream cut before its first event is resumed from there (Last-Event-ID), not
 * from whatever is newest when the client reconnects.
 */
export const ready = (data: unknown, cursor: number): Uint8Array =>
  encoder.encode(`id: ${cursor}\nevent: ready\ndata: ${JSON.stringify(data)}\n\n`)

/** One event frame; `json` never holds a raw line break (JSON.stringify escapes them). */
export const frame = (id: number, json: string): Uint8Array => encoder.encode(`id: ${id}\ndata: ${json}\n\n`)

/** Encoded frames by entry: every watcher of a local log shares one encoding of each entry. */
const encoded = new WeakMap<object, Uint8Array>()

export const encode = (entry: { readonly id: number; readonly json: string }): Uint8Array => {
  let bytes = encoded.get(entry)
  if (bytes === undefined) {
    bytes = frame(entry.id, entry.json)
    encoded.set(entry, bytes)
  }
  return bytes
}

/** A frame without an id: an ended stream's record of its last event, never replayed from. */
export const unnumbered = (json: string): Uint8Array => encoder.encode(`data: ${json}\n\n`)

/**
 * `bytes` (an SSE body) up to and including the first frame holding `marker`, then its end: a run's stream
 * ends with the run's response frame. Frames are cut apart where they end (a blank line), whatever chunks
 * they came in.
 */
export const until = <E>(bytes: Stream.Stream<Uint8Array, E>, marker: string): Stream.Stream<Uint8Array, E> =>
  Stream.decodeText(bytes).pipe(
    Stream.mapAccum("", (pending, text) => {
      const frames = (pending + text).split("\n\n")
      const rest = frames.pop()!
      return [rest, frames.map((frame) => `${frame}\n\n`)]
    }),
    Stream.flattenIterables,
    Stream.takeUntil((frame) => frame.includes(marker)),
    Stream.encodeText
  )

/** A comment: keeps proxies from closing an idle stream and lets the client tell a live stream from a dead one. */
export const heartbeat: Uint8Array = encoder.encode(": heartbeat\n\n")

/** The runtime closes the stream on purpose; the client reconnects at once with Last-Event-ID. */
export const reconnect: Uint8Array = encoder.encode("event: reconnect\ndata: {}\n\n")

/**
 * A message of the runtime's MCP session with the application: no id, never replayed, never moves the cursor.
 * Its data is `{type: "mcp", message}`, the frame the camelRun client reads (and ours).
 */
export const mcp = (message: unknown): Uint8Array =>
  encoder.encode(`event: mcp\ndata: ${JSON.stringify({ type: "mcp", message })}\n\n`)

/** The connection was taken over and its calls are done; the stream ends without a reconnect. */
export const closed: Uint8Array = encoder.encode(
  `event: closed\ndata: ${JSON.stringify({ reason: "replaced", code: "APPLICATION_REPLACED" })}\n\n`
)

export const defaultHeartbeat = Duration.seconds(5)

export interface Options<E> {
  readonly ready: unknown
  /** The cursor the entries follow: the ready frame's id. */
  readonly cursor: number
  readonly entries: Stream.Stream<{ readonly id: number; readonly json: string }, E>
  readonly heartbeat?: Duration.DurationInput
}

/**
 * The bytes of one SSE response. `entries` ending or failing (a lagging
 * reader: `EventLog.SubscriberLagged`; the log closing as the agent moves or
 * the node drains) ends the stream with `event: reconnect`, so the client
 * reconnects at once from its last id rather than waiting out a dead stream.
 */
export const toStream = <E>(options: Options<E>): Stream.Stream<Uint8Array> =>
  withHeartbeat(
    Stream.make(ready(options.ready, options.cursor)).pipe(
      Stream.concat(Stream.map(options.entries, encode)),
      // However the entries end (a gap, the owner lost, a defect), the client is told to reconnect.
      Stream.catchAllCause(() => Stream.empty),
      Stream.concat(Stream.make(reconnect))
    ),
    options.heartbeat
  )

/**
 * The bytes of `frames` with a heartbeat comment every few seconds. One emitter fed by the frames and by a
 * heartbeat fiber: cheaper per frame than merging two streams, which matters with many watchers of a busy
 * agent. Ends when the frames end.
 */
export const withHeartbeat = (
  frames: Stream.Stream<Uint8Array>,
  every: Duration.DurationInput = defaultHeartbeat
): Stream.Stream<Uint8Array> =>
  Stream.asyncScoped<Uint8Array>((emit) =>
    Effect.gen(function*() {
      yield* Effect.forkScoped(
        Effect.repeat(Effect.promise(() => emit.single(heartbeat)), Schedule.spaced(every)).pipe(Effect.delay(every))
      )
      yield* Effect.forkScoped(
        frames.pipe(
          Stream.runForEachChunk((chunk) => Effect.promise(() => emit.chunk(chunk))),
          Effect.ensuring(Effect.promise(() => emit.end()))
        )
      )
    }), 64)

/**
 * A reader's view of the log: an entry as that reader sees it (the same
 * entry when unchanged, so its encoding stays shared), or undefined to skip it.
 */
export type View = (entry: EventLog.Entry) => EventLog.Entry | undefined

export interface WriterOptions {
  readonly ready: unknown
  readonly log: EventLog.EventLog
  readonly cursor: Option.Option<number>
  /** Narrows what this reader sees (a browser token's reader); every entry as it is when absent. */
  readonly view?: View | undefined
  readonly heartbeat?: Duration.DurationInput
  /** Bytes a watcher may leave unread before it is cut off with a reconnect frame. */
  readonly maxPendingBytes?: number
  /** Registers a callback that ends the stream with a reconnect frame (a node draining); returns its removal. */
  readonly endWhen?: (end: () => void) => () => void
  /**
   * Where the events go on when the log closes under an open stream (the agent moved to another node): the
   * events after the given id, from wherever the agent is now. The stream ends with a reconnect frame when
   * they end; at once when the log closes, if this is absent.
   */
  readonly follow?: ((after: number) => Stream.Stream<EventLog.Entry, unknown>) | undefined
}

/**
 * An SSE body written straight from the log's callbacks into a Node stream:
 * no fibers or stream stages per frame, which is what lets one agent feed
 * many watchers. Each frame is encoded once and shared by every watcher. A
 * watcher that leaves `maxPendingBytes` unread is cut off with
 * `event: reconnect` (it reconnects from its cursor) instead of holding memory.
 * When the log closes because the agent moved, the stream goes on with
 * `follow` from the last entry it had.
 */
export const toNodeStream = (options: WriterOptions) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const body = new PassThrough()
    const maxPending = options.maxPendingBytes ?? 1024 * 1024
    let ended = false
    let stop = () => {}
    /** Where the events go on from elsewhere, once the log closed. */
    let following: Fiber.RuntimeFiber<void, unknown> | undefined
    const finish = (last: Uint8Array) => {
      if (ended) return
      ended = true
      stop()
      unregister()
      clearInterval(timer)
      if (following !== undefined) Runtime.runFork(runtime)(Fiber.interrupt(following))
      body.end(last)
    }
    const write = (bytes: Uint8Array) => {
      if (ended) return
      body.write(bytes)
      if (body.writableLength + body.readableLength > maxPending) finish(reconnect)
    }
    let unregister = () => {}
    const timer = setInterval(() => write(heartbeat), Duration.toMillis(options.heartbeat ?? defaultHeartbeat))
    body.on("close", () => {
      ended = true
      stop()
      unregister()
      clearInterval(timer)
      if (following !== undefined) Runtime.runFork(runtime)(Fiber.interrupt(following))
    })
    const { view } = options
    // "From now" is the log's cursor now; whatever is published after it comes in the replay.
    const cursor = Option.isSome(options.cursor) ? options.cursor.value : yield* options.log.cursor
    /** The last entry this stream had, shown or not: where it goes on from after a move. */
    let last = cursor
    const send = (entry: EventLog.Entry) => {
      last = entry.id
      const seen = view === undefined ? entry : view(entry)
      if (seen !== undefined) write(encode(seen))
    }
    let opened = false
    /** Entries published before the ready frame and the replay were written: they go out right after them. */
    const early: Array<EventLog.Entry> = []
    let logClosed = false
    const goOn = () => {
      if (ended || following !== undefined) return
      if (options.follow === undefined) return finish(reconnect)
      following = Runtime.runFork(runtime)(
        Stream.runForEach(options.follow(last), (entry) => Effect.sync(() => send(entry))).pipe(
          Effect.ensuring(Effect.sync(() => {
            following = undefined
            finish(reconnect)
          }))
        )
      )
    }
    const listening = yield* options.log.listen(Option.some(cursor), {
      // The ready frame and the replay come first, whenever the fiber writing them yields.
      entry: (entry) => opened ? send(entry) : early.push(entry),
      close: () => {
        logClosed = true
        if (opened) goOn()
      }
    }).pipe(Effect.tapError(() => Effect.sync(() => finish(new Uint8Array()))))
    stop = listening.stop
    body.write(ready(options.ready, cursor))
    for (const entry of listening.replay) send(entry)
    for (const entry of early) send(entry)
    opened = true
    unregister = options.endWhen?.(() => finish(reconnect)) ?? unregister
    if (logClosed) goOn()
    return body
  })
