/**
 * Code mode end to end over real HTTP with a real node and an MCP source
 * (the official SDK's server): the model reaching the source's tools only
 * through the `codemode` tool, each call from its code journaled under
 * `<toolCallId>:<n>` and sent once, in order; execute requests (REST and the
 * agent's own client route) running code without the model, idempotent by
 * request id, bad input refused without a request; code that throws or hits
 * a limit (CPU, memory, tool calls); an execute aborted while a tool holds
 * it; and a code schedule firing once as an execute request.
 */
import { FakeUpstream, Http, McpTestServer, TestCluster, TestDatabase, TestWorld } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { setTimeout as sleep } from "node:timers/promises"

type Api = ReturnType<typeof Http.client>
type Mcp = McpTestServer.McpTestServer

const text = (value: string) => ({ content: [{ type: "text" as const, text: value }] })

/** Tools the tests add to the MCP server beside its own `add`. */
const extraTools = (holding: { count: number }): ReadonlyArray<McpTestServer.Tool> => [
  {
    name: "double",
    description: "Doubles n.",
    inputSchema: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
    run: async ({ n }) => text(JSON.stringify({ n, doubled: n * 2 }))
  },
  {
    name: "record",
    description: "Records a sum for n; answers what it recorded.",
    inputSchema: {
      type: "object",
      properties: { n: { type: "number" }, sum: { type: "number" } },
      required: ["n", "sum"]
    }
  },
  {
    name: "hold",
    description: "Holds the call until it is cancelled (or 30 s pass).",
    inputSchema: { type: "object", properties: {} },
    run: async (_args, { signal }) => {
      holding.count++
      try {
        await sleep(30_000, undefined, { signal })
      } catch {
        // cancelled
      } finally {
        holding.count--
      }
      return text("released")
    }
  }
]

/** A tenant with the fake model, an MCP server, a definition with the server's `include` tools as code mode, an agent. */
const setup = (name: string, include: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    const { api, tenantId, token } = yield* TestWorld.tenantWithModel(world, name)
    const mcp = yield* McpTestServer.start()
    const holding = { count: 0 }
    for (const tool of extraTools(holding)) yield* mcp.addTool(tool)
    const definition = yield* api.post("/v1/definitions", {
      token,
      json: {
        name: `${name}-definition`,
        model: "fake/m1",
        toolSources: [{ kind: "mcp", name: "calc", url: mcp.url, exposure: "codemode", tools: { include } }]
      }
    })
    expect(definition.status, definition.text).toBe(201)
    // No mounts, so no file tools: the model's tools are the MCP server's alone.
    const created = yield* api.post("/v1/agents", { token, json: { definition: definition.body.id, mounts: [] } })
    expect(created.status, created.text).toBe(201)
    return {
      world,
      api,
      token,
      tenantId,
      mcp,
      holding,
      agentId: created.body.id as string,
      agentToken: created.body.token as string
    }
  })

/** The `tools/call` requests the server received, in order, as name and arguments. */
const callsTo = (mcp: Mcp) =>
  mcp.received.filter((message) => message.method === "tools/call").map((message) => ({
    name: message.params!.name as string,
    arguments: message.params!.arguments as Record<string, unknown>
  }))

/** Posts an execute request and waits for its outcome. */
const execute = (api: Api, token: string, agentId: string, json: Record<string, unknown>) =>
  Effect.gen(function*() {
    const accepted = yield* api.post(`/v1/agents/${agentId}/execute`, { token, json })
    expect(accepted.status, accepted.text).toBe(202)
    return yield* Http.settled(api, token, agentId, accepted.body.id)
  })

const historyTotal = (api: Api, token: string, agentId: string) =>
  Effect.map(api.get(`/v1/agents/${agentId}/history?limit=500`, { token }), (response) => response.body.total as number)

