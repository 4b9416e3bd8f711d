/**
 * The bytes of the display stream: each frame exactly as the spec shows it,
 * heartbeats in idle time, and the reconnect frame when the log lets go of a
 * reader.
 */
import * as AgentError from "@agent-runtime/agent/AgentError"
import * as EventLog from "@agent-runtime/agent/EventLog"
import * as Sse from "@agent-runtime/agent/Sse"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, Option, Scope, Stream, TestClock } from "effect"

const decoder = new TextDecoder()
const text = (bytes: Uint8Array) => decoder.decode(bytes)
const bytes = (value: string) => new TextEncoder().encode(value)

const entry = (id: number, data: unknown): EventLog.Entry => ({ id, data, json: JSON.stringify(data) })

describe("Sse", () => {
  it("renders each frame exactly", () => {
    // The ready frame's id is the cursor the stream goes on from.
    expect(Sse.ready({ version: "1", agentId: "ag_1", connection: "c_1" }, 41)).toEqual(
      bytes('id: 41\nevent: ready\ndata: {"version":"1","agentId":"ag_1","connection":"c_1"}\n\n')
    )
    expect(Sse.encode(entry(42, { type: "event", requestId: "rq_1", event: { type: "agent_start" } }))).toEqual(
      bytes('id: 42\ndata: {"type":"event","requestId":"rq_1","event":{"type":"agent_start"}}\n\n')
    )
    // A line break in the data stays escaped inside the one data line.
    expect(text(Sse.encode(entry(7, { text: "a\nb" })))).toBe('id: 7\ndata: {"text":"a\\nb"}\n\n')
    expect(Sse.frame(3, "{}")).toEqual(bytes("id: 3\ndata: {}\n\n"))
    expect(Sse.heartbeat).toEqual(bytes(": heartbeat\n\n"))
    expect(Sse.reconnect).toEqual(bytes("event: reconnect\ndata: {}\n\n"))
  })

  it.effect("a stream is ready, entries, then reconnect when the reader lagged", () =>
    Effect.gen(function*() {
      const entries = Stream.make(entry(1, { n: 1 }), entry(2, { n: 2 })).pipe(
        Stream.concat(Stream.fail(new AgentError.SubscriberLagged({ lastId: 2 })))
      )
      const out = yield* Stream.runCollect(Sse.toStream({ ready: { agentId: "ag_1" }, cursor: 0, entries }))
      expect(Chunk.toReadonlyArray(out).map(text)).toEqual([
        'id: 0\nevent: ready\ndata: {"agentId":"ag_1"}\n\n',
        'id: 1\ndata: {"n":1}\n\n',
        'id: 2\ndata: {"n":2}\n\n',
        "event: reconnect\ndata: {}\n\n"
      ])
    }))

  it.effect("heartbeats fill idle time; the stream ends after the reconnect frame", () =>
    Effect.gen(function*() {
      const entries = Stream.fromEffect(Effect.as(Effect.sleep("12 seconds"), entry(9, { n: 9 }))).pipe(
        Stream.concat(Stream.fail(new AgentError.SubscriberLagged({ lastId: 9 })))
      )
      const fiber = yield* Effect.fork(Stream.runCollect(Sse.toStream({ ready: {}, cursor: 8, entries })))
      yield* TestClock.adjust("12 seconds")
      const out = Chunk.toReadonlyArray(yield* Fiber.join(fiber)).map(text)
      expect(out).toEqual([
        "id: 8\nevent: ready\ndata: {}\n\n",
        ": heartbeat\n\n",
        ": heartbeat\n\n",
        'id: 9\ndata: {"n":9}\n\n',
        "event: reconnect\ndata: {}\n\n"
      ])
    }))

  it.effect("the heartbeat interval is configurable and runs while nothing else arrives", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.fork(
        Stream.runCollect(
          Stream.take(Sse.toStream({ ready: {}, cursor: 0, entries: Stream.never, heartbeat: "1 second" }), 4)
        )
      )
      yield* TestClock.adjust("3 seconds")
      expect(Chunk.toReadonlyArray(yield* Fiber.join(fiber)).map(text)).toEqual([
        "id: 0\nevent: ready\ndata: {}\n\n",
        ": heartbeat\n\n",
        ": heartbeat\n\n",
        ": heartbeat\n\n"
      ])
    }))
})

