/**
 * The display event log on its own: ids, the bounded replay buffer, replay
 * meeting the live feed exactly, slow readers cut off without slowing the
 * agent, long polls.
 */
import * as AgentError from "@agent-runtime/agent/AgentError"
import * as EventLog from "@agent-runtime/agent/EventLog"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, Fiber, Option, Scope, Stream } from "effect"

const ids = (entries: Iterable<{ readonly id: number }>) => Array.from(entries, (entry) => entry.id)

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i)

/** Each id is one more than the one before. */
const consecutive = (list: ReadonlyArray<number>) => list.every((id, i) => i === 0 || id === list[i - 1]! + 1)

const publishMany = (log: EventLog.EventLog, count: number, yieldEvery = 0) =>
  Effect.forEach(range(1, count), (n) =>
    Effect.zipLeft(
      log.publish({ type: "event", n }),
      yieldEvery > 0 && n % yieldEvery === 0 ? Effect.yieldNow() : Effect.void
    ), { discard: true })

describe("EventLog", () => {
  it.scoped("ids continue from the start cursor and only grow", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_ids", startCursor: 41 })
      expect(yield* log.cursor).toBe(41)
      const first = yield* log.publish({ type: "event", n: 1 })
      const second = yield* log.publish({ type: "event", text: "é\nline" })
      expect([first.id, second.id]).toEqual([42, 43])
      // Serialized once, at publish, for every writer.
      expect(second.json).toBe(JSON.stringify({ type: "event", text: "é\nline" }))
      expect(second.data).toEqual({ type: "event", text: "é\nline" })
      expect(yield* log.cursor).toBe(43)
      expect(Either.map(yield* log.since(41), ids)).toEqual(Either.right([42, 43]))
      expect(Either.map(yield* log.since(42), ids)).toEqual(Either.right([43]))
      expect(Either.map(yield* log.since(43), ids)).toEqual(Either.right([]))
    }))

  it.scoped("the buffer keeps the newest maxEvents entries", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_count", startCursor: 0, maxEvents: 5 })
      yield* publishMany(log, 8)
      expect(Either.map(yield* log.since(3), ids)).toEqual(Either.right([4, 5, 6, 7, 8]))
      expect(Either.map(yield* log.since(6), ids)).toEqual(Either.right([7, 8]))
      const gap = yield* log.since(2)
      expect(Either.isLeft(gap) && gap.left).toMatchObject({ _tag: "ReplayGap", cursor: 2, oldest: 4 })
    }))

  it.scoped("the buffer keeps at most maxBytes of JSON, counted in UTF-8 bytes", () =>
    Effect.gen(function*() {
      // {"s":"..."} with 12 two-byte characters is 32 bytes (20 characters): three fit in 100 bytes.
      const log = yield* EventLog.make({ agentId: "ag_bytes", startCursor: 0, maxBytes: 100 })
      for (let i = 0; i < 5; i++) yield* log.publish({ s: "é".repeat(12) })
      expect(Either.map(yield* log.since(2), ids)).toEqual(Either.right([3, 4, 5]))
      const gap = yield* log.since(1)
      expect(Either.isLeft(gap) && gap.left).toMatchObject({ _tag: "ReplayGap", cursor: 1, oldest: 3 })

      // One entry over the bound alone stays: the latest event is always replayable.
      const small = yield* EventLog.make({ agentId: "ag_small", startCursor: 0, maxBytes: 10 })
      yield* small.publish({ s: "é".repeat(12) })
      yield* small.publish({ s: "é".repeat(12) })
      expect(Either.map(yield* small.since(1), ids)).toEqual(Either.right([2]))
    }))

  it.scoped("an event too large for a frame is cut to fit, says so, and keeps what it was", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_large", startCursor: 0 })
      const result = "ü".repeat(3_000_000)
      const large = yield* log.publish({
        type: "event",
        requestId: "req_1",
        event: {
          type: "tool_execution_end",
          toolCallId: "call_1",
          result: { content: [{ type: "text", text: result }] }
        }
      })
      expect(Buffer.byteLength(large.json)).toBeLessThanOrEqual(EventLog.maxFrameBytes)
      expect(JSON.parse(large.json)).toEqual(large.data)
      expect(large.data).toMatchObject({
        type: "event",
        requestId: "req_1",
        truncated: true,
        event: { type: "tool_execution_end", toolCallId: "call_1" }
      })
      expect((large.data as any).event.result.content[0].text).toMatch(/^ü+… \[\d+ characters cut\]$/)

      // Too many parts for cutting strings to help: its scalars stay, two levels down.
      const many = yield* log.publish({
        type: "event",
        requestId: "req_1",
        event: {
          type: "message_end",
          message: { role: "assistant", content: Array(200_000).fill({ t: "x".repeat(8) }) }
        }
      })
      expect(Buffer.byteLength(many.json)).toBeLessThanOrEqual(EventLog.maxFrameBytes)
      expect(many.data).toEqual({
        type: "event",
        requestId: "req_1",
        truncated: true,
        event: { type: "message_end", message: { role: "assistant" } }
      })

      // A small event is as it was sent.
      const small = yield* log.publish({ type: "event", requestId: "req_1", event: { type: "turn_end" } })
      expect(small.data).toEqual({ type: "event", requestId: "req_1", event: { type: "turn_end" } })
    }))

  it.scoped("a cursor evicted from the buffer or from before the start cursor is a ReplayGap", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_gap", startCursor: 100, maxEvents: 4 })
      // Nothing published yet: only the start cursor itself is current.
      expect(yield* log.since(100)).toEqual(Either.right([]))
      const before = yield* log.since(99)
      expect(Either.isLeft(before) && before.left).toMatchObject({ _tag: "ReplayGap", cursor: 99, oldest: 101 })
      expect(yield* Effect.flip(log.poll(99, "1 millis"))).toMatchObject({ _tag: "ReplayGap", cursor: 99 })

      yield* publishMany(log, 3)
      expect(Either.map(yield* log.since(100), ids)).toEqual(Either.right([101, 102, 103]))
      expect(Either.isLeft(yield* log.since(50))).toBe(true)
      const restarted = yield* Effect.flip(log.subscribe(Option.some(50)))
      expect(restarted).toBeInstanceOf(AgentError.ReplayGap)
      expect(restarted).toMatchObject({ cursor: 50, oldest: 101 })

      yield* publishMany(log, 3)
      const evicted = yield* Effect.flip(log.subscribe(Option.some(101)))
      expect(evicted).toMatchObject({ _tag: "ReplayGap", cursor: 101, oldest: 103 })
      // A refused subscription leaves nothing registered.
      expect(yield* log.subscribers).toBe(0)
      const replayed = yield* log.subscribe(Option.some(102))
      expect(ids(yield* Stream.runCollect(Stream.take(replayed, 4)))).toEqual([103, 104, 105, 106])
    }))

  it.scoped("a log handed on goes on from the previous owner's: its buffered events replay, cursors never gap", () =>
    Effect.gen(function*() {
      const inherited = [100_001, 100_002, 100_003, 100_004, 100_005].map((id) => ({ id, data: { id } }))
      const log = yield* EventLog.make({
        agentId: "ag_moved",
        startCursor: 200_000,
        continuesFrom: 100_005,
        inherited,
        maxEvents: 6
      })
      expect(Either.map(yield* log.since(100_003), ids)).toEqual(Either.right([100_004, 100_005]))
      expect(Either.map(yield* log.since(100_005), ids)).toEqual(Either.right([]))
      // Its cursor is the last id handed on until it publishes: the block start no event carries is never shown.
      expect(yield* log.cursor).toBe(100_005)
      // Two more make seven: the oldest inherited event is evicted.
      yield* publishMany(log, 2)
      expect(Either.map(yield* log.since(100_005), ids)).toEqual(Either.right([200_001, 200_002]))
      expect(yield* log.cursor).toBe(200_002)
      expect(Either.map(yield* log.since(100_001), ids)).toEqual(
        Either.right([100_002, 100_003, 100_004, 100_005, 200_001, 200_002])
      )
      const before = yield* log.since(100_000)
      expect(Either.isLeft(before) && before.left).toMatchObject({ _tag: "ReplayGap", oldest: 100_002 })
      // Once this owner's own first events are evicted too, a cursor from before them is a gap.
      yield* publishMany(log, 6)
      const evicted = yield* log.since(100_005)
      expect(Either.isLeft(evicted) && evicted.left).toMatchObject({ _tag: "ReplayGap", oldest: 200_003 })
      expect(Either.map(yield* log.since(200_002), ids)).toEqual(
        Either.right([200_003, 200_004, 200_005, 200_006, 200_007, 200_008])
      )
    }))

  it.scoped("replay meets the live feed with no gap and no duplicate while publishing concurrently", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_live", startCursor: 1000 })
      yield* publishMany(log, 100)
      const last = 1100 + 2000

      const read = (stream: Stream.Stream<EventLog.Entry, AgentError.SubscriberLagged>) =>
        stream.pipe(
          // Readers yield now and then so publishing and reading interleave.
          Stream.mapEffect((entry) => entry.id % 7 === 0 ? Effect.as(Effect.yieldNow(), entry) : Effect.succeed(entry)),
          Stream.takeUntil((entry) => entry.id >= last),
          Stream.runCollect,
          Effect.map(ids),
          Effect.fork
        )
      // A reader of `since` alone, as a client polling would.
      const sinceReader = (from: number) =>
        Effect.gen(function*() {
          const seen: Array<number> = []
          let cursor = from
          while (cursor < last) {
            const entries = yield* Effect.flatMap(log.since(cursor), (either) => either)
            for (const id of ids(entries)) seen.push(id)
            if (entries.length > 0) cursor = entries[entries.length - 1]!.id
            yield* Effect.yieldNow()
          }
          return seen
        }).pipe(Effect.fork)

      const publisher = yield* Effect.fork(publishMany(log, 2000, 3))
      const fromStart = yield* read(yield* log.subscribe(Option.some(1000)))
      yield* Effect.yieldNow()
      const fromMiddle = yield* read(yield* log.subscribe(Option.some(1050)))
      yield* Effect.yieldNow()
      const liveOnly = yield* read(yield* log.subscribe(Option.none()))
      const polling = yield* sinceReader(1020)
      yield* Fiber.join(publisher)

      expect(yield* Fiber.join(fromStart)).toEqual(range(1001, last))
      expect(yield* Fiber.join(fromMiddle)).toEqual(range(1051, last))
      const live = yield* Fiber.join(liveOnly)
      expect(consecutive(live)).toBe(true)
      expect(live[live.length - 1]).toBe(last)
      expect(live[0]).toBeGreaterThan(1100)
      expect(yield* Fiber.join(polling)).toEqual(range(1021, last))
    }))

  it.scoped("a reader that never reads is cut off with SubscriberLagged; publish and other readers go on", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_slow", startCursor: 0, subscriberBuffer: 16 })
      const stalled = yield* log.subscribe(Option.none())
      const reading = yield* log.subscribe(Option.none())
      const reader = yield* Effect.fork(Stream.runCollect(Stream.take(reading, 5000)))
      expect(yield* log.subscribers).toBe(2)

      const started = performance.now()
      // The reading subscriber also holds only 16, so the publisher lets it run every few events.
      yield* publishMany(log, 5000, 8)
      const elapsed = performance.now() - started
      expect(elapsed).toBeLessThan(2000)
      expect(yield* log.cursor).toBe(5000)
      expect(yield* log.subscribers).toBe(1)
      expect(ids(yield* Fiber.join(reader))).toEqual(range(1, 5000))

      // The stalled stream delivers what it holds, then ends with the last id delivered.
      const got: Array<number> = []
      const lagged = yield* Effect.flip(Stream.runForEach(stalled, (entry) => Effect.sync(() => got.push(entry.id))))
      expect(lagged).toBeInstanceOf(AgentError.SubscriberLagged)
      expect(lagged).toMatchObject({ _tag: "SubscriberLagged", lastId: 16 })
      expect(got).toEqual(range(1, 16))
    }))

  it.scoped("a lagged reader replaying from a cursor reports the last replayed or live id", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_lag2", startCursor: 10, subscriberBuffer: 4 })
      yield* publishMany(log, 6)
      const stream = yield* log.subscribe(Option.some(12))
      yield* publishMany(log, 10)
      const got: Array<number> = []
      const lagged = yield* Effect.flip(Stream.runForEach(stream, (entry) => Effect.sync(() => got.push(entry.id))))
      // Replay 13..16, then four live (17..20) before the fifth overflowed.
      expect(got).toEqual(range(13, 20))
      expect(lagged).toMatchObject({ _tag: "SubscriberLagged", lastId: 20 })
    }))

  it.live("poll answers at once when entries exist", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_poll", startCursor: 0 })
      yield* log.publish({ type: "event", n: 1 })
      yield* log.publish({ type: "response", id: "rq_1" })
      const started = performance.now()
      const answer = yield* log.poll(0, "10 seconds")
      expect(performance.now() - started).toBeLessThan(500)
      expect(answer).toEqual({
        cursor: 2,
        events: [{ id: 1, data: { type: "event", n: 1 } }, { id: 2, data: { type: "response", id: "rq_1" } }]
      })
      expect(yield* log.poll(1, "10 seconds")).toEqual({
        cursor: 2,
        events: [{ id: 2, data: { type: "response", id: "rq_1" } }]
      })
      expect(yield* log.subscribers).toBe(0)
    }).pipe(Effect.scoped))

  it.live("reserves the next ids halfway through its reservation, once at a time, and stops when refused", () =>
    Effect.gen(function*() {
      const asked: Array<number> = []
      let answer: Option.Option<number> = Option.some(140)
      const log = yield* EventLog.make({
        agentId: "ag_reserve",
        startCursor: 100,
        reservation: { until: 120, extend: (until) => Effect.sync(() => (asked.push(until), answer)) }
      })
      yield* publishMany(log, 9)
      expect(asked).toEqual([])
      // Ten ids of twenty left: the next block is asked for, and again only halfway through the new end.
      yield* publishMany(log, 1)
      yield* Effect.yieldNow()
      expect(asked).toEqual([120])
      yield* publishMany(log, 19)
      expect(asked).toEqual([120])
      answer = Option.none()
      yield* publishMany(log, 1)
      yield* Effect.yieldNow()
      expect(asked).toEqual([120, 140])
      // Refused (another owner reserved after it): not asked again, and publishing goes on.
      yield* publishMany(log, 20)
      yield* Effect.yieldNow()
      expect(asked).toEqual([120, 140])
      expect(yield* log.cursor).toBe(150)
    }).pipe(Effect.scoped))

  it.live("poll waits for the next entry, or answers empty when the wait runs out", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_wait", startCursor: 7 })
      const started = performance.now()
      const waiting = yield* Effect.fork(log.poll(7, "5 seconds"))
      yield* Effect.sleep("100 millis")
      expect(yield* log.subscribers).toBe(1)
      yield* log.publish({ type: "event", n: 8 })
      expect(yield* Fiber.join(waiting)).toEqual({ cursor: 8, events: [{ id: 8, data: { type: "event", n: 8 } }] })
      const waited = performance.now() - started
      expect(waited).toBeGreaterThanOrEqual(90)
      expect(waited).toBeLessThan(2000)

      const idleStart = performance.now()
      expect(yield* log.poll(8, "200 millis")).toEqual({ cursor: 8, events: [] })
      expect(performance.now() - idleStart).toBeGreaterThanOrEqual(190)
      expect(yield* log.subscribers).toBe(0)
    }).pipe(Effect.scoped))

  it.scoped("1,000 concurrent subscribers each receive all 100 entries", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "ag_many", startCursor: 0 })
      const readers = yield* Effect.forEach(range(1, 1000), () =>
        Effect.flatMap(log.subscribe(Option.none()), (stream) =>
          Effect.fork(Stream.runFold(Stream.take(stream, 100), { count: 0, sum: 0 }, (acc, entry) => ({
            count: acc.count + 1,
            sum: acc.sum + entry.id
          })))))
      expect(yield* log.subscribers).toBe(1000)
      yield* publishMany(log, 100, 10)
      const totals = yield* Effect.forEach(readers, Fiber.join)
      expect(totals.filter((total) =>
        total.count === 100 && total.sum === 5050
      )).toHaveLength(1000)
    }))

  it.scoped("closing the log ends its subscribers' streams and wakes a waiting poll", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* Scope.extend(EventLog.make({ agentId: "ag_close", startCursor: 0 }), scope)
      const stream = yield* log.subscribe(Option.some(0))
      const reader = yield* Effect.fork(Stream.runCollect(stream))
      const waiting = yield* Effect.fork(log.poll(0, "1 minute"))
      yield* Effect.yieldNow()
      yield* Scope.close(scope, Exit.void)
      expect(Chunk.toReadonlyArray(yield* Fiber.join(reader))).toEqual([])
      expect(yield* Fiber.join(waiting)).toEqual({ cursor: 0, events: [] })
      expect(yield* log.subscribers).toBe(0)
      // Publishing after close still records (the owner may write its last frames) but reaches no one.
      expect((yield* log.publish({ n: 1 })).id).toBe(1)
    }))
})