/** Every event the agent's buffer holds, as polled from the start. */
const allEvents = (api: Api, token: string, agentId: string) =>
  Effect.map(
    api.get(`/v1/agents/${agentId}/events?poll=1`, { token, headers: { "last-event-id": "0" } }),
    (response) => response.body.events.map((entry: any) => entry.data) as Array<any>
  )

const modelRequests = (world: TestWorld.World) =>
  world.upstream.requests().filter((request) => request.protocol === "openai-chat")

layer(TestWorld.layer(), { excludeTestServices: true })("code mode", (it) => {
  it.scoped("the model calls MCP tools through codemode: only that tool offered, each call journaled, once, in order", () =>
    Effect.gen(function*() {
      const { agentId, api, mcp, token, world } = yield* setup("codemode-turn", ["double", "add", "record"])
      const code = [
        "const sums = []",
        "for (let n = 1; n <= 3; n++) {",
        "  const d = await tools.double({ n })",
        "  const sum = await tools.add({ a: d.doubled, b: n })",
        "  const recorded = await tools.record({ n, sum })",
        "  sums.push(recorded.sum)",
        "}",
        "console.log('sums', sums.join(','))",
        "return { total: sums.reduce((a, b) => a + b, 0) }"
      ].join("\n")
      world.upstream.script({ toolCalls: [{ id: "call_code", name: "codemode", arguments: { code } }] })
      world.upstream.script({ text: "the total is 18" })
      const before = modelRequests(world).length
      const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "sum them up" } })
      expect(accepted.status, accepted.text).toBe(202)
      const done = yield* Http.settled(api, token, agentId, accepted.body.id)

      // The model had one tool, codemode, whose description declares the three.
      const [first, second] = modelRequests(world).slice(before) as Array<any>
      expect(modelRequests(world).length - before).toBe(2)
      const offered = first.body.tools as Array<any>
      expect(offered.map((tool) => tool.function.name)).toEqual(["codemode"])
      const description = offered[0].function.description as string
      for (const name of ["double", "add", "record"]) expect(description).toContain(`  ${name}(args`)
      expect(description).not.toContain("hold(")
      expect(description).not.toContain("echo(")

      // The MCP server got exactly the nine calls, in order, with the arguments the code computed.
      const expected = [1, 2, 3].flatMap((n) => [
        { name: "double", arguments: { n } },
        { name: "add", arguments: { a: 2 * n, b: n } },
        { name: "record", arguments: { n, sum: 3 * n } }
      ])
      expect(callsTo(mcp)).toEqual(expected)

      // The run's outcome lists each inner call under <toolCallId>:<n>, then the codemode call itself.
      expect(done).toMatchObject({ method: "prompt", state: "completed" })
      expect(done.error).toBeUndefined()
      expect(done.outcome.result).toMatchObject({ reply: "the total is 18", error: null, toolErrors: 0 })
      expect(done.outcome.result.toolCalls).toEqual([
        ...expected.map((call, n) => ({
          tool: call.name,
          toolCallId: "call_code",
          innerCallId: `call_code:${n}`,
          ok: true
        })),
        { tool: "codemode", toolCallId: "call_code", ok: true }
      ])

      // The model's second request carried the codemode result: the value, the logs, the call count.
      const toolMessage = (second.body.messages as Array<any>).find((message) => message.role === "tool")
      expect(toolMessage.tool_call_id).toBe("call_code")
      const resultText = JSON.stringify(toolMessage.content)
      expect(resultText).toContain('\\"total\\": 18')
      expect(resultText).toContain("sums 3,6,9")
      expect(resultText).toContain("Tool calls: 9")

      // History keeps the codemode result; the event stream shows each inner call.
      const history = (yield* api.get(`/v1/agents/${agentId}/history?limit=500`, { token })).body.entries as Array<any>
      expect(history.map((entry) => entry.message.role)).toEqual(["user", "assistant", "toolResult", "assistant"])
      const result = history[2].message
      expect(result).toMatchObject({ toolCallId: "call_code", toolName: "codemode", isError: false })
      expect(JSON.stringify(result.content)).toContain('\\"total\\": 18')
      const events = (yield* allEvents(api, token, agentId)).filter((data) =>
        data.type === "event" && data.requestId === done.id
      ).map((data) => data.event)
      const ends = events.filter((event) => event.type === "codemode" && event.stage === "call_end")
      expect(ends.map((event) => [event.innerCallId, event.toolName, event.isError])).toEqual(
        expected.map((call, n) => [`call_code:${n}`, call.name, false])
      )
      const codemodeEnd = events.find((event) => event.type === "tool_execution_end" && event.toolName === "codemode")
      expect(codemodeEnd).toMatchObject({ toolCallId: "call_code", isError: false })
      expect(JSON.stringify(codemodeEnd.result)).toContain('\\"total\\": 18')

      // AgentDetail: the source's three tools, code mode only, none excluded.
      const detail = (yield* api.get(`/v1/agents/${agentId}`, { token })).body
      expect(detail.toolSources).toHaveLength(1)
      const [source] = detail.toolSources
      expect(source).toMatchObject({ kind: "mcp", name: "calc", status: "listed", url: mcp.url, exposure: "codemode" })
      expect(source.tools.map((tool: any) => tool.name).sort()).toEqual(["add", "double", "record"])
      for (const tool of source.tools) {
        expect(tool.exposure).toBe("codemode")
        expect(tool).not.toHaveProperty("excluded")
      }
    }))

  it.scoped("execute runs code without the model: idempotent by request id; bad input is 400 and makes nothing", () =>
    Effect.gen(function*() {
      const { agentId, api, mcp, token, world } = yield* setup("codemode-execute", ["double", "add", "record"])
      const historyBefore = yield* historyTotal(api, token, agentId)
      const modelBefore = modelRequests(world).length
      const code = [
        "const d = await tools.double({ n: 5 })",
        "const sum = await tools.add({ a: d.doubled, b: 1 })",
        "console.log('sum is', sum)",
        "console.warn('careful')",
        "return { doubled: d.doubled, sum }"
      ].join("\n")
      const json = { code, requestId: "exec-1", metadata: { job: "nightly" } }
      const accepted = yield* api.post(`/v1/agents/${agentId}/execute`, { token, json })
      expect(accepted.status, accepted.text).toBe(202)
      expect(accepted.body).toMatchObject({ id: "exec-1", method: "execute", metadata: { job: "nightly" } })
      const done = yield* Http.settled(api, token, agentId, "exec-1")
      expect(done).toMatchObject({ id: "exec-1", method: "execute", state: "completed", metadata: { job: "nightly" } })
      expect(done.error).toBeUndefined()
      expect(done.outcome.result).toEqual({
        ok: true,
        value: { doubled: 10, sum: 11 },
        logs: ["sum is 11", "[warn] careful"],
        error: null,
        messages: historyBefore,
        toolErrors: 0,
        toolCalls: [
          { tool: "double", innerCallId: "exec-1:0", ok: true },
          { tool: "add", innerCallId: "exec-1:1", ok: true }
        ]
      })
      expect(callsTo(mcp)).toEqual([
        { name: "double", arguments: { n: 5 } },
        { name: "add", arguments: { a: 10, b: 1 } }
      ])
      // Never the model; no history.
      expect(modelRequests(world).length).toBe(modelBefore)
      expect(yield* historyTotal(api, token, agentId)).toBe(historyBefore)

      // The same request again is the same request, not run again; other code under its id is a conflict.
      const again = yield* api.post(`/v1/agents/${agentId}/execute`, { token, json })
      expect(again.status).toBe(202)
      expect(again.body).toMatchObject({ id: "exec-1", method: "execute", fingerprint: done.fingerprint })
      expect((yield* Http.settled(api, token, agentId, "exec-1")).outcome).toEqual(done.outcome)
      const conflict = yield* api.post(`/v1/agents/${agentId}/execute`, {
        token,
        json: { ...json, code: "return 2" }
      })
      expect(conflict.status).toBe(409)
      expect(conflict.body).toMatchObject({ code: "IDEMPOTENCY_CONFLICT", error: expect.any(String) })
      // Nor may a prompt take the execute's request id.
      const promptConflict = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "", requestId: "exec-1", metadata: { job: "nightly" } }
      })
      expect(promptConflict.status).toBe(409)
      expect(promptConflict.body.code).toBe("IDEMPOTENCY_CONFLICT")
      yield* Effect.sleep("300 millis")
      expect(callsTo(mcp)).toHaveLength(2)

      // Bad input: 400 with {error, code}, and no request made under its id.
      const bad: Array<[string, Record<string, unknown>]> = [
        ["empty code", { code: "", requestId: "bad-empty" }],
        ["no code", { requestId: "bad-missing" }],
        ["code not a string", { code: 7, requestId: "bad-type" }],
        ["code over 100,000 characters", { code: `return 1${" ".repeat(100_000)}`, requestId: "bad-long" }],
        ["an extra field", { code: "return 1", requestId: "bad-extra", text: "hi" }],
        ["an unknown field", { code: "return 1", requestId: "bad-unknown", timeoutSeconds: 5 }],
        ["empty requestId", { code: "return 1", requestId: "" }]
      ]
      for (const [why, body] of bad) {
        const refused = yield* api.post(`/v1/agents/${agentId}/execute`, { token, json: body })
        expect(refused.status, `${why}: ${refused.text}`).toBe(400)
        expect(refused.body, why).toEqual({ error: expect.any(String), code: "INVALID_REQUEST" })
        if (typeof body.requestId === "string" && body.requestId !== "") {
          const looked = yield* api.get(`/v1/agents/${agentId}/requests/${body.requestId}`, { token })
          expect(looked.status, `${why}: ${looked.text}`).toBe(404)
        }
      }
      const notJson = yield* api.post(`/v1/agents/${agentId}/execute`, {
        token,
        body: "{code:",
        headers: { "content-type": "application/json" }
      })
      expect(notJson.status).toBe(400)
      expect(notJson.body.code).toBe("INVALID_REQUEST")
      yield* Effect.sleep("500 millis")
      expect(callsTo(mcp)).toHaveLength(2)
      expect(modelRequests(world).length).toBe(modelBefore)

      // Another tenant's agent, and no agent at all: 404.
      const other = yield* TestWorld.tenantWithModel(world, "codemode-execute-other")
      const foreign = yield* other.api.post(`/v1/agents/${agentId}/execute`, {
        token: other.token,
        json: { code: "return await tools.add({ a: 1, b: 1 })", requestId: "foreign-1" }
      })
      expect(foreign.status).toBe(404)
      expect(foreign.body.code).toBe("NOT_FOUND")
      expect((yield* other.api.get(`/v1/agents/${agentId}/requests/foreign-1`, { token: other.token })).status)
        .toBe(404)
      expect((yield* api.get(`/v1/agents/${agentId}/requests/foreign-1`, { token })).status).toBe(404)
      expect(
        (yield* api.post("/v1/agents/client_nope/execute", { token, json: { code: "return 1" } })).status
      ).toBe(404)
      yield* Effect.sleep("300 millis")
      expect(callsTo(mcp)).toHaveLength(2)
    }))

  it.scoped("execute through the agent's own client route", () =>
    Effect.gen(function*() {
      const { agentId, agentToken, api, mcp, token, world } = yield* setup("codemode-client", ["double", "add"])
      const modelBefore = modelRequests(world).length
      const accepted = yield* api.post(`/clients/${agentId}/requests`, {
        token: agentToken,
        json: {
          method: "execute",
          requestId: "client-exec-1",
          code: "const d = await tools.double({ n: 21 }); return d.doubled"
        }
      })
      expect(accepted.status, accepted.text).toBe(200)
      expect(accepted.body).toMatchObject({ id: "client-exec-1", method: "execute" })
      const done = (yield* api.get(`/clients/${agentId}/requests/client-exec-1?wait=20`, { token: agentToken })).body
      expect(done).toMatchObject({ id: "client-exec-1", method: "execute", state: "completed" })
      expect(done.outcome.result).toMatchObject({
        ok: true,
        value: 42,
        error: null,
        toolCalls: [{ tool: "double", innerCallId: "client-exec-1:0", ok: true }]
      })
      expect(callsTo(mcp)).toEqual([{ name: "double", arguments: { n: 21 } }])
      expect(modelRequests(world).length).toBe(modelBefore)
      // The tenant sees the same request.
      expect((yield* api.get(`/v1/agents/${agentId}/requests/client-exec-1`, { token })).body.outcome).toEqual(
        done.outcome
      )

      // Bad input on the client route: 400, no request.
      for (
        const json of [
          { method: "execute", requestId: "client-bad-1" },
          { method: "execute", code: "", requestId: "client-bad-2" },
          { method: "execute", code: "return 1", requestId: "client-bad-3", text: "hi" }
        ]
      ) {
        const refused = yield* api.post(`/clients/${agentId}/requests`, { token: agentToken, json })
        expect(refused.status, JSON.stringify(json)).toBe(400)
        expect(refused.body.code).toBe("INVALID_REQUEST")
        expect((yield* api.get(`/clients/${agentId}/requests/${json.requestId}`, { token: agentToken })).status)
          .toBe(404)
      }
    }))

  it.scoped("code that throws, and code stopped at its CPU, memory and tool call limits", () =>
    Effect.gen(function*() {
      const { agentId, api, mcp, token, world } = yield* setup("codemode-limits", ["add"])
      const modelBefore = modelRequests(world).length

      const threw = yield* execute(api, token, agentId, {
        code:
          "const three = await tools.add({ a: 1, b: 2 })\nconsole.log('got', three)\nthrow new Error('boom ' + three)"
      })
      expect(threw.state).toBe("completed")
      expect(threw.outcome.result).toMatchObject({
        ok: false,
        logs: ["got 3"],
        error: "Error: boom 3",
        toolCalls: [{ tool: "add", ok: true }]
      })
      expect(threw.outcome.result).not.toHaveProperty("value")
      expect(threw.outcome.result).not.toHaveProperty("limit")
      expect(threw.error).toBe("Error: boom 3")

      const spun = yield* execute(api, token, agentId, { code: "let i = 0\nwhile (true) { i++ }" })
      expect(spun.outcome.result).toMatchObject({
        ok: false,
        limit: "cpu",
        error: expect.stringContaining("CPU time limit")
      })
      expect(spun.error).toEqual(expect.stringContaining("CPU time limit"))

      const hog = yield* execute(api, token, agentId, {
        code: "const kept = []\nwhile (true) kept.push(new Array(100000).fill(kept.length))"
      })
      expect(hog.outcome.result).toMatchObject({
        ok: false,
        limit: "memory",
        error: expect.stringContaining("memory limit")
      })
      // Catching the error does not get the code past the limit.
      const caught = yield* execute(api, token, agentId, {
        code: "try { const kept = []; while (true) kept.push(new Array(100000).fill(kept.length)) } catch (e) {}\n" +
          "return 'escaped'"
      })
      expect(caught.outcome.result).toMatchObject({ ok: false, limit: "memory" })
      expect(caught.outcome.result).not.toHaveProperty("value")
      // A string doubled until it is too big (reading it makes QuickJS build the whole of it).
      const long = yield* execute(api, token, agentId, {
        code: "let s = 'x'\nwhile (true) { s = s + s; s.charCodeAt(s.length - 1) }"
      })
      expect(long.outcome.result).toMatchObject({ ok: false, limit: "memory" })

      const callsBefore = mcp.count("add")
      const busy = yield* execute(api, token, agentId, {
        code: "let total = 0\nfor (let i = 0; i < 300; i++) total += await tools.add({ a: i, b: 1 })\nreturn total"
      })
      expect(busy.outcome.result).toMatchObject({
        ok: false,
        limit: "tool_calls",
        error: expect.stringContaining("256")
      })
      const made = mcp.count("add") - callsBefore
      expect(made).toBeLessThanOrEqual(256)
      expect(made).toBe(256)
      // The record keeps the first 100 calls.
      expect(busy.outcome.result.toolCalls).toHaveLength(100)
      expect(busy.outcome.result.toolCalls[99]).toEqual({ tool: "add", innerCallId: `${busy.id}:99`, ok: true })
      yield* Effect.sleep("500 millis")
      expect(mcp.count("add") - callsBefore).toBe(256)

      // None of it asked the model; the agent still runs code.
      expect(modelRequests(world).length).toBe(modelBefore)
      const fine = yield* execute(api, token, agentId, { code: "return await tools.add({ a: 40, b: 2 })" })
      expect(fine.outcome.result).toMatchObject({ ok: true, value: 42 })
    }))

  it.scoped("abort stops an execute awaiting a held tool: aborted, the call cancelled, the agent goes on", () =>
    Effect.gen(function*() {
      const { agentId, api, holding, mcp, token } = yield* setup("codemode-abort", ["hold", "add"])
      const accepted = yield* api.post(`/v1/agents/${agentId}/execute`, {
        token,
        json: { code: "const held = await tools.hold({})\nreturn held", requestId: "exec-held" }
      })
      expect(accepted.status, accepted.text).toBe(202)
      yield* Http.waitFor(() => Effect.succeed(mcp.count("hold") === 1 && holding.count === 1), "the hold call arrived")
      const running = (yield* api.get(`/v1/agents/${agentId}/requests/exec-held`, { token })).body
      expect(running.state).toBe("running")

      const aborted = yield* api.post(`/v1/agents/${agentId}/abort`, { token, json: {} })
      expect(aborted.status, aborted.text).toBeLessThan(300)
      const done = yield* Http.settled(api, token, agentId, "exec-held")
      expect(done).toMatchObject({
        method: "execute",
        state: "completed",
        code: "aborted",
        error: "aborted",
        outcome: { error: "aborted" }
      })
      // The server was told the call was cancelled, and let it go.
      const holdCall = mcp.received.find((message) =>
        message.method === "tools/call" && message.params?.name === "hold"
      )!
      yield* Http.waitFor(
        () => Effect.succeed(mcp.cancelled.includes(holdCall.id!) && holding.count === 0),
        "the hold call cancelled"
      )
      expect(mcp.count("hold")).toBe(1)

      const after = yield* execute(api, token, agentId, { code: "return await tools.add({ a: 1, b: 1 })" })
      expect(after.outcome.result).toMatchObject({ ok: true, value: 2 })
    }))

  it.scoped("a code schedule fires once as an execute request", () =>
    Effect.gen(function*() {
      const { agentId, api, mcp, token, world } = yield* setup("codemode-schedule", ["record"])
      const modelBefore = modelRequests(world).length
      const historyBefore = yield* historyTotal(api, token, agentId)
      const code = "const r = await tools.record({ n: 42, sum: 0 })\nreturn 'recorded ' + r.n"
      const made = yield* api.post(`/v1/agents/${agentId}/schedules`, { token, json: { code, inSeconds: 0 } })
      expect(made.status, made.text).toBe(201)
      expect(made.body).toMatchObject({ id: expect.stringMatching(/^sch_/), agent: agentId, code })
      expect(made.body).not.toHaveProperty("text")
      const scheduleId = made.body.id as string

      yield* Http.waitFor(() => Effect.succeed(mcp.count("record") >= 1), "the scheduled code ran", 30_000)
      const requestId = `sched_${scheduleId}_${Math.round(made.body.dueAt * 1000)}`
      const done = yield* Http.settled(api, token, agentId, requestId)
      expect(done).toMatchObject({
        id: requestId,
        method: "execute",
        state: "completed",
        metadata: { scheduleId }
      })
      expect(done.outcome.result).toMatchObject({
        ok: true,
        value: "recorded 42",
        error: null,
        toolCalls: [{ tool: "record", innerCallId: `${requestId}:0`, ok: true }]
      })
      expect(callsTo(mcp)).toEqual([{ name: "record", arguments: { n: 42, sum: 0 } }])
      // The events name no other request of the schedule.
      const scheduled = new Set(
        (yield* allEvents(api, token, agentId)).flatMap((data) =>
          data.type === "event" && String(data.requestId).startsWith(`sched_${scheduleId}_`) ? [data.requestId] : []
        )
      )
      expect([...scheduled]).toEqual([requestId])

      // Once: nothing more after a while, the schedule gone, no model call, no history.
      yield* Effect.sleep("3 seconds")
      expect(mcp.count("record")).toBe(1)
      expect((yield* api.get(`/v1/agents/${agentId}/schedules`, { token })).body).toEqual([])
      expect(modelRequests(world).length).toBe(modelBefore)
      expect(yield* historyTotal(api, token, agentId)).toBe(historyBefore)
    }))
})

