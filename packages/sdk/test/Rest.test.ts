/**
 * The SDK against a real node (a server process on the embedded PostgreSQL,
 * the fake upstream as its model provider): the Promise API for the tenant
 * and for one agent, its event stream across a cut connection, and the typed
 * Effect client.
 */
import { TcpProxy, TestWorld } from "@agent-runtime/testing"
import { FetchHttpClient } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import { AgentRuntime, connectAgent } from "../src/AgentRuntime.ts"
import type * as EventStream from "../src/EventStream.ts"
import * as RuntimeClient from "../src/RuntimeClient.ts"
import { ApiError } from "../src/SdkError.ts"

/** Reads an iterable in the background; `until` waits for a frame that satisfies `predicate`. */
const follow = (iterable: AsyncIterable<EventStream.Frame>) => {
  const frames: Array<EventStream.Frame> = []
  let failure: unknown
  const iterator = iterable[Symbol.asyncIterator]()
  const done = (async () => {
    try {
      while (true) {
        const next = await iterator.next()
        if (next.done === true) return
        frames.push(next.value)
      }
    } catch (error) {
      failure = error
    }
  })()
  const until = (predicate: (frame: EventStream.Frame) => boolean, timeoutMs = 20_000) =>
    Effect.promise(async () => {
      const started = Date.now()
      while (!frames.some(predicate)) {
        if (failure !== undefined) throw failure
        if (Date.now() - started > timeoutMs) throw new Error(`no such frame in ${JSON.stringify(frames)}`)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      return frames
    })
  // A pending next() stays pending after return() (for-await never calls them together): do not wait for it.
  return { frames, done, until, stop: () => Effect.promise(() => iterator.return!()) }
}

const responseTo = (requestId: string) => (frame: EventStream.Frame) =>
  (frame.data as { type?: string; id?: string } | undefined)?.type === "response" &&
  (frame.data as { id: string }).id === requestId

const eventTypes = (frames: ReadonlyArray<EventStream.Frame>) =>
  frames.flatMap((frame) => {
    const data = frame.data as { type?: string; event?: { type: string } } | undefined
    return data?.type === "event" ? [data.event!.type] : data?.type === "response" ? ["response"] : []
  })

layer(TestWorld.layer(), { excludeTestServices: true })("the SDK against a node", (it) => {
  it.scoped("creates an agent, prompts it through its handle, waits for the outcome, reads history and events", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-rest")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })

      const created = yield* Effect.promise(() => runtime.createAgent({ model: "fake/m1", name: "sdk" }))
      expect(created.id).toMatch(/^client_/)
      expect(created.token).toMatch(/^aat_/)
      const detail = yield* Effect.promise(() => runtime.getAgent(created.id))
      expect(detail).toMatchObject({ id: created.id, name: "sdk", model: "fake/m1", running: false })

      const agent = connectAgent({ baseUrl: world.node.rest, agentId: created.id, token: created.token })
      const events = follow(agent.events())
      yield* events.until((frame) => frame.event === "ready")
      expect(events.frames[0]!.data).toMatchObject({ version: 1, agentId: created.id })

      world.upstream.script({ text: "Hello from the fake model" })
      const accepted = yield* Effect.promise(() => agent.prompt({ text: "hi", metadata: { ticket: "T-1" } }))
      expect(accepted).toMatchObject({ method: "prompt", prompt: "hi", metadata: { ticket: "T-1" } })
      expect(accepted.id).toMatch(/^req_/)

      const settled = yield* Effect.promise(() => agent.request(accepted.id, { wait: 20 }))
      expect(settled).toMatchObject({
        id: accepted.id,
        state: "completed",
        outcome: { result: { reply: "Hello from the fake model", error: null } }
      })

      // The same request id is the same request; with another input it is refused.
      const again = yield* Effect.promise(() =>
        agent.prompt({ text: "hi", metadata: { ticket: "T-1" }, requestId: accepted.id })
      )
      expect(again.id).toBe(accepted.id)
      expect(again.state).toBe("completed")
      const conflict = yield* Effect.promise(() =>
        agent.prompt({ text: "something else", requestId: accepted.id }).catch((error) => error)
      )
      expect(conflict).toBeInstanceOf(ApiError)
      expect(conflict).toMatchObject({ status: 409, code: "IDEMPOTENCY_CONFLICT" })

      const frames = yield* events.until(responseTo(accepted.id))
      const ids = frames.flatMap((frame) => (frame.id === undefined ? [] : [frame.id]))
      expect(ids.every((id, i) => i === 0 || id === ids[i - 1]! + 1)).toBe(true)
      expect(eventTypes(frames)).toContain("agent_start")
      expect(eventTypes(frames).at(-1)).toBe("response")

      const history = yield* Effect.promise(() => agent.history())
      expect(history.total).toBe(2)
      expect(history.entries.map((entry) => entry.message.role)).toEqual(["user", "assistant"])
      expect(yield* Effect.promise(() => runtime.history(created.id, { limit: 1 }))).toMatchObject({ total: 2 })

      const status = yield* Effect.promise(() => agent.status())
      expect(status).toMatchObject({ method: "status", state: "completed" })
      const tenantView = yield* Effect.promise(() => runtime.request(created.id, accepted.id))
      expect(tenantView.state).toBe("completed")

      yield* Effect.promise(() => agent.close())
      yield* events.stop()
    }))

  it.scoped("the event stream reconnects across a cut connection from its cursor, missing nothing", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-reconnect")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })
      const created = yield* Effect.promise(() => runtime.createAgent({ model: "fake/m1" }))
      const proxy = yield* TcpProxy.start(world.node.rest)
      // Events through the proxy; prompts straight to the node.
      const watcher = connectAgent({ baseUrl: proxy.url, agentId: created.id, token: created.token })
      const agent = connectAgent({ baseUrl: world.node.rest, agentId: created.id, token: created.token })
      const events = follow(watcher.events())
      yield* events.until((frame) => frame.event === "ready")

      world.upstream.script({ text: "first answer" })
      const first = yield* Effect.promise(() => agent.prompt({ text: "one" }))
      yield* events.until(responseTo(first.id))
      const before = events.frames.length

      // Cut the stream, and run a whole turn while it is down.
      yield* proxy.cut("refuse")
      world.upstream.script({ text: "second answer" })
      const second = yield* Effect.promise(() => agent.prompt({ text: "two" }))
      yield* Effect.promise(() => agent.request(second.id, { wait: 20 }))
      yield* proxy.restore

      const frames = yield* events.until(responseTo(second.id))
      const after = frames.slice(before)
      expect(after.filter((frame) => frame.event === "ready")).toHaveLength(1)
      const ids = frames.flatMap((frame) => (frame.id === undefined || frame.event === "ready" ? [] : [frame.id]))
      // The ready frame names the cursor its stream goes on from: the last one seen before the cut.
      const lastBefore = frames.slice(0, before).filter((frame) => frame.id !== undefined && frame.event !== "ready")
        .at(-1)!.id
      expect(after.find((frame) => frame.event === "ready")!.id).toBe(lastBefore)
      // Replayed from the last cursor: every id once, in order, across the cut.
      expect(ids.every((id, i) => i === 0 || id === ids[i - 1]! + 1)).toBe(true)
      expect(eventTypes(after)).toContain("agent_start")
      expect(eventTypes(after).at(-1)).toBe("response")

      // The tenant's own stream of the agent, from a cursor: what follows it.
      const tenantEvents = follow(runtime.events(created.id, { cursor: ids[0]! }))
      const replayed = yield* tenantEvents.until(responseTo(second.id))
      expect(replayed.find((frame) => frame.event === "ready")!.id).toBe(ids[0])
      expect(replayed.find((frame) => frame.id !== undefined && frame.event !== "ready")!.id).toBe(ids[1])
      yield* tenantEvents.stop()
      // Closing the handle ends its streams: the loop reading them finishes.
      yield* Effect.promise(() => watcher.close())
      yield* Effect.promise(() => events.done)
    }))

  it.scoped("aborts, configures and continues through the handle", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-control")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })
      const created = yield* Effect.promise(() => runtime.createAgent({ model: "fake/m1" }))
      const agent = connectAgent({ baseUrl: world.node.rest, agentId: created.id, token: created.token })

      const configured = yield* Effect.promise(() => agent.configure({ systemPromptAppend: "Be brief." }))
      expect(configured).toMatchObject({ method: "configure", state: "completed" })

      world.upstream.script({ text: Array.from({ length: 40 }, (_, i) => `word${i}`).join(" "), tokenDelayMs: 100 })
      const running = yield* Effect.promise(() => agent.prompt({ text: "long" }))
      yield* Effect.sleep("500 millis")
      const abort = yield* Effect.promise(() => agent.abort())
      expect(abort).toMatchObject({ method: "abort", state: "completed", outcome: { result: { aborted: running.id } } })
      expect(yield* Effect.promise(() => agent.request(running.id, { wait: 10 }))).toMatchObject({ code: "aborted" })

      world.upstream.script({ text: "continued" })
      const continued = yield* Effect.promise(() => agent.continue())
      const done = yield* Effect.promise(() => agent.request(continued.id, { wait: 20 }))
      expect(done).toMatchObject({
        method: "continue",
        state: "completed",
        outcome: { result: { reply: "continued" } }
      })

      const missing = yield* Effect.promise(() => agent.request("req_missing").catch((error) => error))
      expect(missing).toMatchObject({ _tag: "ApiError", status: 404, code: "NOT_FOUND" })
      const wrongToken = connectAgent({ baseUrl: world.node.rest, agentId: created.id, token: "aat_wrong" })
      expect(yield* Effect.promise(() => wrongToken.status().catch((error) => error))).toMatchObject({ status: 401 })
    }))

  it.scoped("the typed Effect client: the same API, errors as the API declares them", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-typed")
      const tenant = yield* RuntimeClient.make({ baseUrl: world.node.rest, token })
      const created = yield* tenant.agents.create({ payload: { model: "fake/m1", name: "typed" }, headers: {} })
      expect(created.id).toMatch(/^client_/)
      const detail = yield* tenant.agents.get({ path: { id: created.id } })
      expect(detail.name).toBe("typed")

      const missing = yield* Effect.either(tenant.agents.get({ path: { id: "client_missing" } }))
      expect(Either.isLeft(missing) && missing.left._tag).toBe("NotFound")

      const agent = yield* RuntimeClient.make({ baseUrl: world.node.rest, token: created.token })
      world.upstream.script({ text: "typed answer" })
      const accepted = yield* agent.clients.request({
        path: { id: created.id },
        payload: { method: "prompt", text: "hi" }
      })
      const settled = yield* agent.clients.getRequest({
        path: { id: created.id, requestId: accepted.id },
        urlParams: { wait: 20 }
      })
      expect(settled.outcome?.result).toMatchObject({ reply: "typed answer" })

      // The agent token works on its own routes only.
      const refused = yield* Effect.either(agent.agents.get({ path: { id: created.id } }))
      expect(Either.isLeft(refused) && (refused.left as { _tag: string })._tag).toBe("Unauthorized")

      const viaLayer = yield* Effect.provide(
        Effect.flatMap(RuntimeClient.RuntimeClient, (client) => client.me.get()),
        RuntimeClient.layerFetch({ baseUrl: world.node.rest, token })
      )
      expect(viaLayer.tenant).toMatch(/^tn_/)
    }).pipe(Effect.provide(FetchHttpClient.layer)))
})
