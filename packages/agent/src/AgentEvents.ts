/**
 * An agent's events wherever its watcher is: read straight from the log
 * when this node owns the agent, else followed through the cluster from its
 * owner, across moves (drain, rebalance, crash); a stream read from the log
 * here follows the agent the same way once it moves off. Every read of an
 * owner is bounded, and streams served here end (with `event: reconnect`)
 * when the node drains or loses its database, so watchers go where they can
 * be served.
 */
import { ApiError } from "@agent-runtime/domain"
import { DatabaseHealth } from "@agent-runtime/store"
import type { Sharding } from "@effect/cluster"
import type { Scope } from "effect"
import { Cause, Context, Duration, Effect, Layer, Option, Sink, Stream } from "effect"
import { Buffer } from "node:buffer"
import { entityClient, sentUntilAnswered, type Status } from "./Agent.ts"
import type { ReplayGap } from "./AgentError.ts"
import type { RequestRow } from "./AgentStore.ts"
import * as ApplicationConnection from "./ApplicationConnection.ts"
import { Drain } from "./Drain.ts"
import * as EventLog from "./EventLog.ts"
import { Settlements } from "./Settlements.ts"
import * as Sse from "./Sse.ts"

/** The longest a poll or a request read waits. */
export const longPollLimit = Duration.seconds(25)

/** How long the agent's owner may take to answer a read; past it the caller is told to retry (503). */
export const ownerAnswerLimit = Duration.seconds(5)

/**
 * A remote event stream silent this long (the owner sends a keep-alive every
 * `Agent.watchKeepAlive`) is taken as lost: its request may have met an
 * owner that was letting the agent go. It is read again from the last id.
 */
const followIdleLimit = Duration.seconds(6)

const ownerUnavailable = () =>
  new ApiError.Unavailable({ error: "the agent's runner did not answer in time; retry", retryAfter: 1 })

/** A call to the agent's owner, bounded: an owner that is stopping or cut off must not hold the caller (503). */
export const fromOwner = <A, E, R>(effect: Effect.Effect<A, E, R>, limit: Duration.DurationInput = ownerAnswerLimit) =>
  Effect.timeoutFail(effect, { duration: limit, onTimeout: ownerUnavailable })

/**
 * What AgentDetail shows of the agent's events: those among the last `events` ids up to its cursor that the
 * owner's replay buffer still holds, at most `bytes` of their JSON (the oldest left out first; the newest
 * always stays, as in the buffer). A tail of the buffer: the stream, or a poll, reads the rest.
 */
export const recentLimit = { events: 50, bytes: 256 * 1024 } as const

/** An agent's events from `cursor` on (see `watch`). */
export interface Watched {
  readonly cursor: number
  readonly entries: Stream.Stream<EventLog.Entry, ApiError.Unavailable | ReplayGap>
}

/** An SSE response body: written straight from the local log, or a stream of frames. */
export type EventBody =
  | { readonly _tag: "Node"; readonly body: NodeJS.ReadableStream }
  | { readonly _tag: "Stream"; readonly body: Stream.Stream<Uint8Array> }

/** How an application connection's stream is opened (see `connectionBody`). */
export interface ConnectionOptions {
  /** A cursor behind the buffer gets a snapshot frame instead of 409. */
  readonly snapshot: boolean
  /** Reconnect as this connection. */
  readonly connection: Option.Option<string>
  readonly takeover: boolean
  /** The ready frame's `version`. */
  readonly version: number
}

