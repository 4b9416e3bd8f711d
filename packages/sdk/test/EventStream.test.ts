/**
 * The event stream's reconnects, against a local SSE server standing in for
 * the network (what the runtime itself sends is tested in Rest.test.ts).
 */
import { FetchHttpClient } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Stream } from "effect"
import * as EventStream from "../src/EventStream.ts"
import { ApiError, InvalidOptions } from "../src/SdkError.ts"
import * as Local from "./fixtures/LocalServer.ts"

const collect = (options: Omit<EventStream.Options, "token" | "path"> & { readonly path?: string }, count: number) =>
  EventStream.make({ token: "aat_test", path: "/clients/client_1/events", ...options }).pipe(
    Stream.take(count),
    Stream.runCollect,
    Effect.map(Chunk.toArray),
    Effect.provide(FetchHttpClient.layer)
  )

const gaps = (seen: ReadonlyArray<Local.Seen>) => seen.slice(1).map((request, i) => request.at - seen[i]!.at)

describe("EventStream", () => {
  it.scopedLive("reconnects at once on event: reconnect, from the last id; frames without id: never move it", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(
        Local.sse([
          Local.ready(),
          Local.event(1),
          Local.event(2),
          Local.mcp({ jsonrpc: "2.0", id: "call_1", method: "ping" }),
          Local.reconnect
        ]),
        Local.sse([Local.ready(), Local.event(3)])
      )
      const frames = yield* collect({ baseUrl: server.url, backoff: { initial: "2 seconds" } }, 6)
      expect(frames.map((frame) => [frame.event, frame.id])).toEqual([
        ["ready", undefined],
        ["message", 1],
        ["message", 2],
        ["mcp", undefined],
        ["ready", undefined],
        ["message", 3]
      ])
      expect(frames[1]!.data).toEqual({ type: "event", event: { type: "agent_start" } })
      expect(frames[3]!.data).toEqual({ jsonrpc: "2.0", id: "call_1", method: "ping" })
      const [first, second] = server.seen
      expect(first!.headers["last-event-id"]).toBeUndefined()
      expect(first!.headers.authorization).toBe("Bearer aat_test")
      expect(first!.headers.accept).toBe("text/event-stream")
      expect(second!.headers["last-event-id"]).toBe("2")
      expect(gaps(server.seen)[0]).toBeLessThan(1500)
    }))

  it.scopedLive("starts after a given cursor and sends the query", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(Local.sse([Local.ready(), Local.event(42)]))
      yield* collect({ baseUrl: server.url, cursor: 41, query: { watch: "1", skipped: undefined } }, 2)
      expect(server.seen[0]!.headers["last-event-id"]).toBe("41")
      expect(server.seen[0]!.url.search).toBe("?watch=1")
    }))

  it.scopedLive("after failures waits 250 ms, then doubling; bytes that make frames reset the wait", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      const cut: Local.Handler = (_request, response) => response.destroy()
      server.script(
        cut,
        cut,
        cut,
        Local.sse([Local.ready(), Local.event(1)], "destroy"),
        cut,
        Local.sse([Local.ready(), Local.event(2)])
      )
      const frames = yield* collect({ baseUrl: server.url }, 4)
      expect(frames.map((frame) => frame.id)).toEqual([undefined, 1, undefined, 2])
      const waits = gaps(server.seen)
      expect(waits[0]).toBeGreaterThanOrEqual(240)
      expect(waits[1]).toBeGreaterThanOrEqual(490)
      expect(waits[2]).toBeGreaterThanOrEqual(990)
      // The fourth connection worked (and was cut 50 ms after its frames): the failure after it waits the
      // shortest time again, the next one twice that.
      expect(waits[3]).toBeGreaterThanOrEqual(290)
      expect(waits[3]).toBeLessThan(1000) // 2 s had it not been reset
      expect(waits[4]).toBeGreaterThanOrEqual(490)
      expect(waits[4]).toBeLessThan(1500) // 4 s had it not been reset
      expect(server.seen[4]!.headers["last-event-id"]).toBe("1")
    }))

  it.scopedLive("never waits more than the backoff maximum", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      const cut: Local.Handler = (_request, response) => response.destroy()
      server.script(cut, cut, cut, cut, Local.sse([Local.ready()]))
      yield* collect({ baseUrl: server.url, backoff: { initial: "50 millis", max: "120 millis" } }, 1)
      const waits = gaps(server.seen)
      expect(waits[0]).toBeGreaterThanOrEqual(45)
      expect(waits[2]).toBeGreaterThanOrEqual(115)
      expect(waits[3]).toBeLessThan(350) // 400 ms without the maximum
    }))

  it.scopedLive("a silent stream is dead after the watchdog: it reconnects from its cursor", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(Local.sse([Local.ready(), Local.event(5)], "hang"), Local.sse([Local.ready(), Local.event(6)]))
      const frames = yield* collect({ baseUrl: server.url, watchdog: "300 millis" }, 4)
      expect(frames.map((frame) => frame.id)).toEqual([undefined, 5, undefined, 6])
      expect(server.seen[1]!.headers["last-event-id"]).toBe("5")
      expect(gaps(server.seen)[0]).toBeGreaterThanOrEqual(290)
      // The dead connection was closed by the client.
      yield* Effect.promise(() => server.seen[0]!.closed)
    }))

  it.scopedLive("heartbeats keep a stream alive past the watchdog", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script((_request, response) => {
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.write(Local.ready())
        const beat = setInterval(() => response.write(": heartbeat\n\n"), 100)
        setTimeout(() => {
          clearInterval(beat)
          response.write(Local.event(1))
        }, 1200)
      })
      const frames = yield* collect({ baseUrl: server.url, watchdog: "500 millis" }, 2)
      expect(frames.map((frame) => frame.id)).toEqual([undefined, 1])
      expect(server.seen).toHaveLength(1)
    }))

  it.scopedLive("409 REPLAY_GAP: reconnects at once asking for a snapshot, once", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(
        Local.json(409, { error: "the cursor is behind the replay buffer", code: "REPLAY_GAP" }),
        Local.sse([Local.ready(), Local.event(100, { type: "snapshot", cursor: 100, turn: [] }), Local.reconnect]),
        Local.sse([Local.ready(), Local.event(101)])
      )
      const frames = yield* collect({ baseUrl: server.url, cursor: 3, backoff: { initial: "2 seconds" } }, 4)
      expect(frames[1]).toMatchObject({ id: 100, data: { type: "snapshot", cursor: 100 } })
      const [gap, snapshot, after] = server.seen
      expect(gap!.url.searchParams.get("snapshot")).toBeNull()
      expect(snapshot!.url.searchParams.get("snapshot")).toBe("1")
      expect(snapshot!.headers["last-event-id"]).toBe("3")
      expect(gaps(server.seen)[0]).toBeLessThan(1500)
      // Caught up: the next connection asks for the replay again.
      expect(after!.url.searchParams.get("snapshot")).toBeNull()
      expect(after!.headers["last-event-id"]).toBe("100")
    }))

  it.scopedLive("a second REPLAY_GAP in a row fails the stream", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(Local.json(409, { error: "behind", code: "REPLAY_GAP" }))
      const failed = yield* Effect.either(collect({ baseUrl: server.url, cursor: 3 }, 1))
      expect(Either.getLeft(failed).pipe((left) => left._tag === "Some" && ApiError.is(left.value, "REPLAY_GAP")))
        .toBe(true)
      expect(server.seen).toHaveLength(2)
    }))

  it.scopedLive("5xx and 429 wait as Retry-After says", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(
        Local.json(503, { error: "draining", code: "UNAVAILABLE" }, { "retry-after": "1" }),
        Local.json(429, { error: "slow down", code: "RATE_LIMITED" }),
        Local.sse([Local.ready()])
      )
      yield* collect({ baseUrl: server.url }, 1)
      const waits = gaps(server.seen)
      expect(waits[0]).toBeGreaterThanOrEqual(990)
      expect(waits[1]).toBeGreaterThanOrEqual(490) // no Retry-After: the backoff, second step
    }))

  it.scopedLive("refusals another try would not change fail the stream with the runtime's code", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      for (
        const [status, code] of [[401, "UNAUTHORIZED"], [409, "APPLICATION_CONNECTED"], [410, "GONE"]] as const
      ) {
        server.script(Local.json(status, { error: `refused ${code}`, code }))
        const error = yield* Effect.flip(collect({ baseUrl: server.url }, 1))
        expect(error).toBeInstanceOf(ApiError)
        expect(error).toMatchObject({ status, code, message: `refused ${code}` })
      }
      expect(server.seen).toHaveLength(3)
    }))

  it.scopedLive("a redirect is refused, never followed", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script((_request, response) => response.writeHead(302, { location: `${server.url}/elsewhere` }).end())
      const error = yield* Effect.flip(collect({ baseUrl: server.url }, 1))
      expect(error).toMatchObject({ _tag: "ApiError", status: 302, code: "REDIRECT" })
      expect(server.seen).toHaveLength(1)
    }))

  it.scopedLive("event: closed ends the stream", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(Local.sse([
        Local.ready("conn_1"),
        Local.event(1),
        'event: closed\ndata: {"reason":"replaced","code":"APPLICATION_REPLACED"}\n\n'
      ]))
      const frames = yield* collect({ baseUrl: server.url }, 10)
      expect(frames.map((frame) => frame.event)).toEqual(["ready", "message", "closed"])
      expect(frames[2]!.data).toEqual({ reason: "replaced", code: "APPLICATION_REPLACED" })
      expect(server.seen).toHaveLength(1)
    }))

  it.scopedLive("a runtime that keeps ending streams at once is not hammered", () =>
    Effect.gen(function*() {
      const server = yield* Local.start
      server.script(Local.sse([Local.ready(), Local.reconnect]))
      yield* collect({ baseUrl: server.url, backoff: { initial: "1 second" } }, 4)
      const waits = gaps(server.seen)
      expect(waits[0]).toBeLessThan(800)
      expect(waits[1]).toBeGreaterThanOrEqual(990)
      expect(waits[2]).toBeGreaterThanOrEqual(1990)
    }))

  it.scopedLive("requires https, except for localhost and 127.0.0.1", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(collect({ baseUrl: "http://example.com" }, 1))
      expect(error).toBeInstanceOf(InvalidOptions)
      expect(error.message).toContain("https")
    }))

  it.live("as an async iterable: leaving the loop closes the connection; a failure is thrown as it is", () =>
    Effect.promise(async () => {
      const scope = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
        const server = yield* Local.start
        server.script(Local.sse([Local.ready(), Local.event(1), Local.event(2)]))
        const frames: Array<EventStream.Frame> = []
        yield* Effect.promise(async () => {
          for await (
            const frame of EventStream.iterate({ baseUrl: server.url, token: "aat_test", path: "/clients/c/events" })
          ) {
            frames.push(frame)
            if (frame.id === 1) break
          }
        })
        yield* Effect.promise(() => server.seen[0]!.closed)
        server.script(Local.json(404, { error: "no agent", code: "NOT_FOUND" }))
        const thrown = yield* Effect.promise(async () => {
          try {
            for await (
              const _ of EventStream.iterate({ baseUrl: server.url, token: "aat_test", path: "/clients/c/events" })
            ) {
              // nothing comes
            }
            return undefined
          } catch (error) {
            return error
          }
        })
        const controller = new AbortController()
        server.script(Local.sse([Local.ready()]))
        const ended = yield* Effect.promise(async () => {
          let count = 0
          setTimeout(() => controller.abort(), 200)
          for await (
            const _ of EventStream.iterate({
              baseUrl: server.url,
              token: "aat_test",
              path: "/clients/c/events",
              signal: controller.signal
            })
          ) count++
          return count
        })
        return { frames, thrown, ended }
      })))
      expect(scope.frames.map((frame) => frame.id)).toEqual([undefined, 1])
      expect(scope.thrown).toBeInstanceOf(ApiError)
      expect(scope.thrown).toMatchObject({ status: 404, code: "NOT_FOUND" })
      expect(scope.ended).toBe(1)
    }))
})
