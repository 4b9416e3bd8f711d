/**
 * The per-agent display event log: a bounded replay buffer (last 512 events,
 * at most 2 MiB) and live fan-out to watchers. Events are display only, so a
 * reader that falls behind is told (ReplayGap, SubscriberLagged) rather than
 * holding up the agent: `publish` never waits on a reader.
 */
import type { Duration, Scope } from "effect"
import { Chunk, Context, Effect, Either, FiberSet, Layer, Option, Queue, Stream } from "effect"
import { Buffer } from "node:buffer"
import { ReplayGap, SubscriberLagged } from "./AgentError.ts"
import type { RequestRow } from "./AgentStore.ts"

/** One published frame; `json` is serialized once so every SSE writer sends the same string. */
export interface Entry {
  readonly id: number
  readonly data: unknown
  readonly json: string
}

/** The EventPoll answer. */
export interface Poll {
  readonly cursor: number
  readonly events: ReadonlyArray<{ readonly id: number; readonly data: unknown }>
}

export interface EventLog {
  readonly agentId: string
  /**
   * Tells `data` to the log's readers. `settled`, with a request's response frame: the request as the
   * statement that settled it left it, told to this process's listeners only (see `Listener`).
   */
  readonly publish: (data: unknown, settled?: RequestRow) => Effect.Effect<Entry>
  /** `publish`, in the caller's own synchronous step: for a caller that tells many events and waits on none. */
  readonly unsafePublish: (data: unknown, settled?: RequestRow) => Entry
  /**
   * The latest id; before anything was published, the last id the previous owner handed on (`continuesFrom`), or
   * else the start cursor. A watcher that followed the agent across a move is at that id: no id it has not seen is
   * ahead of it, and a state read must not say there is.
   */
  readonly cursor: Effect.Effect<number>
  readonly since: (cursor: number) => Effect.Effect<Either.Either<ReadonlyArray<Entry>, ReplayGap>>
  /** Replays entries after the cursor (none for `Option.none()`), then continues live. */
  readonly subscribe: (
    cursor: Option.Option<number>
  ) => Effect.Effect<Stream.Stream<Entry, SubscriberLagged>, ReplayGap, Scope.Scope>
  readonly poll: (cursor: number, wait: Duration.DurationInput) => Effect.Effect<Poll, ReplayGap>
  /** Open subscriptions (watchers and waiting polls). */
  readonly subscribers: Effect.Effect<number>
  /** What the buffer holds, oldest first: handed to the next owner when the agent moves on purpose. */
  readonly buffered: Effect.Effect<ReadonlyArray<{ readonly id: number; readonly data: unknown }>>
  /**
   * A plain callback subscription, for writers that need no stream: the
   * replay after `cursor`, then `listener.entry` for each new entry, in the
   * same synchronous step as it is published; `listener.close` when the log
   * closes. `stop` unregisters.
   */
  readonly listen: (
    cursor: Option.Option<number>,
    listener: Listener
  ) => Effect.Effect<{ readonly replay: ReadonlyArray<Entry>; readonly stop: () => void }, ReplayGap>
}

export interface Listener {
  /** `settled`: what the publisher gave with a response frame, so a long poll waiting here needs no read. */
  readonly entry: (entry: Entry, settled: RequestRow | undefined) => void
  readonly close: () => void
}

export interface Options {
  readonly agentId: string
  /** Ids continue after this one; a cursor below it is a gap (events from before a restart or move)... */
  readonly startCursor: number
  /**
   * ...unless it is at or after this one: the last id the previous owner
   * published before it let the agent go on purpose, so nothing lies between.
   */
  readonly continuesFrom?: number | undefined
  /** The previous owner's buffered events (ids up to `continuesFrom`), replayed from here as if never moved. */
  readonly inherited?: ReadonlyArray<{ readonly id: number; readonly data: unknown }> | undefined
  readonly maxEvents?: number
  readonly maxBytes?: number
  readonly subscriberBuffer?: number
  /**
   * The ids this log may hand out end at `until`, and none beyond it may be taken by another owner's log
   * before `extend` reserved them. `extend` is asked halfway through the reservation and answers the new
   * end, or none when another owner reserved after it (this log is being superseded).
   */
  readonly reservation?: {
    readonly until: number
    readonly extend: (until: number) => Effect.Effect<Option.Option<number>>
  } | undefined
}

export const defaultMaxEvents = 512
export const defaultMaxBytes = 2 * 1024 * 1024