export class AgentEvents extends Context.Tag("@agent-runtime/agent/AgentEvents")<AgentEvents, {
  /** The owner's view of the agent: its cursor, whether a turn runs, what is queued. */
  readonly status: (agentId: string) => Effect.Effect<Status, ApiError.Unavailable>
  /**
   * The agent's events after `cursor` (from now when none), in order, live;
   * with `snapshot`, a cursor behind the replay buffer starts from a snapshot
   * of the running turn instead of failing with ReplayGap. `cursor` in the
   * answer is where the entries start: the one asked for, or "now" as a number.
   */
  readonly watch: (
    agentId: string,
    cursor: Option.Option<number>,
    snapshot: boolean
  ) => Effect.Effect<Watched, ApiError.ReplayGap | ApiError.Unavailable, Scope.Scope>
  /**
   * The latest of the agent's events up to `cursor` (its owner's, as `status` gave it), oldest first,
   * within `recentLimit`; none when the buffer holds none of them.
   */
  readonly recent: (
    agentId: string,
    cursor: number
  ) => Effect.Effect<ReadonlyArray<{ readonly id: number; readonly data: unknown }>, ApiError.Unavailable>
  /** The events after `cursor`, waiting up to `wait` (at most 25 s) for the first. */
  readonly poll: (
    agentId: string,
    cursor: number,
    wait: Duration.Duration
  ) => Effect.Effect<EventLog.Poll, ApiError.ReplayGap | ApiError.Unavailable>
  /**
   * The body of an SSE response for `watch`, opened by a `ready` frame;
   * with `view`, each entry as that view shows it (a browser token's reader).
   */
  readonly eventBody: (
    agentId: string,
    cursor: Option.Option<number>,
    options: { readonly snapshot: boolean; readonly ready: unknown; readonly view?: Sse.View | undefined }
  ) => Effect.Effect<EventBody, ApiError.ReplayGap | ApiError.Unavailable, Scope.Scope>
  /**
   * The body of an application connection's SSE response: the agent's events
   * as `eventBody` gives them, and the runtime's MCP messages to the
   * application from the agent's owner, wherever it is. Refused with
   * ApplicationConnected while another connection serves the agent's tools,
   * unless `takeover`.
   */
  readonly connectionBody: (
    agentId: string,
    cursor: Option.Option<number>,
    options: ConnectionOptions
  ) => Effect.Effect<
    Stream.Stream<Uint8Array>,
    ApiError.ReplayGap | ApiError.ApplicationConnected | ApiError.Unavailable,
    Scope.Scope
  >
  /**
   * Waits until `requestId` settles (its response event), the deadline
   * passes, or the node closes its streams; `read` tells whether it has.
   * An agent owned elsewhere is read before its owner is asked anything, so
   * `read` can check that the caller may see it. With `fromSettled`, a
   * request settled by this node after the first read is answered from the
   * row its owner wrote, not read again.
   */
  readonly awaitSettled: <A, E>(
    agentId: string,
    requestId: string,
    read: Effect.Effect<A, E>,
    settled: (value: A) => boolean,
    limit: Duration.Duration,
    fromSettled?: (row: RequestRow) => A
  ) => Effect.Effect<A, E>
}>() {}

