/**
 * Tenants' trace export over real HTTP into a real OTLP receiver on loopback
 * (protobuf decoded with the protocol's own schema, and JSON): one trace per
 * run under the caller's traceparent, the span tree and its attributes,
 * content only when asked, sampling, retries and a receiver that hangs.
 */
import {
  FakeUpstream,
  Http,
  McpTestServer,
  OtlpReceiver,
  TestDatabase,
  TestNode,
  TestWorld
} from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"

const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
const callerSpan = "00f067aa0ba902b7"

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    world.upstream.reset()
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    const receiver = yield* OtlpReceiver.make
    const mcp = yield* McpTestServer.start()
    yield* mcp.addTool({
      name: "double",
      description: "Doubles n.",
      inputSchema: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
      run: async ({ n }) => ({ content: [{ type: "text", text: JSON.stringify({ doubled: n * 2 }) }] })
    })
    const definition = yield* api.post("/v1/definitions", {
      token,
      json: {
        name: `${name}-definition`,
        model: "fake/m1",
        builtins: ["ask_user"],
        toolSources: [{ kind: "mcp", name: "calc", url: mcp.url, exposure: "codemode", tools: { include: ["double"] } }]
      }
    })
    expect(definition.status, definition.text).toBe(201)
    const agent = yield* api.post("/v1/agents", {
      token,
      json: { definition: definition.body.id, mounts: [], name: "Support bot" }
    })
    expect(agent.status, agent.text).toBe(201)
    return { world, api, token, receiver, agentId: agent.body.id as string, agentToken: agent.body.token as string }
  })