/**
 * The most bytes of JSON one frame carries. Clients bound what they take (camelRun's refuses a frame over
 * 1,100,000 bytes and reconnects from its cursor, which would meet the same frame again, for ever).
 */
export const maxFrameBytes = 1_000_000

const cutStrings = (value: unknown, limit: number): unknown => {
  if (typeof value === "string") {
    return value.length <= limit ? value : `${value.slice(0, limit)}… [${value.length - limit} characters cut]`
  }
  if (Array.isArray(value)) return value.map((item) => cutStrings(item, limit))
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, cutStrings(item, limit)]))
  }
  return value
}

/** Its scalars, and those of the objects in it two levels down: what says what a frame was. */
const skeleton = (value: Record<string, unknown>, depth: number): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(value).flatMap(([key, item]) =>
      typeof item !== "object" || item === null
        ? [[key, typeof item === "string" ? cutStrings(item, 256) : item]]
        : depth > 0 && !Array.isArray(item)
        ? [[key, skeleton(item as Record<string, unknown>, depth - 1)]]
        : []
    )
  )

/**
 * A frame's data and its JSON, at most `maxFrameBytes`: an event too large (a tool's result of megabytes, say)
 * has its long strings cut, shorter until it fits, or else keeps only its scalars, and says `truncated: true`.
 * Events are display only; history keeps everything.
 */
export const bounded = (data: unknown): { readonly data: unknown; readonly json: string } => {
  const json = JSON.stringify(data) ?? "null"
  // A UTF-16 unit is at most 3 bytes of UTF-8: short JSON needs no count.
  if (json.length * 3 <= maxFrameBytes || Buffer.byteLength(json) <= maxFrameBytes) return { data, json }
  if (typeof data !== "object" || data === null || Array.isArray(data)) return { data: null, json: "null" }
  for (let limit = 65_536; limit >= 64; limit = Math.floor(limit / 4)) {
    const cut = { ...(cutStrings(data, limit) as Record<string, unknown>), truncated: true }
    const shorter = JSON.stringify(cut)
    if (Buffer.byteLength(shorter) <= maxFrameBytes) return { data: cut, json: shorter }
  }
  const bare = { ...skeleton(data as Record<string, unknown>, 2), truncated: true }
  return { data: bare, json: JSON.stringify(bare) }
}
export const defaultSubscriberBuffer = 1024

/** `null` in a subscriber's queue: the log closed, the stream ends. */
type Slot = Entry | null

interface Subscriber {
  readonly queue: Queue.Queue<Slot>
  /** Last id put in the queue: what the stream will have delivered when it drains. */
  lastQueued: number
  lagged: boolean
  closed: boolean
}

/**
 * A log whose subscriptions end when the scope closes. Everything that touches
 * the buffer or the subscriber set runs in one synchronous step, so a
 * subscription's snapshot and its live feed meet exactly: nothing in between
 * is missed or delivered twice.
 */
