/**
 * The turn's tools over real HTTP: builtins as the agent's tool source, the
 * model given them, calls carried out by their execution modes against a
 * real page server, results journaled and shown, and a call cut by a lost
 * node answered as unknown, never sent again.
 */
import { FakeUpstream, Http, TestCluster, TestDatabase, TestWorld, ToolServer } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"

const chatRequests = (upstream: FakeUpstream.FakeUpstream) =>
  upstream.requests().filter((request) => request.protocol === "openai-chat")

layer(TestWorld.layer(), { excludeTestServices: true })("tools", (it) => {
  it.scoped("web_fetch: two parallel calls run together, results join history in call order", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const pages = yield* ToolServer.start
      const { api, token } = yield* TestWorld.tenantWithModel(world, "fetcher")
      const created = (yield* api.post("/v1/agents", {
        token,
        // No mounts, so no file tools: the builtins are the agent's only source.
        json: { model: "fake/m1", builtins: ["web_fetch", "ask_user"], mounts: [] }
      })).body
      const detail = (yield* api.get(`/v1/agents/${created.id}`, { token })).body
      expect(detail.builtins).toEqual(["web_fetch", "ask_user"])
      expect(detail.toolSources).toMatchObject([{
        kind: "builtin",
        status: "listed",
        tools: [
          { name: "web_fetch", exposure: "both", executionMode: "parallel" },
          // A question waits on a person: the model asks it directly, never from code.
          { name: "ask_user", exposure: "direct", executionMode: "sequential" }
        ]
      }])

      const before = chatRequests(world.upstream).length
      world.upstream.script({
        toolCalls: [
          { id: "call_a", name: "web_fetch", arguments: { url: `${pages.url}/a?delay=400` } },
          { id: "call_b", name: "web_fetch", arguments: { url: `${pages.url}/b?delay=400` } }
        ]
      })
      world.upstream.script({ text: "both pages say 42" })
      const events = yield* Http.sse(world.node.rest, `/v1/agents/${created.id}/events`, { token })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "read a and b" } }))
        .body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=20`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "both pages say 42",
        toolErrors: 0,
        toolCalls: [
          { tool: "web_fetch", toolCallId: "call_a", ok: true },
          { tool: "web_fetch", toolCallId: "call_b", ok: true }
        ]
      })

      // Parallel: each call started before the other ended.
      const [a, b] = [pages.calls.find((call) => call.path === "/a")!, pages.calls.find((call) => call.path === "/b")!]
      expect(a.startedAt).toBeLessThan(b.endedAt!)
      expect(b.startedAt).toBeLessThan(a.endedAt!)

      // The model was given the tool, and got both results back in call order, as text without the page's script.
      const [first, second] = chatRequests(world.upstream).slice(before) as Array<any>
      // web_fetch is exposed both ways (the default up to 10 tools): directly, and to code through codemode.
      expect(first.body.tools.map((tool: any) => tool.function.name)).toEqual(["web_fetch", "ask_user", "codemode"])
      const results = second.body.messages.filter((message: any) => message.role === "tool")
      expect(results.map((message: any) => message.tool_call_id)).toEqual(["call_a", "call_b"])
      const resultText = JSON.stringify(results[0].content)
      expect(resultText).toContain("The answer for /a is 42")
      expect(resultText).not.toContain("hidden")

      const history = (yield* api.get(`/v1/agents/${created.id}/history`, { token })).body
      expect(history.entries.map((entry: any) => entry.message.role)).toEqual([
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant"
      ])
      const frames = yield* events.take((frame) => frame.data?.includes('"type":"response"') ?? false)
      const types = frames.flatMap((frame) => {
        const data = frame.data === undefined ? undefined : JSON.parse(frame.data)
        return data?.type === "event" && data.event.type.startsWith("tool_execution") ? [data.event] : []
      })
      expect(types.filter((event) => event.type === "tool_execution_start").map((event) => event.toolCallId).sort())
        .toEqual(["call_a", "call_b"])
      expect(types.filter((event) => event.type === "tool_execution_end")).toHaveLength(2)
      expect(types.find((event) => event.type === "tool_execution_end")).toMatchObject({
        toolName: "web_fetch",
        isError: false
      })
    }))

  it.scoped("failed and unavailable tool calls are tool errors the model sees; builtins are replaced by configure", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const pages = yield* ToolServer.start
      const { api, token } = yield* TestWorld.tenantWithModel(world, "errors")
      const created =
        // No mounts, so no file tools: the builtins are the agent's only source.
        (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", builtins: ["web_fetch"], mounts: [] } }))
          .body
      world.upstream.script({
        toolCalls: [
          { id: "call_missing", name: "web_fetch", arguments: { url: `${pages.url}/missing?status=404` } },
          { id: "call_private", name: "web_fetch", arguments: { url: "file:///etc/passwd" } },
          { id: "call_other", name: "delete_everything", arguments: {} }
        ]
      })
      world.upstream.script({ text: "none of that worked" })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "try" } })).body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=20`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "none of that worked",
        toolErrors: 3,
        toolCalls: [
          { toolCallId: "call_missing", ok: false, code: "failed" },
          { toolCallId: "call_private", ok: false, code: "failed" },
          { toolCallId: "call_other", ok: false, code: "unavailable" }
        ]
      })
      const history = (yield* api.get(`/v1/agents/${created.id}/history`, { token })).body
      const results = history.entries.filter((entry: any) => entry.message.role === "toolResult")
      expect(results.map((entry: any) => entry.message.isError)).toEqual([true, true, true])
      expect(results[0].message.content[0].text).toContain("HTTP 404")
      expect(results[1].message.content[0].text).toContain("not allowed")

      const configured = yield* api.post(`/v1/agents/${created.id}/configure`, { token, json: { builtins: [] } })
      expect(configured.status).toBe(200)
      const detail = (yield* api.get(`/v1/agents/${created.id}`, { token })).body
      expect(detail).toMatchObject({ builtins: [], toolSources: [] })
      const before = chatRequests(world.upstream).length
      const next = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "again" } })).body
      yield* api.get(`/v1/agents/${created.id}/requests/${next.id}?wait=20`, { token })
      // With no tools left the model is offered none (the client may still send an empty list).
      expect((chatRequests(world.upstream)[before]!.body as any).tools ?? []).toEqual([])
    }))
})

