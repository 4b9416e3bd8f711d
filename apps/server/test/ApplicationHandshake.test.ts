/**
 * The application connection's handshake (initialize, then tools/list) and
 * the turns that start during it, with a bare application that answers late
 * or never: the tools/list answer is acknowledged once the tools are the
 * agent's; a prompt sent while the listing is on its way waits for it and
 * gets the tools (also for an agent whose earlier tools are being replaced,
 * which is not refused APPLICATION_NOT_CONNECTED meanwhile); and the wait is
 * bounded (10 s), after which the turn runs with the tools listed before.
 */
import { BareApplication, Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

const weather = {
  name: "get_weather",
  description: "The weather in a city",
  inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

const forecast = {
  name: "get_forecast",
  description: "The forecast for a city",
  inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

/** The runtime's request of this method the application got, once it came. */
const request = (app: BareApplication.BareApplication, method: string) =>
  Effect.gen(function*() {
    const find = () =>
      app.frames.filter((frame) => frame.event === "mcp").map((frame) => JSON.parse(frame.data!).message).find((
        message
      ) => message.method === method)
    yield* Http.waitFor(() => Effect.succeed(find() !== undefined), `the runtime sends ${method}`)
    return find()
  })

/** The names of the tools offered in the model requests made since `from` of them. */
const offered = (world: TestWorld.World, from: number) =>
  world.upstream.requests().filter((recorded) => recorded.protocol === "openai-chat").slice(from).map((recorded) =>
    ((recorded.body as any).tools ?? []).map((tool: any) => tool.function.name)
  )

const modelRequests = (world: TestWorld.World) =>
  world.upstream.requests().filter((recorded) => recorded.protocol === "openai-chat").length

layer(TestWorld.layer(), { excludeTestServices: true, timeout: 120_000 })("the application's handshake", (it) => {
  it.scoped("a prompt sent while tools/list is unanswered waits for it and gets the tool; the answer is acknowledged once the tools are the agent's", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "handshake1")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", mounts: [] } })).body
      // The test answers tools/list itself.
      const app = yield* BareApplication.connected({
        base: world.node.rest,
        agentId: created.id,
        token: created.token,
        tools: [weather],
        delayMs: (message) => message.method === "tools/list" ? Infinity : 0,
        answer: (message) => ({ content: [{ type: "text", text: `sunny in ${message.params.arguments.city}` }] })
      })
      const list = yield* request(app, "tools/list")

      world.upstream.script({ toolCalls: [{ id: "call_w", name: "get_weather", arguments: { city: "Oslo" } }] })
      world.upstream.script({ text: "It is sunny in Oslo." })
      const before = modelRequests(world)
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "weather?" } })).body
      yield* Effect.sleep("1 second")
      // The turn waits for the listing: the model was not asked yet.
      expect(modelRequests(world)).toBe(before)
      const waiting = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}`, { token })).body
      expect(waiting.state).not.toBe("completed")

      const answered = yield* app.post({ jsonrpc: "2.0", id: list.id, result: { tools: [weather] } })
      expect(answered.status).toBe(202)
      // Acknowledged: the tools are the agent's and the connection serves them, read right after.
      const detail = (yield* api.get(`/v1/agents/${created.id}`, { token })).body
      expect(detail.connected).toBe(true)
      expect(detail.tools).toMatchObject([{ name: "get_weather" }])

      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=20`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "It is sunny in Oslo.",
        toolErrors: 0,
        toolCalls: [{ tool: "get_weather", toolCallId: "call_w", ok: true }]
      })
      expect(offered(world, before)[0]).toContain("get_weather")
      expect(app.calls).toHaveLength(1)
    }))

  it.scoped("an agent whose new connection is still listing other tools: a prompt is not refused, and gets the new ones", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "handshake2")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", mounts: [] } })).body
      const options = { base: world.node.rest, agentId: created.id, token: created.token }
      yield* BareApplication.connected({ ...options, tools: [weather] })
      yield* Http.waitFor(
        () =>
          Effect.map(
            api.get(`/v1/agents/${created.id}`, { token }),
            (got) => got.body.connected === true && got.body.tools.length === 1
          ),
        "the first connection serves get_weather"
      )
      // A deploy: the new process takes over and lists other tools, slower than a prompt waits for a connection (2 s).
      const next = yield* BareApplication.connected({
        ...options,
        query: "?takeover=true",
        tools: [forecast],
        delayMs: (message) => message.method === "tools/list" ? 3_000 : 0
      })
      yield* request(next, "tools/list")

      world.upstream.script({ toolCalls: [{ id: "call_f", name: "get_forecast", arguments: { city: "Bergen" } }] })
      world.upstream.script({ text: "Rain in Bergen." })
      const before = modelRequests(world)
      const sent = yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "forecast?" } })
      expect(sent.status).toBe(202)
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${sent.body.id}?wait=25`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "Rain in Bergen.",
        toolErrors: 0,
        toolCalls: [{ tool: "get_forecast", toolCallId: "call_f", ok: true }]
      })
      expect(offered(world, before)[0]).toContain("get_forecast")
      expect(offered(world, before)[0]).not.toContain("get_weather")
      expect(next.calls).toHaveLength(1)
    }))

  it.scoped("a handshake longer than the bound: the prompt waits 10 s, then runs with the tools listed before, and the log says why", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "handshake3")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", mounts: [] } })).body
      // initialize answered after 8 s (within its 10 s) and tools/list never: the handshake would last about 18 s,
      // so what ends the turn's wait is its own bound.
      yield* BareApplication.connected({
        base: world.node.rest,
        agentId: created.id,
        token: created.token,
        tools: [weather],
        delayMs: (message) => message.method === "initialize" ? 8_000 : message.method === "tools/list" ? Infinity : 0
      })
      world.upstream.script({ text: "I have no tools yet." })
      const before = modelRequests(world)
      const started = Date.now()
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "weather?" } })).body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=25`, { token })).body
      const took = Date.now() - started
      expect(done.outcome.result).toMatchObject({ reply: "I have no tools yet.", toolCalls: [] })
      expect(took).toBeGreaterThanOrEqual(9_500)
      expect(took).toBeLessThan(17_000)
      expect(offered(world, before)[0]).not.toContain("get_weather")
      const warned = world.node.output().split("\n").filter((line) =>
        line.includes("did not finish its handshake") && line.includes(created.id)
      )
      expect(warned).toHaveLength(1)
    }))
})