export const make = (options: Options): Effect.Effect<EventLog, never, Scope.Scope> =>
  Effect.gen(function*() {
    const maxEvents = Math.max(1, options.maxEvents ?? defaultMaxEvents)
    const maxBytes = options.maxBytes ?? defaultMaxBytes
    const subscriberBuffer = Math.max(1, options.subscriberBuffer ?? defaultSubscriberBuffer)

    // Ring buffer of the newest entries: `head` is the oldest's slot.
    const ring: Array<Entry | undefined> = new Array(maxEvents)
    const sizes: Array<number> = new Array(maxEvents).fill(0)
    let head = 0
    let count = 0
    let bytes = 0
    let latest = options.startCursor
    const live = new Set<Subscriber>()
    const listeners = new Set<Listener>()
    let closed = false

    const { reservation } = options
    const runInLog = yield* FiberSet.makeRuntime<never>()
    let reservedUntil = reservation?.until ?? Number.POSITIVE_INFINITY
    // Half of the first reservation: the next one has that many ids' time to be written.
    const margin = reservation === undefined ? 0 : Math.max(1, (reservation.until - options.startCursor) / 2)
    // Also true once refused: the ids after `reservedUntil` are another owner's, and asking again cannot change it.
    let extending = false
    const reserveAhead = (extend: (until: number) => Effect.Effect<Option.Option<number>>) => {
      extending = true
      runInLog(Effect.map(extend(reservedUntil), (until) => {
        if (Option.isNone(until)) return
        reservedUntil = until.value
        extending = false
      }))
    }

    const evictOldest = () => {
      bytes -= sizes[head]!
      ring[head] = undefined
      head = (head + 1) % maxEvents
      count--
    }

    const append = (entry: Entry) => {
      const size = Buffer.byteLength(entry.json, "utf8")
      if (count === maxEvents) evictOldest()
      // The newest entry always stays, even alone over the byte bound, so a current cursor never gaps.
      while (count > 0 && bytes + size > maxBytes) evictOldest()
      const slot = (head + count) % maxEvents
      ring[slot] = entry
      sizes[slot] = size
      bytes += size
      count++
    }

    const oldest = () => (count === 0 ? latest + 1 : ring[head]!.id)

    for (const entry of options.inherited ?? []) append({ ...entry, json: JSON.stringify(entry.data) ?? "null" })

    const unsafeSince = (cursor: number): Either.Either<Array<Entry>, ReplayGap> => {
      const first = oldest()
      const seamless = options.continuesFrom !== undefined && cursor >= options.continuesFrom &&
        cursor <= options.startCursor && first === options.startCursor + 1
      // Equal to the id just before the oldest buffered one (or to the start cursor): nothing is missing.
      if (cursor < first - 1 && !seamless) return Either.left(new ReplayGap({ cursor, oldest: first }))
      // Ids grow along the ring (with one jump where inherited entries end), so the first wanted is found by bisection.
      let low = 0
      let high = count
      while (low < high) {
        const middle = (low + high) >>> 1
        if (ring[(head + middle) % maxEvents]!.id <= cursor) low = middle + 1
        else high = middle
      }
      const out: Array<Entry> = []
      for (let i = low; i < count; i++) out.push(ring[(head + i) % maxEvents]!)
      return Either.right(out)
    }

    const unsafePublish = (data: unknown, settled?: RequestRow) => {
      // Serialize before taking an id: a value that cannot be serialized is a defect and leaves no hole.
      const entry: Entry = { id: latest + 1, ...bounded(data) }
      latest = entry.id
      if (reservation !== undefined && !extending && reservedUntil - latest <= margin) reserveAhead(reservation.extend)
      append(entry)
      for (const subscriber of live) {
        if (subscriber.queue.unsafeOffer(entry)) {
          subscriber.lastQueued = entry.id
        } else {
          // Full: this subscriber stops receiving and its stream ends once it has drained what it holds.
          subscriber.lagged = true
          live.delete(subscriber)
        }
      }
      for (const listener of listeners) listener.entry(entry, settled)
      return entry
    }

    const detach = (subscriber: Subscriber) =>
      Effect.zipRight(
        Effect.sync(() => live.delete(subscriber)),
        Queue.shutdown(subscriber.queue)
      )

    /**
     * Registers a subscriber and reads the buffer after `cursor` in the same
     * step. `after` is the last id the replay covers: the live feed starts
     * right after it.
     */
    const attach = (cursor: Option.Option<number>) =>
      Effect.flatMap(
        Queue.bounded<Slot>(subscriberBuffer),
        (queue) =>
          Effect.acquireRelease(
            Effect.sync(() => {
              const replay = Option.match(cursor, {
                onNone: () => Either.right<Array<Entry>>([]),
                onSome: unsafeSince
              })
              const subscriber: Subscriber = { queue, lastQueued: latest, lagged: false, closed }
              if (Either.isRight(replay) && !closed) live.add(subscriber)
              return Either.map(replay, (entries) => ({ subscriber, replay: entries, after: latest }))
            }),
            (attached) => Either.isRight(attached) ? detach(attached.right.subscriber) : Queue.shutdown(queue)
          )
      ).pipe(Effect.flatMap((attached) => attached))

    /** The live part of a subscription, in chunks of whatever has queued up. */
    const liveStream = (subscriber: Subscriber, after: number): Stream.Stream<Entry, SubscriberLagged> => {
      const { queue } = subscriber
      // Attaching and publishing are each one synchronous step, so nothing at or below `after` is
      // ever queued; the filter only keeps that promise explicit.
      const fresh = (slot: Slot): slot is Entry => slot !== null && slot.id > after
      let done = false
      const pull: Effect.Effect<Chunk.Chunk<Entry>, Option.Option<SubscriberLagged>> = Effect.suspend(() => {
        if (done) return Effect.fail(Option.none())
        return Effect.flatMap(Queue.takeAll(queue), (chunk) => {
          if (Chunk.isNonEmpty(chunk)) {
            // The close signal is always the last thing queued.
            if (Chunk.lastNonEmpty(chunk) === null) done = true
            return Effect.succeed(Chunk.filter(chunk, fresh))
          }
          if (subscriber.lagged) {
            return Effect.fail(Option.some(new SubscriberLagged({ lastId: subscriber.lastQueued })))
          }
          if (subscriber.closed) return Effect.fail(Option.none())
          // Empty, not lagged, not closed: a lag needs a full queue, so this take is woken first.
          return Effect.flatMap(Queue.take(queue), (slot) =>
            slot === null
              ? Effect.fail(Option.none())
              : Effect.succeed(fresh(slot) ? Chunk.of(slot) : Chunk.empty<Entry>()))
        })
      })
      return Stream.repeatEffectChunkOption(pull)
    }

    const subscribe = (cursor: Option.Option<number>) =>
      Effect.map(attach(cursor), ({ after, replay, subscriber }) =>
        Stream.concat(Stream.fromIterable(replay), liveStream(subscriber, after)))

    const toPoll = (cursor: number, entries: ReadonlyArray<Entry>): Poll => ({
      cursor: entries.length > 0 ? entries[entries.length - 1]!.id : cursor,
      events: entries.map((entry) => ({ id: entry.id, data: entry.data }))
    })

    const poll = (cursor: number, wait: Duration.DurationInput) =>
      Effect.scoped(Effect.gen(function*() {
        const { replay, subscriber } = yield* attach(Option.some(cursor))
        if (replay.length > 0 || subscriber.closed) {
          return toPoll(cursor, replay)
        }
        yield* Effect.timeoutOption(Queue.take(subscriber.queue), wait)
        // Read the buffer again rather than the queue: it holds whatever else arrived meanwhile, in order.
        return toPoll(cursor, yield* unsafeSince(cursor))
      }))

    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        for (const subscriber of live) {
          subscriber.closed = true
          // A full queue's reader is not waiting; it sees `closed` once it has drained.
          subscriber.queue.unsafeOffer(null)
        }
        live.clear()
        for (const listener of listeners) {
          listener.close()
        }
        listeners.clear()
      })
    )

    const listen = (cursor: Option.Option<number>, listener: Listener) =>
      Effect.suspend(() => {
        const replay = Option.match(cursor, {
          onNone: () =>
            Either.right<Array<Entry>>([]),
          onSome: unsafeSince
        })
        if (Either.isLeft(replay)) return Effect.fail(replay.left)
        if (closed) listener.close()
        else listeners.add(listener)
        return Effect.succeed({ replay: replay.right, stop: () => void listeners.delete(listener) })
      })

    return {
      agentId: options.agentId,
      publish: (data, settled) => Effect.sync(() => unsafePublish(data, settled)),
      unsafePublish,
      cursor: Effect.sync(() =>
        latest === options.startCursor && options.continuesFrom !== undefined ? options.continuesFrom : latest
      ),
      since: (cursor: number) => Effect.sync(() => unsafeSince(cursor)),
      subscribe,
      poll,
      subscribers: Effect.sync(() => live.size + listeners.size),
      buffered: Effect.sync(() =>
        Array.from({ length: count }, (_, i) => {
          const entry = ring[(head + i) % maxEvents]!
          return { id: entry.id, data: entry.data }
        })
      ),
      listen
    }
  })

/**
 * The logs of the agents this node owns, so watchers connected here read
 * them directly (no cluster round trip, JSON serialized once for all); a
 * watcher of an agent owned elsewhere reads through the cluster.
 */
export class LocalLogs extends Context.Tag("@agent-runtime/agent/EventLog/LocalLogs")<LocalLogs, {
  /** Registers the log for as long as the caller's scope (the entity) lives. */
  readonly register: (agentId: string, log: EventLog) => Effect.Effect<void, never, Scope.Scope>
  /** The log of an agent this node owns now. */
  readonly get: (agentId: string) => Option.Option<EventLog>
}>() {}

/** The node's registry of its agents' logs. */
export const layerLocalLogs: Layer.Layer<LocalLogs> = Layer.sync(LocalLogs, () => {
  const logs = new Map<string, EventLog>()
  return LocalLogs.of({
    register: (agentId, log) =>
      Effect.asVoid(Effect.acquireRelease(
        Effect.sync(() => logs.set(agentId, log)),
        () => Effect.sync(() => logs.get(agentId) === log && logs.delete(agentId))
      )),
    get: (agentId) => Option.fromNullable(logs.get(agentId))
  })
})