it.scopedLive(
  "a tool call cut by a killed node is answered as unknown on restart and never sent again",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const pages = yield* ToolServer.start
      // One node restarted in place: same database, runner address and operator token.
      const cluster = yield* TestCluster.start({
        size: 1,
        databaseUrl: yield* TestDatabase.make,
        env: { ALLOW_PRIVATE_URLS: "true" }
      })
      const first = cluster.members[0]!.node
      const { api, token } = yield* TestWorld.tenantWithModel({ node: first, upstream }, "crash-tools")
      upstream.script({
        toolCalls: [
          { id: "call_fast", name: "web_fetch", arguments: { url: `${pages.url}/fast` } },
          { id: "call_slow", name: "web_fetch", arguments: { url: `${pages.url}/slow?delay=20000` } }
        ]
      })
      upstream.script({ text: "carried on" })
      const created = (yield* api.post("/v1/agents", {
        token,
        json: { model: "fake/m1", builtins: ["web_fetch"], prompt: { text: "fetch both" } }
      })).body
      // Kill the node while the slow call is in flight (the fast one has its result journaled).
      while (pages.count("/slow") === 0 || pages.calls.find((call) => call.path === "/fast")?.endedAt === undefined) {
        yield* Effect.sleep("50 millis")
      }
      yield* Effect.sleep("300 millis")
      yield* cluster.stop(0, "SIGKILL")

      const second = yield* cluster.start(0)
      const api2 = Http.client(second.rest)
      const done = (yield* api2.get(`/v1/agents/${created.id}/requests/${created.prompt.id}?wait=25`, { token })).body
      expect(done).toMatchObject({
        state: "completed",
        outcome: {
          uncertain: true,
          result: {
            reply: "carried on",
            resumed: true,
            toolCalls: [
              { toolCallId: "call_fast", ok: true },
              { toolCallId: "call_slow", ok: false, code: "unknown_outcome" }
            ]
          }
        }
      })
      expect(pages.count("/fast")).toBe(1)
      expect(pages.count("/slow")).toBe(1)
      const history = (yield* api2.get(`/v1/agents/${created.id}/history`, { token })).body
      expect(history.entries.map((entry: any) => entry.message.role)).toEqual([
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant"
      ])
      // The model was asked once for the first step and once after the restart: the finished response was not asked again.
      expect(upstream.requests().filter((request) => request.protocol === "openai-chat")).toHaveLength(2)
    }),
  { timeout: 90_000 }
)