it.scopedLive(
  "kill -9 of the node running code mid-call: another node runs the code again, nothing sent twice, outcome uncertain",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({ size: 3, databaseUrl, env: { ALLOW_PRIVATE_URLS: "true" } })
      const { api, token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "code-kill")
      const mcp = yield* McpTestServer.start()
      for (const tool of extraTools({ count: 0 })) yield* mcp.addTool(tool)
      const definition = yield* api.post("/v1/definitions", {
        token,
        json: {
          name: "code-kill",
          model: "fake/m1",
          toolSources: [{ kind: "mcp", name: "calc", url: mcp.url, exposure: "codemode" }]
        }
      })
      const agentId = (yield* api.post("/v1/agents", { token, json: { definition: definition.body.id } })).body.id
      const code = [
        "const first = await tools.double({ n: 1 })",
        "let held",
        "try { held = await tools.hold({}) } catch (error) { held = `failed: ${error.message}` }",
        "const second = await tools.double({ n: 2 })",
        "return { first: first.doubled, held, second: second.doubled }"
      ].join("\n")
      const accepted = yield* api.post(`/v1/agents/${agentId}/execute`, {
        token,
        json: { code, requestId: "exec-kill" }
      })
      expect(accepted.status, accepted.text).toBe(202)
      yield* Http.waitFor(() => Effect.succeed(mcp.count("hold") === 1), "the held call reached the server")

      // The node running the code dies while the held call is out.
      const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${agentId}'`)
      const owner = cluster.members.findIndex((member) => member.runnerAddress === row?.owner)
      expect(owner).toBeGreaterThanOrEqual(0)
      yield* cluster.stop(owner, "SIGKILL")
      const survivor = Http.client(cluster.members[(owner + 1) % 3]!.node.rest)
      const done = yield* Http.settled(survivor, token, agentId, "exec-kill")

      // The code ran again elsewhere: double(1) answered from the journal, the held call unknown (not sent
      // again), and only the call never sent before went out.
      expect(callsTo(mcp)).toEqual([
        { name: "double", arguments: { n: 1 } },
        { name: "hold", arguments: {} },
        { name: "double", arguments: { n: 2 } }
      ])
      expect(done.outcome.uncertain).toBe(true)
      expect(done.outcome.result).toMatchObject({
        ok: true,
        value: { first: 2, held: expect.stringContaining("whether it took effect is unknown"), second: 4 }
      })
      expect(done.outcome.result.toolCalls).toEqual([
        { tool: "double", innerCallId: "exec-kill:0", ok: true },
        { tool: "hold", innerCallId: "exec-kill:1", ok: false, code: "unknown_outcome" },
        { tool: "double", innerCallId: "exec-kill:2", ok: true }
      ])
    }),
  { timeout: 120_000 }
)