describe("toNodeStream", () => {
  const read = (body: NodeJS.ReadableStream) =>
    new Promise<string>((resolve) => {
      let text = ""
      body.on("data", (chunk: Buffer) => text += chunk.toString())
      body.on("end", () => resolve(text))
    })

  it.scoped("writes ready, the replay and live frames, and reconnect when the log closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* EventLog.make({ agentId: "a", startCursor: 0 }).pipe(Scope.extend(scope))
      yield* log.publish({ n: 1 })
      const body = yield* Sse.toNodeStream({ ready: { v: 1 }, log, cursor: Option.some(0), heartbeat: "1 hour" })
      const text = Effect.promise(() => read(body))
      yield* log.publish({ n: 2 })
      yield* Scope.close(scope, Exit.void)
      expect(yield* text).toBe(
        'id: 0\nevent: ready\ndata: {"v":1}\n\n' +
          'id: 1\ndata: {"n":1}\n\n' +
          'id: 2\ndata: {"n":2}\n\n' +
          "event: reconnect\ndata: {}\n\n"
      )
    }))

  it.scoped("an entry published while the stream opens comes after the ready frame and the replay", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* EventLog.make({ agentId: "a", startCursor: 0 }).pipe(Scope.extend(scope))
      yield* log.publish({ n: 1 })
      // The agent publishes the moment the stream is registered, before the stream has written anything.
      const eager: EventLog.EventLog = {
        ...log,
        listen: (cursor, listener) => Effect.tap(log.listen(cursor, listener), () => log.publish({ n: 2 }))
      }
      const body = yield* Sse.toNodeStream({ ready: {}, log: eager, cursor: Option.some(0), heartbeat: "1 hour" })
      const text = Effect.promise(() => read(body))
      yield* Scope.close(scope, Exit.void)
      expect(yield* text).toBe(
        "id: 0\nevent: ready\ndata: {}\n\n" +
          'id: 1\ndata: {"n":1}\n\n' +
          'id: 2\ndata: {"n":2}\n\n' +
          "event: reconnect\ndata: {}\n\n"
      )
    }))

  it.scoped("from now: the ready frame names the log's cursor, so a reader cut before any event loses nothing", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* EventLog.make({ agentId: "a", startCursor: 100 }).pipe(Scope.extend(scope))
      yield* log.publish({ n: 1 })
      const body = yield* Sse.toNodeStream({ ready: {}, log, cursor: Option.none(), heartbeat: "1 hour" })
      const text = Effect.promise(() => read(body))
      yield* Scope.close(scope, Exit.void)
      expect(yield* text).toBe("id: 101\nevent: ready\ndata: {}\n\nevent: reconnect\ndata: {}\n\n")
    }))

  it.scoped("cuts off a watcher that leaves too much unread, without slowing publishing", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "a", startCursor: 0 })
      const body = yield* Sse.toNodeStream({ ready: {}, log, cursor: Option.none(), maxPendingBytes: 4096 })
      const started = Date.now()
      for (let i = 0; i < 5000; i++) yield* log.publish({ i, pad: "x".repeat(100) })
      expect(Date.now() - started).toBeLessThan(2000)
      const text = yield* Effect.promise(() => read(body))
      expect(text.endsWith("event: reconnect\ndata: {}\n\n")).toBe(true)
      expect(text.length).toBeLessThan(4096 + 1024)
      expect(yield* log.subscribers).toBe(0)
    }))

  it.scoped("goes on from its last entry wherever the agent moved when the log closes, then reconnect", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* EventLog.make({ agentId: "a", startCursor: 0 }).pipe(Scope.extend(scope))
      const asked: Array<number> = []
      const body = yield* Sse.toNodeStream({
        ready: {},
        log,
        cursor: Option.none(),
        heartbeat: "1 hour",
        // The next owner's events: what it holds after the id asked for.
        follow: (after) => {
          asked.push(after)
          return Stream.fromIterable([entry(2, { n: 2 }), entry(3, { n: 3 }), entry(4, { n: 4 })]).pipe(
            Stream.filter((next) => next.id > after)
          )
        }
      })
      const text = Effect.promise(() => read(body))
      yield* log.publish({ n: 1 })
      yield* log.publish({ n: 2 })
      // The agent moves: its log here closes right after the second event, the third is told by its next owner.
      yield* Scope.close(scope, Exit.void)
      expect(yield* text).toBe(
        "id: 0\nevent: ready\ndata: {}\n\n" +
          'id: 1\ndata: {"n":1}\n\n' +
          'id: 2\ndata: {"n":2}\n\n' +
          'id: 3\ndata: {"n":3}\n\n' +
          'id: 4\ndata: {"n":4}\n\n' +
          "event: reconnect\ndata: {}\n\n"
      )
      expect(asked).toEqual([2])
    }))

  it.scoped("a log closed before the stream opened: ready, then what follows from the cursor", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* EventLog.make({ agentId: "a", startCursor: 10 }).pipe(Scope.extend(scope))
      yield* Scope.close(scope, Exit.void)
      const body = yield* Sse.toNodeStream({
        ready: {},
        log,
        cursor: Option.none(),
        heartbeat: "1 hour",
        follow: (after) => Stream.make(entry(after + 1, { moved: true }))
      })
      expect(yield* Effect.promise(() => read(body))).toBe(
        'id: 10\nevent: ready\ndata: {}\n\nid: 11\ndata: {"moved":true}\n\nevent: reconnect\ndata: {}\n\n'
      )
    }))

  it.scopedLive("ends a follow when the node ends its streams", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* EventLog.make({ agentId: "a", startCursor: 0 }).pipe(Scope.extend(scope))
      let end = () => {}
      let interrupted = false
      const body = yield* Sse.toNodeStream({
        ready: {},
        log,
        cursor: Option.none(),
        heartbeat: "1 hour",
        endWhen: (ending) => {
          end = ending
          return () => {}
        },
        follow: () =>
          Stream.concat(Stream.make(entry(1, { n: 1 })), Stream.never).pipe(
            Stream.ensuring(Effect.sync(() => interrupted = true))
          )
      })
      const text = Effect.promise(() => read(body))
      yield* Scope.close(scope, Exit.void)
      yield* Effect.sleep("50 millis")
      end()
      expect(yield* text).toBe(
        'id: 0\nevent: ready\ndata: {}\n\nid: 1\ndata: {"n":1}\n\nevent: reconnect\ndata: {}\n\n'
      )
      yield* Effect.sleep("50 millis")
      expect(interrupted).toBe(true)
    }))

  it.scoped("refuses a cursor behind the buffer", () =>
    Effect.gen(function*() {
      const log = yield* EventLog.make({ agentId: "a", startCursor: 100 })
      const result = yield* Effect.either(Sse.toNodeStream({ ready: {}, log, cursor: Option.some(5) }))
      expect(result._tag).toBe("Left")
    }))
})