export const make = Effect.gen(function*() {
  const drain = yield* Drain
  const health = yield* DatabaseHealth.DatabaseHealth
  const makeClient = yield* entityClient
  const localLogs = yield* EventLog.LocalLogs
  const settlements = yield* Settlements

  // Streams served here end, with `event: reconnect`, when the node drains or loses its database: the
  // watcher reconnects to a node that can serve it rather than waiting on a quiet one.
  const streamsEnd = Effect.raceFirst(drain.closed, health.lost)
  /**
   * A stream opened while the node's streams end (it drains, or lost its database) would end at once, and its
   * watcher, reconnecting, could meet this node again and again: it is refused, to be retried shortly, by when
   * a load balancer sends it elsewhere or this node is back. So is a poll on a draining node, which would be
   * answered at once with nothing.
   */
  const refuse = (error: string) => Effect.fail(new ApiError.Unavailable({ error, retryAfter: 1 }))
  const handingOn = "this node is handing its agents on; retry"
  const refusePollWhileClosing = Effect.suspend(() => drain.isClosed() ? refuse(handingOn) : Effect.void)
  const refuseStreamWhileClosing = Effect.suspend(() =>
    drain.isClosed()
      ? refuse(handingOn)
      : health.current().reachable
      ? Effect.void
      : refuse("this node cannot reach its database; retry")
  )
  const onStreamsEnd = (end: () => void) => {
    const offDrain = drain.onClose(end)
    const offLost = health.onLost(end)
    return () => {
      offDrain()
      offLost()
    }
  }

  // Reads are asked again when the owner lets the agent go while answering (the reply is an interruption).
  const status = (agentId: string) => fromOwner(Effect.orDie(sentUntilAnswered(makeClient(agentId).Status())))

  /**
   * The events of an agent owned elsewhere, read through the cluster, from
   * `cursor` on (from the owner's cursor when first read if none is given;
   * fixed then, so a re-read after a move cannot pass over anything).
   * When the owner ends the stream because the agent moves (a drain, a
   * rebalance), or the stream goes silent past `followIdleLimit`, it is
   * read again from the last id, on the agent's next owner once it has one,
   * which goes on from the same ids. A cursor the next owner cannot serve
   * (after a crash) fails the stream: the client reconnects and is told.
   */
  const followRemote = (agentId: string, cursor: Option.Option<number>) => {
    let last = cursor
    const once = Effect.gen(function*() {
      const from = Option.isSome(last) ? last.value : (yield* status(agentId)).cursor
      last = Option.some(from)
      return makeClient(agentId).Watch({ cursor: from }).pipe(
        Stream.timeoutFail(ownerUnavailable, followIdleLimit),
        Stream.filter((entry) => entry.id > Option.getOrElse(last, () => -1)),
        Stream.map((entry) => {
          last = Option.some(entry.id)
          return { ...entry, json: JSON.stringify(entry.data) }
        }),
        // A stream that went silent, or was cut because the owner let the agent go, is read again; a gap ends
        // the follow, and the client reconnects.
        Stream.catchTag("Unavailable", () => Stream.empty),
        Stream.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Stream.empty : Stream.failCause(cause)),
        Stream.catchTags({
          MailboxFull: (error) => Stream.die(error),
          AlreadyProcessingMessage: (error) => Stream.die(error),
          PersistenceError: (error) => Stream.die(error)
        })
      )
    })
    const loop = (): Stream.Stream<EventLog.Entry, ApiError.Unavailable | ReplayGap> =>
      Stream.concat(
        Stream.unwrap(once),
        Stream.suspend(() => Stream.concat(Stream.drain(Stream.fromEffect(Effect.sleep("100 millis"))), loop()))
      )
    return loop()
  }

  const watchFrom = (agentId: string, cursor: Option.Option<number>, snapshot: boolean) =>
    Effect.gen(function*() {
      const client = makeClient(agentId)
      const behind = Option.isSome(cursor)
        ? yield* sentUntilAnswered(client.Poll({ cursor: cursor.value, waitMillis: 0 })).pipe(
          Effect.as(false),
          Effect.catchTag("ReplayGap", () => Effect.succeed(true)),
          Effect.orDie
        )
        : false
      if (behind && !snapshot) {
        return yield* new ApiError.ReplayGap({
          error:
            "the cursor is behind the replay buffer; read state (or ask for a snapshot) and continue from its cursor"
        })
      }
      if (!behind) {
        const local = localLogs.get(agentId)
        if (Option.isSome(local)) {
          // Owned here: read the log itself, its JSON already made once for every watcher.
          const from = Option.isSome(cursor) ? cursor.value : yield* local.value.cursor
          const entries = yield* local.value.subscribe(Option.some(from)).pipe(Effect.orDie)
          return { cursor: from, entries: Stream.catchAll(entries, () => Stream.empty) }
        }
        // "From now" is the owner's cursor taken before the stream is answered (and its ready frame sent): taken
        // once the stream is read, a prompt sent on seeing ready could run its turn before it, unseen.
        const from = Option.isSome(cursor) ? cursor.value : (yield* status(agentId)).cursor
        return { cursor: from, entries: followRemote(agentId, Option.some(from)) }
      }
      const taken = yield* Effect.orDie(sentUntilAnswered(client.Snapshot()))
      const data = { type: "snapshot", cursor: taken.cursor, requestId: taken.requestId, turn: taken.turn }
      return {
        // Cut before the snapshot frame, the stream is asked again from the same cursor: a snapshot again.
        cursor: Option.getOrElse(cursor, () => taken.cursor),
        entries: Stream.make({ id: taken.cursor, ...EventLog.bounded(data) }).pipe(
          Stream.concat(followRemote(agentId, Option.some(taken.cursor)))
        )
      }
    })

  /** `watch` for the stream bodies below, which refuse a closing node before anything else. */
  const follow = (agentId: string, cursor: Option.Option<number>, snapshot: boolean) =>
    Effect.map(watchFrom(agentId, cursor, snapshot), (watched): Watched => ({
      cursor: watched.cursor,
      // A draining node ends its streams, so its agents can move at once.
      entries: Stream.interruptWhen(watched.entries, streamsEnd)
    }))

  const watch = (agentId: string, cursor: Option.Option<number>, snapshot: boolean) =>
    Effect.zipRight(refuseStreamWhileClosing, follow(agentId, cursor, snapshot))

  const poll = (agentId: string, cursor: number, wait: Duration.Duration) =>
    sentUntilAnswered(
      makeClient(agentId).Poll({ cursor, waitMillis: Duration.toMillis(Duration.min(wait, longPollLimit)) })
    ).pipe(
      Effect.catchAllDefect(Effect.die),
      (polled) => fromOwner(polled, Duration.sum(Duration.min(wait, longPollLimit), ownerAnswerLimit)),
      // A node letting its streams go answers what it has at once.
      (polled) => Effect.raceFirst(polled, Effect.zipRight(drain.closed, Effect.succeed({ cursor, events: [] }))),
      Effect.catchTag("ReplayGap", (gap) =>
        Effect.fail(
          new ApiError.ReplayGap({
            error:
              `cursor ${gap.cursor} is behind the replay buffer (oldest ${gap.oldest}); read state and continue from its cursor`
          })
        )),
      Effect.catchTags({
        MailboxFull: (error) => Effect.die(error),
        AlreadyProcessingMessage: (error) => Effect.die(error),
        PersistenceError: (error) => Effect.die(error)
      }),
      (polled) => Effect.zipRight(refusePollWhileClosing, polled)
    )

  /** The last entries of `entries` (oldest first) within `recentLimit`'s bytes, the newest always. */
  const within = (entries: ReadonlyArray<{ readonly id: number; readonly data: unknown; readonly json?: string }>) => {
    let bytes = 0
    let first = entries.length
    while (first > 0) {
      const entry = entries[first - 1]!
      const size = Buffer.byteLength(entry.json ?? JSON.stringify(entry.data) ?? "null", "utf8")
      if (first < entries.length && bytes + size > recentLimit.bytes) break
      bytes += size
      first--
    }
    return entries.slice(first).map((entry) => ({ id: entry.id, data: entry.data }))
  }

  const recent = (agentId: string, cursor: number) =>
    Effect.gen(function*() {
      const from = cursor - recentLimit.events
      const inWindow = (entry: { readonly id: number }) => entry.id > from && entry.id <= cursor
      const local = localLogs.get(agentId)
      if (Option.isSome(local)) return within((yield* local.value.buffered).filter(inWindow))
      // Owned elsewhere: read from the owner's buffer, from its oldest event when the window starts before it.
      const read = (after: number) =>
        sentUntilAnswered(makeClient(agentId).Poll({ cursor: after, waitMillis: 0 })).pipe(
          Effect.map((polled) => polled.events),
          Effect.catchTags({
            MailboxFull: (error) => Effect.die(error),
            AlreadyProcessingMessage: (error) => Effect.die(error),
            PersistenceError: (error) => Effect.die(error)
          })
        )
      const events = yield* read(from).pipe(
        Effect.catchTag("ReplayGap", (gap) => read(gap.oldest - 1)),
        // Its buffer moved on between the two reads: shown as empty rather than failing the read.
        Effect.catchTag("ReplayGap", () => Effect.succeed([]))
      )
      return within(events.filter(inWindow))
    }).pipe(fromOwner)

  const eventBody = (
    agentId: string,
    cursor: Option.Option<number>,
    options: { readonly snapshot: boolean; readonly ready: unknown; readonly view?: Sse.View | undefined }
  ) =>
    Effect.gen(function*() {
      yield* refuseStreamWhileClosing
      const { view } = options
      const local = localLogs.get(agentId)
      if (Option.isSome(local)) {
        const written = yield* Effect.either(Sse.toNodeStream({
          ready: options.ready,
          log: local.value,
          cursor,
          endWhen: onStreamsEnd,
          view,
          // The agent moved off this node (a rebalance; a drain ends the streams first): the stream follows it.
          follow: (after) => Stream.interruptWhen(followRemote(agentId, Option.some(after)), streamsEnd)
        }))
        if (written._tag === "Right") return { _tag: "Node", body: written.right } as const
      }
      const watched = yield* follow(agentId, cursor, options.snapshot)
      const entries = view === undefined
        ? watched.entries
        : Stream.filterMap(watched.entries, (entry) => Option.fromNullable(view(entry)))
      return { _tag: "Stream", body: Sse.toStream({ ready: options.ready, cursor: watched.cursor, entries }) } as const
    })

  const connectionBody = (
    agentId: string,
    cursor: Option.Option<number>,
    options: ConnectionOptions
  ) =>
    Effect.gen(function*() {
      yield* refuseStreamWhileClosing
      const client = makeClient(agentId)
      const [first, frames] = yield* Stream.peel(
        client.Connect({
          ...(Option.isSome(options.connection) ? { connection: options.connection.value } : {}),
          takeover: options.takeover
        }),
        Sink.head()
      ).pipe(
        fromOwner,
        Effect.catchTags({
          ApplicationConnected: (refused) => Effect.fail(new ApiError.ApplicationConnected({ error: refused.message })),
          Draining: (refused) => Effect.fail(new ApiError.Unavailable({ error: refused.message, retryAfter: 1 })),
          MailboxFull: (error) => Effect.die(error),
          AlreadyProcessingMessage: (error) => Effect.die(error),
          PersistenceError: (error) => Effect.die(error)
        })
      )
      if (Option.isNone(first) || first.value._tag !== "Ready") return yield* Effect.fail(ownerUnavailable())
      const { connection, toolsHash } = first.value
      const watched = yield* follow(agentId, cursor, options.snapshot)
      let replaced = false
      const owner = frames.pipe(
        // The owner sends a keep-alive every few seconds: silence means it was lost, and the application
        // reconnects to the next one.
        Stream.timeoutFail(ownerUnavailable, followIdleLimit),
        Stream.filterMap((frame) => {
          if (frame._tag === "Mcp") return Option.some(Sse.mcp(frame.message))
          if (frame._tag !== "Closed") return Option.none()
          replaced = true
          return Option.some(Sse.closed)
        })
      )
      // The owner counts the connection gone when this node stops saying it holds it.
      const heartbeats = Stream.drain(Stream.fromEffect(
        Effect.forever(Effect.delay(client.Heartbeat({ connection }), ApplicationConnection.keepAliveInterval))
      ))
      const body = Stream.map(watched.entries, Sse.encode).pipe(
        Stream.merge(owner, { haltStrategy: "either" }),
        Stream.merge(heartbeats, { haltStrategy: "either" }),
        Stream.catchAllCause(() => Stream.empty),
        Stream.concat(Stream.suspend(() => replaced ? Stream.empty : Stream.make(Sse.reconnect)))
      )
      return Sse.withHeartbeat(
        Stream.make(Sse.ready({ version: options.version, agentId, connection, toolsHash }, watched.cursor)).pipe(
          Stream.concat(body)
        )
      )
    })

  /**
   * Waits until `subscribe` calls back, the node closes its streams or `millis` pass: one callback and one
   * timer, no fiber. `heard`: what `subscribe` called back with; `none` for the close or the time.
   */
  const waitFor = (
    millis: number,
    subscribe: (wake: (heard: boolean) => void) => () => void = () => () => {}
  ) =>
    Effect.async<Option.Option<boolean>>((resume) => {
      let ended = false
      const stops: Array<() => void> = []
      const stop = () => {
        if (ended) return false
        ended = true
        for (const each of stops) each()
        return true
      }
      const end = (heard: Option.Option<boolean>) => {
        if (stop()) resume(Effect.succeed(heard))
      }
      const timer = setTimeout(() => end(Option.none()), Math.max(0, millis))
      stops.push(() => clearTimeout(timer))
      stops.push(subscribe((heard) => end(Option.some(heard))))
      const stopClose = drain.onClose(() => end(Option.none()))
      if (ended) stopClose()
      else stops.push(stopClose)
      return Effect.sync(stop)
    })

  /**
   * A listener subscribed before a read: what it hears before the wait after the read is kept, so nothing heard
   * in between is missed. `signal(true)` wins over `signal(false)`.
   */
  const hearing = () => {
    let early: boolean | undefined
    let wake: ((heard: boolean) => void) | undefined
    return {
      signal: (heard: boolean) => {
        if (wake !== undefined) wake(heard)
        else early = early || heard
      },
      wait: (millis: number) =>
        early !== undefined ? Effect.succeed(Option.some(early)) : waitFor(millis, (resume) => {
          wake = resume
          return () => (wake = () => {})
        })
    }
  }

  const awaitSettled = <A, E>(
    agentId: string,
    requestId: string,
    read: Effect.Effect<A, E>,
    settled: (value: A) => boolean,
    limit: Duration.Duration,
    fromSettled?: (row: RequestRow) => A
  ) => {
    const deadline = Date.now() + Duration.toMillis(limit)
    const isResponse = (data: unknown) => {
      const frame = data as { type?: string; id?: string } | null
      return frame?.type === "response" && frame.id === requestId
    }
    // A node letting its streams go answers what it has at once, so its listener can close.
    const over = () => Date.now() >= deadline || drain.isClosed()
    return Effect.gen(function*() {
      let ownerSaidSettled = false
      while (true) {
        const local = localLogs.get(agentId)
        if (Option.isSome(local)) {
          // Owned here: listens to the log itself (no cluster round trip), from before the read.
          const heard = hearing()
          let settledRow: RequestRow | undefined
          const { stop } = yield* Effect.orDie(local.value.listen(Option.none(), {
            // true: the response frame; false: the log closed (the agent moves), and its next owner is waited on.
            entry: (entry, row) => {
              if (!isResponse(entry.data)) return
              settledRow = row
              heard.signal(true)
            },
            close: () => heard.signal(false)
          }))
          const answered = yield* Effect.gen(function*() {
            const current = yield* read
            if (settled(current) || over()) return Option.some(current)
            const outcome = yield* heard.wait(deadline - Date.now())
            // The caller may see it (it was read), and it settled as the row says: no second read.
            if (settledRow !== undefined && fromSettled !== undefined) return Option.some(fromSettled(settledRow))
            if (Option.isSome(outcome) && !outcome.value) yield* waitFor(Math.min(100, deadline - Date.now()))
            return Option.none<A>()
          }).pipe(Effect.ensuring(Effect.sync(stop)))
          if (Option.isSome(answered)) return answered.value
          continue
        }
        // Owned elsewhere, and this node hears settled requests: listening before the read, it waits for the
        // request to settle, then reads it again; no message to the owner.
        const heard = hearing()
        const subscribed = settlements.listen(agentId, requestId, {
          settled: () => heard.signal(true),
          lost: () => heard.signal(false)
        })
        if (Option.isSome(subscribed)) {
          const answered = yield* Effect.gen(function*() {
            const current = yield* read
            if (settled(current) || over()) return Option.some(current)
            yield* heard.wait(deadline - Date.now())
            return Option.none<A>()
          }).pipe(Effect.ensuring(Effect.sync(subscribed.value)))
          if (Option.isSome(answered)) return answered.value
          continue
        }
        // Else read first (the read checks the agent is the caller's, before any message to its owner), then
        // the owner answers once the request settles there, and it is read again.
        const current = yield* read
        const left = deadline - Date.now()
        if (settled(current) || over()) return current
        if (ownerSaidSettled) {
          // The owner has not queued it yet (it hears it announced, see Arrivals): not asked again at once.
          ownerSaidSettled = false
          yield* waitFor(Math.min(100, deadline - Date.now()))
          continue
        }
        // An owner that does not answer (paused, or its shard between runners) ends the wait on time.
        const answered = yield* sentUntilAnswered(makeClient(agentId).AwaitResponse({ requestId, waitMillis: left }))
          .pipe(
            Effect.raceFirst(Effect.as(drain.closed, true)),
            Effect.timeout(Duration.millis(left)),
            Effect.option
          )
        // No owner answers now (stopping, or its shard between runners), or the agent moved: read again shortly.
        if (Option.isNone(answered)) yield* waitFor(Math.min(500, deadline - Date.now()))
        else if (!answered.value) yield* waitFor(Math.min(100, deadline - Date.now()))
        else ownerSaidSettled = true
      }
    })
  }

  return AgentEvents.of({ status, watch, recent, poll, eventBody, connectionBody, awaitSettled })
})

export const layer: Layer.Layer<
  AgentEvents,
  never,
  Sharding.Sharding | Drain | DatabaseHealth.DatabaseHealth | EventLog.LocalLogs | Settlements
> = Layer.effect(AgentEvents, make)