layer(TestWorld.layer(), { excludeTestServices: true })("telemetry", (it) => {
  it.scoped("a run with two model calls, code mode's inner call and an answered question is one trace under the caller's span", () =>
    Effect.gen(function*() {
      const { agentId, api, receiver, token, world } = yield* setup("telemetry-tree")
      const put = yield* api.put("/v1/telemetry", {
        token,
        json: { endpoint: `${receiver.url}/v1/traces`, headers: { "x-api-key": "secret-value-1" } }
      })
      expect(put.status, put.text).toBe(200)
      expect(put.body).toMatchObject({ headers: ["x-api-key"], protocol: "http/protobuf", sampleRate: 1 })
      expect(put.text).not.toContain("secret-value-1")
      expect((yield* api.get("/v1/telemetry", { token })).text).not.toContain("secret-value-1")

      world.upstream.script({
        toolCalls: [{ id: "call_code", name: "codemode", arguments: { code: "return await tools.double({ n: 21 })" } }]
      })
      world.upstream.script({
        toolCalls: [{ id: "call_ask", name: "ask_user", arguments: { questions: [{ question: "Which color?" }] } }]
      })
      const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "double it, then ask" },
        headers: { traceparent: `00-${traceId}-${callerSpan}-01` }
      })
      expect(accepted.status, accepted.text).toBe(202)
      const stopped = yield* Http.settled(api, token, agentId, accepted.body.id)
      expect(stopped.stopped, JSON.stringify(stopped)).toBe("input_required")
      // The record says where its trace is.
      expect(stopped.trace).toMatchObject({ traceId, parentSpanId: callerSpan, sampled: true })

      world.upstream.script({ text: "Blue it is." })
      const [pending] = stopped.outcome.result.inputs
      const answered = yield* api.post(`/v1/agents/${agentId}/inputs/${pending.id}/answer`, {
        token,
        json: { action: "accept", content: { answers: { "Which color?": "blue" } } }
      })
      expect(answered.status, answered.text).toBe(200)
      const resumed = yield* Http.settled(api, token, agentId, answered.body.request.id)
      expect(resumed.state).toBe("completed")

      const spans = yield* receiver.waitFor((all) =>
        all.filter((span) => span.name.startsWith("invoke_agent")).length === 2 &&
        all.some((span) => span.name === "await_human_input")
      )
      const exported = receiver.exports()
      expect(exported[0]!.headers["x-api-key"]).toBe("secret-value-1")
      expect(exported[0]!.contentType).toBe("application/x-protobuf")
      for (const span of spans) expect(span.traceId, span.name).toBe(traceId)
      const [first, second] = spans.filter((span) => span.name === "invoke_agent Support bot")
        .sort((a, b) => Number(a.startNanos - b.startNanos))
      expect(first!.parentSpanId).toBe(callerSpan)
      expect(first!.spanId).toBe(stopped.trace.spanId)
      expect(first!.kind).toBe(2)
      expect(first!.attributes).toMatchObject({
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": agentId,
        "gen_ai.agent.name": "Support bot",
        "gen_ai.request.model": "fake/m1",
        "agent_runtime.run.status": "input_required",
        "agent_runtime.run.stopped": "input_required",
        "agent_runtime.run.model_responses": 2,
        "agent_runtime.request.id": stopped.id,
        "agent_runtime.agent.id": agentId
      })
      // The run that resumed after the answer: under the run that asked.
      expect(second!.parentSpanId).toBe(first!.spanId)
      expect(second!.attributes).toMatchObject({ "agent_runtime.run.status": "completed" })
      const children = (parent: string) => spans.filter((span) => span.parentSpanId === parent)
      const under = children(first!.spanId).map((span) => span.name).sort()
      // ... and the run that resumed after the answer.
      expect(under).toEqual([
        "chat fake/m1",
        "chat fake/m1",
        "execute_tool ask_user",
        "execute_tool codemode",
        "invoke_agent Support bot"
      ])
      const chat = children(first!.spanId).find((span) => span.name === "chat fake/m1")!
      expect(chat.kind).toBe(3)
      expect(chat.attributes).toMatchObject({
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "fake/m1",
        "gen_ai.response.finish_reasons": ["toolUse"]
      })
      expect(typeof chat.attributes["gen_ai.usage.input_tokens"]).toBe("number")
      const codemode = children(first!.spanId).find((span) => span.name === "execute_tool codemode")!
      expect(codemode.attributes).toMatchObject({ "gen_ai.tool.name": "codemode", "gen_ai.tool.call.id": "call_code" })
      const [inner] = children(codemode.spanId)
      expect(inner).toMatchObject({ name: "execute_tool double" })
      expect(inner!.attributes).toMatchObject({
        "gen_ai.tool.call.id": "call_code",
        "agent_runtime.tool.inner_call.id": "call_code:0"
      })
      const ask = children(first!.spanId).find((span) => span.name === "execute_tool ask_user")!
      expect(ask.attributes).toMatchObject({ "agent_runtime.tool.input_required": true })
      // The resumed run answers the waiting call from its input, then asks the model.
      expect(children(second!.spanId).map((span) => span.name).sort()).toEqual([
        "await_human_input",
        "chat fake/m1",
        "execute_tool ask_user"
      ])
      const wait = children(second!.spanId).find((span) => span.name === "await_human_input")!
      expect(wait.attributes).toMatchObject({
        "agent_runtime.input.id": pending.id,
        "agent_runtime.input.kind": "question",
        "agent_runtime.input.state": "answered",
        "gen_ai.tool.call.id": "call_ask"
      })
      // No content without include.content.
      for (const span of spans) {
        expect(Object.keys(span.attributes).filter((key) => /messages|arguments|result|message$/.test(key)), span.name)
          .toEqual([])
      }
      const status = (yield* api.get("/v1/telemetry", { token })).body.status
      expect(status.lastExportAt).toBeGreaterThan(0)
      expect(status.lastError).toBeNull()
      // Headers stay while the endpoint keeps its origin, and go when it moves.
      const samePlace = yield* api.put("/v1/telemetry", { token, json: { endpoint: `${receiver.url}/other/traces` } })
      expect(samePlace.body.headers).toEqual(["x-api-key"])
      const moved = yield* api.put("/v1/telemetry", {
        token,
        json: { endpoint: receiver.url.replace("127.0.0.1", "localhost") }
      })
      expect(moved.body).toMatchObject({
        headers: [],
        endpoint: `${receiver.url.replace("127.0.0.1", "localhost")}/v1/traces`
      })
      // The secret never reached a log line.
      expect(world.node.output()).not.toContain("secret-value-1")
    }))

  it.scoped("content only when asked, JSON when asked; a 503 is sent again once; sampling 0 sends nothing", () =>
    Effect.gen(function*() {
      const { agentId, api, receiver, token, world } = yield* setup("telemetry-content")
      yield* api.put("/v1/telemetry", {
        token,
        json: { endpoint: receiver.url, protocol: "http/json", include: { content: true } }
      })
      receiver.behave([{ status: 503, retryAfter: "0" }])
      world.upstream.script({ text: "the answer" })
      const done = yield* Http.prompted(api, token, agentId, { text: "the question" })
      expect(done.state).toBe("completed")
      const spans = yield* receiver.waitFor((all) => all.some((span) => span.name.startsWith("invoke_agent")))
      const run = spans.find((span) => span.name.startsWith("invoke_agent"))!
      expect(run.attributes["gen_ai.input.messages"]).toBe("the question")
      expect(run.attributes["gen_ai.output.messages"]).toBe("the answer")
      expect(receiver.exports().map((entry) => entry.status)).toEqual([503, 200])
      expect(receiver.exports()[1]!.path).toBe("/v1/traces")
      expect(receiver.exports()[1]!.contentType).toBe("application/json")
      // The batch arrived once.
      expect(new Set(spans.map((span) => span.spanId)).size).toBe(spans.length)

      yield* api.put("/v1/telemetry", { token, json: { sampleRate: 0 } })
      yield* Effect.sleep("2500 millis")
      const before = receiver.arrived()
      world.upstream.script({ text: "unsampled" })
      const quiet = yield* Http.prompted(api, token, agentId, { text: "again" })
      expect(quiet.trace).toMatchObject({ sampled: false })
      yield* Effect.sleep("4 seconds")
      expect(receiver.arrived()).toBe(before)
    }))

  it.scoped("a stateless run and an application's /clients request continue the caller's trace too", () =>
    Effect.gen(function*() {
      const { agentId, agentToken, api, receiver, token, world } = yield* setup("telemetry-entry")
      yield* api.put("/v1/telemetry", { token, json: { endpoint: receiver.url } })
      const runSpan = "1111111111111111"
      const clientSpan = "2222222222222222"
      world.upstream.script({ text: "run answer" })
      const run = yield* api.post("/v1/runs", {
        token,
        json: { model: "fake/m1", input: "classify this", wait: 20 },
        headers: { traceparent: `00-${traceId}-${runSpan}-01` }
      })
      expect(run.status, run.text).toBe(200)
      world.upstream.script({ text: "client answer" })
      const accepted = yield* api.post(`/clients/${agentId}/requests`, {
        token: agentToken,
        json: { method: "prompt", text: "hello", requestId: "c-trace" },
        headers: { traceparent: `00-${traceId}-${clientSpan}-01` }
      })
      expect(accepted.status, accepted.text).toBe(200)
      const done = (yield* api.get(`/clients/${agentId}/requests/c-trace?wait=20`, { token: agentToken })).body
      expect(done.state).toBe("completed")
      const spans = yield* receiver.waitFor((all) =>
        all.filter((span) => span.name.startsWith("invoke_agent")).length === 2
      )
      const parents = spans.filter((span) => span.name.startsWith("invoke_agent")).map((span) => span.parentSpanId)
        .sort()
      expect(parents).toEqual([runSpan, clientSpan].sort())
      for (const span of spans) expect(span.traceId).toBe(traceId)
    }))

  it.scoped("a delegate's run continues the trace under the tool call; a compaction is a span of the run", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      world.upstream.reset()
      const { api, token } = yield* TestWorld.tenantWithModel(world, "telemetry-delegate")
      const receiver = yield* OtlpReceiver.make
      yield* api.put("/v1/telemetry", { token, json: { endpoint: receiver.url } })
      yield* api.put("/v1/providers/fake", {
        token,
        json: {
          type: "openai-completions",
          baseUrl: `${world.upstream.url}/v1`,
          models: [{ id: "m1", contextWindow: 100_000 }, { id: "m2", contextWindow: 100_000 }, {
            id: "tiny",
            contextWindow: 1000
          }]
        }
      })
      const researcher = (yield* api.post("/v1/definitions", {
        token,
        json: { name: "researcher", description: "finds facts", model: "fake/m2" }
      })).body.id
      const lead = (yield* api.post("/v1/definitions", {
        token,
        json: { name: "lead", model: "fake/m1", builtins: ["delegate"], delegate: { agents: [researcher] } }
      })).body.id
      const parent = (yield* api.post("/v1/agents", { token, json: { definition: lead } })).body
      world.upstream.script({
        toolCalls: [{ id: "call_d1", name: "delegate", arguments: { agent: "researcher", task: "find X" } }]
      }, { model: "m1" })
      world.upstream.script({ text: "X is 42." }, { model: "m2" })
      world.upstream.script({ text: "X is 42, says the researcher." }, { model: "m1" })
      const done = yield* Http.prompted(api, token, parent.id, { text: "what is X?" })
      expect(done.state).toBe("completed")
      const spans = yield* receiver.waitFor((all) =>
        all.filter((span) => span.name.startsWith("invoke_agent")).length === 2
      )
      const delegateCall = spans.find((span) => span.name === "execute_tool delegate")!
      // The sub-agent's run: in the parent's trace, under the call that made it.
      const runs = spans.filter((span) => span.name.startsWith("invoke_agent"))
      const child = runs.find((span) => span.attributes["gen_ai.agent.id"] !== parent.id)!
      expect(child.parentSpanId).toBe(delegateCall.spanId)
      expect(child.traceId).toBe(delegateCall.traceId)
      expect(spans.find((span) => span.spanId === delegateCall.parentSpanId)!.attributes).toMatchObject({
        "agent_runtime.request.id": done.id
      })

      // A window too small for the history: the model summarizes it first, inside the run.
      const small = (yield* api.post("/v1/agents", { token, json: { model: "fake/tiny", mounts: [] } })).body
      world.upstream.script({ text: "first answer" }, { model: "tiny" })
      yield* Http.prompted(api, token, small.id, { text: "a".repeat(1200) })
      world.upstream.script({ text: "SUMMARY", usage: { input: 700, output: 20 } }, { model: "tiny" })
      world.upstream.script({ text: "second answer" }, { model: "tiny" })
      const second = yield* Http.prompted(api, token, small.id, { text: "b".repeat(1200) })
      const compacted = yield* receiver.waitFor((all) => all.some((span) => span.name === "compaction"))
      const compaction = compacted.find((span) => span.name === "compaction")!
      const run = compacted.find((span) => span.spanId === compaction.parentSpanId)!
      expect(run.attributes).toMatchObject({ "agent_runtime.request.id": second.id })
      expect(compaction.attributes).toMatchObject({
        "agent_runtime.operation": "compaction",
        "gen_ai.usage.input_tokens": 700,
        "gen_ai.usage.output_tokens": 20
      })
    }))

  it.scoped("a receiver that hangs never holds a run; test and clear answer what the endpoint said", () =>
    Effect.gen(function*() {
      const { agentId, api, receiver, token, world } = yield* setup("telemetry-hang")
      const test0 = yield* api.post("/v1/telemetry/test", { token })
      expect(test0.status).toBe(404)
      yield* api.put("/v1/telemetry", { token, json: { endpoint: receiver.url } })
      const tested = yield* api.post("/v1/telemetry/test", { token })
      expect(tested.status, tested.text).toBe(200)
      expect(tested.body).toMatchObject({ ok: true, status: 200 })
      expect(receiver.spans().map((span) => span.traceId)).toContain(tested.body.traceId)
      receiver.behave([], { hang: true })
      const started = Date.now()
      for (let n = 0; n < 3; n++) {
        world.upstream.script({ text: `answer ${n}` })
        const done = yield* Http.prompted(api, token, agentId, { text: `question ${n}` })
        expect(done.state).toBe("completed")
      }
      expect(Date.now() - started).toBeLessThan(10_000)
      receiver.behave([{ status: 302 }])
      const redirected = yield* api.post("/v1/telemetry/test", { token })
      expect(redirected.body).toMatchObject({ ok: false, status: 302, error: "HTTP 302: redirects are not followed" })
      receiver.behave([{ status: 401 }])
      const refused = yield* api.post("/v1/telemetry/test", { token })
      expect(refused.body).toMatchObject({ ok: false, status: 401, error: "HTTP 401" })
      expect((yield* api.get("/v1/telemetry", { token })).body.status.lastError).toBe("HTTP 401")
      expect((yield* api.delete("/v1/telemetry", { token })).body).toEqual({ deleted: true })
      expect((yield* api.delete("/v1/telemetry", { token })).body).toEqual({ deleted: false })
      expect((yield* api.get("/v1/telemetry", { token })).body).toBeNull()
      // Refused endpoints and headers change nothing.
      const bad = yield* api.put("/v1/telemetry", { token, json: { endpoint: "ftp://x" } })
      expect(bad.status).toBe(400)
      const reserved = yield* api.put("/v1/telemetry", {
        token,
        json: { endpoint: receiver.url, headers: { "Content-Type": "x" } }
      })
      expect(reserved.status).toBe(400)
      expect((yield* api.get("/v1/telemetry", { token })).body).toBeNull()
    }))
})

