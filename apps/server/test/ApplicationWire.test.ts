/**
 * The application connection at the wire, as an application written
 * without our SDK speaks it: the ready frame, the MCP handshake in `mcp`
 * frames, tools/list, calls answered by POST /clients/{id}/mcp, and the
 * refusals (a second connection, a browser Origin, a foreign token).
 */
import { BareApplication, Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import * as Mcp from "@modelcontextprotocol/sdk/types.js"
import { Effect, Exit, Scope } from "effect"
import * as Jose from "jose"

const weather = {
  name: "get_weather",
  description: "The weather in a city",
  inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

const application = (base: string, agentId: string, token: string, query = "") =>
  BareApplication.connected({
    base,
    agentId,
    token,
    query,
    tools: [weather],
    answer: (message) => ({
      content: [{ type: "text", text: `sunny in ${message.params.arguments.city}` }]
    })
  })

/** Connects, again while refused with 503 (a node just started may not hold the agent's shard yet). */
const untilConnected = (options: BareApplication.Options) =>
  Effect.gen(function*() {
    for (let attempt = 1;; attempt++) {
      const app = yield* BareApplication.connect(options)
      if (app._tag === "Connected") return app
      if (app.status !== 503 || attempt === 20) return yield* Effect.die(new Error(`connection refused: ${app.status}`))
      yield* Effect.sleep("250 millis")
    }
  })

layer(TestWorld.layer(), { excludeTestServices: true })("application connection, at the wire", (it) => {
  it.scoped("a bare application serves a tool: handshake, listing, one call answered once", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, tenantId, token } = yield* TestWorld.tenantWithModel(world, "wire")
      const created = (yield* api.post("/v1/agents", {
        token,
        // No mounts, so no file tools: the application's tools are the agent's only source.
        json: { model: "fake/m1", subject: "user_42", context: { team: "blue" }, mounts: [] }
      })).body
      const app = yield* application(world.node.rest, created.id, created.token)
      expect(app.connection).toMatch(/^conn_/)
      // Listed and connected, as the agent shows it.
      let detail: any
      for (let i = 0; i < 50; i++) {
        detail = (yield* api.get(`/v1/agents/${created.id}`, { token })).body
        if (detail.connected && detail.tools.length > 0) break
        yield* Effect.sleep("100 millis")
      }
      expect(detail.connected).toBe(true)
      expect(detail.tools).toMatchObject([{ name: "get_weather", description: "The weather in a city" }])
      expect(detail.toolSources).toMatchObject([{ kind: "application", status: "listed", connected: true }])

      world.upstream.script({
        toolCalls: [{ id: "call_w", name: "get_weather", arguments: { city: "Oslo" } }]
      })
      world.upstream.script({ text: "It is sunny in Oslo." })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, {
        token,
        json: { text: "weather?", actor: "alice" }
      })).body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=20`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "It is sunny in Oslo.",
        toolCalls: [{ tool: "get_weather", toolCallId: "call_w", ok: true }]
      })
      expect(app.calls).toHaveLength(1)
      const meta = app.calls[0]!.message.params._meta
      expect(meta["agent-runtime/toolCallId"]).toBe("call_w")
      expect(meta["agent-runtime/requestId"]).toBe(accepted.id)
      expect(meta["agent-runtime/idempotencyKey"]).toMatch(/^[A-Za-z0-9_-]{43}$/)
      expect(meta.progressToken).toBe(app.calls[0]!.message.id)
      expect(meta["agent-runtime/actor"]).toBe("alice")
      // The call carries the runtime's identity: its claims, and the token of them, verifiable against the JWKS.
      const jwks = Jose.createRemoteJWKSet(new URL(`${world.node.rest}/.well-known/jwks.json`))
      const verified = yield* Effect.promise(() =>
        Jose.jwtVerify(meta["agent-runtime/identity"].token, jwks, {
          audience: `urn:agent-runtime:application:${created.id}`,
          algorithms: ["EdDSA"]
        })
      )
      expect(verified.payload).toMatchObject({
        sub: "user_42",
        act: "alice",
        ctx: { team: "blue" },
        tenant: tenantId,
        agent: created.id,
        origin: "prompt"
      })
      const { token: _token, ...claims } = meta["agent-runtime/identity"]
      expect(claims).toEqual({
        sub: "user_42",
        act: "alice",
        ctx: { team: "blue" },
        tenant: tenantId,
        agent: created.id,
        origin: "prompt"
      })

      // Every message the runtime sent is MCP as the official SDK's schemas define it.
      const sent = app.frames.filter((frame) => frame.event === "mcp").map((frame) => JSON.parse(frame.data!).message)
      expect(sent.map((message) => message.method)).toEqual([
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call"
      ])
      for (const message of sent) expect(Mcp.JSONRPCMessageSchema.safeParse(message).success, message.method).toBe(true)
      expect(Mcp.InitializeRequestSchema.safeParse(sent[0]).success).toBe(true)
      expect(Mcp.InitializedNotificationSchema.safeParse(sent[1]).success).toBe(true)
      expect(Mcp.ListToolsRequestSchema.safeParse(sent[2]).success).toBe(true)
      expect(Mcp.CallToolRequestSchema.safeParse(sent[3]).success).toBe(true)
      // And what the application answered is what an MCP server built with that SDK answers.
      expect(Mcp.ListToolsResultSchema.safeParse({ tools: [weather] }).success).toBe(true)

      // The same answer again (a retried post) is taken without effect; an answer to no call is a conflict.
      const again = yield* app.post({ jsonrpc: "2.0", id: app.calls[0]!.message.id, result: { content: [] } })
      expect(again.status).toBe(202)
      const stray = yield* app.post({ jsonrpc: "2.0", id: "call_nothing", result: { content: [] } })
      expect(stray.status).toBe(409)
      expect(stray.body.code).toBe("CONFLICT")
    }))

  it.scoped("one connection at a time: 409 APPLICATION_CONNECTED; takeover replaces; refusals", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "wire2")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const first = yield* application(world.node.rest, created.id, created.token)
      for (let i = 0; i < 50; i++) {
        if ((yield* api.get(`/v1/agents/${created.id}`, { token })).body.connected) break
        yield* Effect.sleep("100 millis")
      }
      const second = yield* Http.request(world.node.rest, "GET", `/clients/${created.id}/events`, {
        token: created.token
      })
      expect(second.status).toBe(409)
      expect(second.body.code).toBe("APPLICATION_CONNECTED")
      // A watcher never contends.
      const watcher = yield* Http.sse(world.node.rest, `/clients/${created.id}/events?watch=1`, {
        token: created.token
      })
      expect(watcher.status).toBe(200)
      // A browser is refused; so is another agent's token and the tenant's API key.
      const browser = yield* Http.request(world.node.rest, "GET", `/clients/${created.id}/events`, {
        token: created.token,
        headers: { origin: "https://example.com" }
      })
      expect(browser.status).toBe(403)
      const other = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const foreign = yield* Http.request(world.node.rest, "POST", `/clients/${created.id}/mcp`, {
        token: other.token,
        headers: { "agent-runtime-connection": first.connection },
        json: { jsonrpc: "2.0", method: "notifications/progress", params: {} }
      })
      expect(foreign.status).toBe(401)

      // Takeover: the new connection serves; the old one is told it was replaced.
      const taker = yield* application(world.node.rest, created.id, created.token, "?takeover=true")
      expect(taker.connection).not.toBe(first.connection)
      for (let i = 0; i < 100 && !first.frames.some((frame) => frame.event === "closed"); i++) {
        yield* Effect.sleep("100 millis")
      }
      expect(first.frames.find((frame) => frame.event === "closed")?.data).toContain("APPLICATION_REPLACED")
      const late = yield* first.post({ jsonrpc: "2.0", method: "notifications/progress", params: {} })
      expect(late.status).toBe(404)
    }))

  it.scoped("a replaced connection holding a call: 409 APPLICATION_REPLACED for an answer to no call it holds", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "wire4")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", mounts: [] } })).body
      const options = { base: world.node.rest, agentId: created.id, token: created.token, tools: [weather] }
      // The first connection keeps its call unanswered, so it is still held once replaced.
      const first = yield* untilConnected({ ...options, hold: () => true })
      yield* Http.waitFor(
        () => Effect.map(api.get(`/v1/agents/${created.id}`, { token }), (got) => got.body.connected === true),
        "the first connection serves the agent's tools"
      )
      world.upstream.script({ toolCalls: [{ id: "call_held", name: "get_weather", arguments: { city: "Oslo" } }] })
      world.upstream.script({ text: "It is sunny in Oslo." })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "weather?" } })).body
      yield* Http.waitFor(() => Effect.succeed(first.calls.length === 1), "the call reaches the first connection")
      yield* untilConnected({ ...options, query: "?takeover=true" })

      const stray = yield* first.post({ jsonrpc: "2.0", id: "call_nothing", result: { content: [] } })
      expect({ status: stray.status, code: stray.body.code }).toEqual({ status: 409, code: "APPLICATION_REPLACED" })
      expect(stray.body.error).toContain("taken over")
      // The OpenAPI document declares it.
      const document = (yield* Http.request(world.node.rest, "GET", "/v1/openapi.json", {})).body
      expect(JSON.stringify(document.paths["/clients/{id}/mcp"].post.responses["409"])).toContain(
        "APPLICATION_REPLACED"
      )
      // The call it holds is still its to answer.
      const held = first.calls[0]!.message
      const answered = yield* first.post({
        jsonrpc: "2.0",
        id: held.id,
        result: { content: [{ type: "text", text: "sunny in Oslo" }] }
      })
      expect(answered.status).toBe(202)
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=20`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "It is sunny in Oslo.",
        toolCalls: [{ tool: "get_weather", toolCallId: "call_held", ok: true }]
      })
      // Done with its calls, the replaced connection is gone: 404, reconnect.
      yield* Http.waitFor(
        () => Effect.succeed(first.frames.some((frame) => frame.event === "closed")),
        "the replaced connection is closed"
      )
      const late = yield* first.post({ jsonrpc: "2.0", id: "call_nothing", result: { content: [] } })
      expect({ status: late.status, code: late.body.code }).toEqual({ status: 404, code: "NOT_FOUND" })
    }))

  it.scoped("a prompt needing the application while none is connected: 409, unless allowDisconnected", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "wire3")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const connection = yield* Scope.make()
      yield* application(world.node.rest, created.id, created.token).pipe(Scope.extend(connection))
      for (let i = 0; i < 50; i++) {
        if ((yield* api.get(`/v1/agents/${created.id}`, { token })).body.tools.length > 0) break
        yield* Effect.sleep("100 millis")
      }
      yield* Scope.close(connection, Exit.void)
      let detail: any
      for (let i = 0; i < 100; i++) {
        detail = (yield* api.get(`/v1/agents/${created.id}`, { token })).body
        if (!detail.connected) break
        yield* Effect.sleep("100 millis")
      }
      expect(detail.connected).toBe(false)
      // The tools stay the agent's: the model keeps being offered them.
      expect(detail.tools).toHaveLength(1)

      const refused = yield* api.post(`/v1/agents/${created.id}/prompt`, {
        token,
        json: { text: "weather?", requestId: "req_disconnected" }
      })
      expect(refused.status).toBe(409)
      expect(refused.body.code).toBe("APPLICATION_NOT_CONNECTED")

      world.upstream.script({ toolCalls: [{ id: "call_nc", name: "get_weather", arguments: { city: "Bergen" } }] })
      world.upstream.script({ text: "I could not check." })
      // The same request id, now allowed to run without the application: nothing was recorded the first time.
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, {
        token,
        json: { text: "weather?", requestId: "req_disconnected", allowDisconnected: true }
      })).body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=20`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "I could not check.",
        toolErrors: 1,
        toolCalls: [{ tool: "get_weather", toolCallId: "call_nc", ok: false, code: "not_connected" }]
      })
    }))
})