it.scopedLive(
  "a turn moved by a drain keeps its trace: each node exports its own spans, the run span comes once, from the node that finished it",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const receiver = yield* OtlpReceiver.make
      const databaseUrl = yield* TestDatabase.make
      const operatorToken = `aro_${"t".repeat(43)}`
      const env = { ALLOW_PRIVATE_URLS: "true" }
      const [one, two] = yield* Effect.all([
        TestNode.start({ databaseUrl, operatorToken, env }),
        TestNode.start({ databaseUrl, operatorToken, env })
      ], { concurrency: 2 })
      const api1 = Http.client(one.rest)
      const api2 = Http.client(two.rest)
      const token = (yield* api1.post("/v1/admin/tenants", { token: operatorToken, json: { name: "moved" } })).body
        .token as string
      yield* api1.put("/v1/providers/fake", {
        token,
        json: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          models: [{ id: "m1", contextWindow: 10000 }]
        }
      })
      yield* api1.put("/v1/telemetry", { token, json: { endpoint: receiver.url } })
      // Both runners hold shards before agents are placed.
      for (let i = 0; i < 50; i++) {
        const listed = (yield* api2.get("/v1/admin/runners", { token: operatorToken })).body
        if (listed.data.length === 2 && listed.data.every((runner: any) => runner.shards > 0)) break
        yield* Effect.sleep("200 millis")
      }
      const agents = yield* Effect.forEach(
        Array.from({ length: 16 }),
        () =>
          Effect.map(api1.post("/v1/agents", { token, json: { model: "fake/m1" } }), (made) => made.body.id as string)
      )
      yield* Effect.forEach(agents, (id) => api2.get(`/v1/agents/${id}/state`, { token }), { discard: true })
      const owners = yield* TestDatabase.query(databaseUrl, "SELECT id, owner FROM agents")
      const agentId = owners.find((row: any) => row.owner === one.runnerAddress)?.id as string
      expect(agentId).toBeDefined()
      const words = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ")
      upstream.script({ text: words, toolCalls: [{ name: "lookup", arguments: { q: "x" } }], tokenDelayMs: 100 })
      upstream.script({ text: "finished on the other runner" })
      const accepted = yield* api2.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "two steps" },
        headers: { traceparent: `00-${traceId}-${callerSpan}-01` }
      })
      expect(accepted.status, accepted.text).toBe(202)
      yield* Effect.sleep("400 millis")
      const drained = yield* api2.post(`/v1/admin/runners/${encodeURIComponent(one.runnerAddress)}/drain`, {
        token: operatorToken
      })
      expect(drained.status, drained.text).toBe(202)
      const done = (yield* api2.get(`/v1/agents/${agentId}/requests/${accepted.body.id}?wait=25`, { token })).body
      expect(done).toMatchObject({ state: "completed", trace: { traceId, parentSpanId: callerSpan } })
      const spans = yield* receiver.waitFor(
        (all) =>
          all.some((span) => span.name.startsWith("invoke_agent")) &&
          all.filter((span) => span.name === "chat fake/m1").length === 2,
        30_000
      )
      for (const span of spans) expect(span.traceId, span.name).toBe(traceId)
      const runs = spans.filter((span) => span.name.startsWith("invoke_agent"))
      expect(runs).toHaveLength(1)
      expect(runs[0]!.spanId).toBe(done.trace.spanId)
      expect(runs[0]!.parentSpanId).toBe(callerSpan)
      expect(runs[0]!.attributes).toMatchObject({
        "agent_runtime.run.status": "completed",
        "agent_runtime.run.resumes": 1
      })
      // The drained node's step and the next node's, under the same run span.
      const under = spans.filter((span) => span.parentSpanId === runs[0]!.spanId).map((span) => span.name).sort()
      expect(under).toEqual(["chat fake/m1", "chat fake/m1", "execute_tool lookup"])
      // Sent once each.
      expect(new Set(spans.map((span) => span.spanId)).size).toBe(spans.length)
    }),
  { timeout: 120_000 }
)
