/**
 * A definition's tool sources and the builtins, end to end over real HTTP
 * with a real node: an MCP server (the official SDK's) with runtime auth
 * verifying the identity token against the node's JWKS; one with a wrong
 * bearer token (status error, none of its tools for the model, the run's
 * sourceErrors saying why); an OpenAPI service called with its header auth;
 * web_search through a key scope entry pointing at the fake search
 * provider; and schedule, the agent scheduling its own prompt.
 */
import type { Http } from "@agent-runtime/testing"
import { FakeSearch, McpTestServer, OpenApiTestServer, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

type Api = ReturnType<typeof Http.client>

/** Prompts and waits for the outcome. */
const run = (api: Api, token: string, agentId: string, json: Record<string, unknown>) =>
  Effect.gen(function*() {
    const accepted = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json })).body
    return (yield* api.get(`/v1/agents/${agentId}/requests/${accepted.id}?wait=25`, { token })).body
  })

const toolNamesSent = (request: any) => (request.body.tools ?? []).map((tool: any) => tool.function.name).sort()

layer(TestWorld.layer(), { excludeTestServices: true })("tool sources", (it) => {
  it.scoped("MCP sources: runtime auth verified with the JWKS; a refused source is an error the run reports", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "sources-mcp")
      const crm = yield* McpTestServer.start({
        auth: { runtime: { jwksUrl: `${world.node.rest}/.well-known/jwks.json` } }
      })
      const locked = yield* McpTestServer.start({ auth: { bearer: "right-token" } })
      const definition = (yield* api.post("/v1/definitions", {
        token,
        json: {
          name: "crm-agent",
          model: "fake/m1",
          toolSources: [
            { kind: "mcp", name: "crm", url: crm.url, auth: { type: "runtime" }, tools: { exclude: ["slow"] } },
            { kind: "mcp", name: "locked", url: locked.url, auth: { type: "bearer", token: "wrong-token" } }
          ]
        }
      })).body
      const agent = (yield* api.post("/v1/agents", {
        token,
        // No mounts, so no file tools: the model's tools are the sources' alone.
        json: { definition: definition.id, subject: "user_7", context: { ticket: "T-1" }, mounts: [] }
      })).body

      world.upstream.script({ toolCalls: [{ id: "call_add", name: "add", arguments: { a: 2, b: 3 } }] })
      world.upstream.script({ text: "it is 5" })
      const before = world.upstream.requests().length
      const done = yield* run(api, token, agent.id, { text: "add 2 and 3", from: { id: "alice" } })
      expect(done.outcome.result).toMatchObject({
        reply: "it is 5",
        toolCalls: [{ tool: "add", toolCallId: "call_add", ok: true }],
        sourceErrors: [{ source: "locked", error: expect.stringContaining("401") }]
      })
      // The model had the crm tools but `slow` (excluded) and none of the locked server's.
      const [first, second] = world.upstream.requests().slice(before) as Array<any>
      // Exposed both ways (the default up to 10 tools): the model's own, and to code through codemode.
      expect(toolNamesSent(first)).toEqual(["add", "codemode", "echo", "fail"])
      const toolResult = second.body.messages.find((message: any) => message.role === "tool")
      expect(JSON.stringify(toolResult.content)).toContain("5")

      // Sent once, with an identity token the server verified against the node's key set.
      expect(crm.count("add")).toBe(1)
      const call = crm.received.find((received) => received.method === "tools/call")!
      expect(call.claims).toMatchObject({
        sub: "user_7",
        act: "alice",
        ctx: { ticket: "T-1" },
        agent: agent.id,
        definition: definition.id
      })
      expect(locked.count("add")).toBe(0)

      const detail = (yield* api.get(`/v1/agents/${agent.id}`, { token })).body
      expect(detail.toolSources).toMatchObject([
        {
          kind: "mcp",
          name: "crm",
          status: "listed",
          url: crm.url,
          tools: expect.arrayContaining([expect.objectContaining({ name: "add" })])
        },
        { kind: "mcp", name: "locked", status: "error", error: expect.stringContaining("401") }
      ])
      expect(JSON.stringify(detail)).not.toContain("wrong-token")
    }))

  it.scoped("an OpenAPI source: one tool per operation, called with the source's header auth", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "sources-openapi")
      const pets = yield* OpenApiTestServer.start({ apiKey: "pet-key-1" })
      const definition = (yield* api.post("/v1/definitions", {
        token,
        json: {
          name: "pets",
          model: "fake/m1",
          toolSources: [{
            kind: "openapi",
            name: "pets",
            url: pets.documentUrl,
            auth: { type: "header", name: "x-api-key", value: "pet-key-1" },
            operations: { include: ["createPet", "deletePet", "listPets"] }
          }]
        }
      })).body
      // No mounts, so no file tools: the model's tools are the source's alone.
      const agent = (yield* api.post("/v1/agents", { token, json: { definition: definition.id, mounts: [] } }))
        .body
      world.upstream.script({
        toolCalls: [{ id: "call_new", name: "createPet", arguments: { body: { name: "Rex", species: "dog" } } }]
      })
      world.upstream.script({ text: "made Rex" })
      const before = world.upstream.requests().length
      const done = yield* run(api, token, agent.id, { text: "make a dog named Rex" })
      expect(done.outcome.result).toMatchObject({ reply: "made Rex", toolCalls: [{ tool: "createPet", ok: true }] })
      expect(toolNamesSent(world.upstream.requests()[before])).toEqual([
        "codemode",
        "createPet",
        "deletePet",
        "listPets"
      ])
      const posted = pets.requestsTo("/api/pets").filter((request) => request.method === "POST")
      expect(posted).toHaveLength(1)
      expect(posted[0]!.body).toMatchObject({ name: "Rex" })
      expect(posted[0]!.headers["x-api-key"]).toBe("pet-key-1")
    }))

  it.scoped("web_search through a key scope entry at the fake provider; schedule delivers the agent's own prompt", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "sources-builtins")
      const search = yield* FakeSearch.start()
      const entry = yield* api.put("/v1/key-scopes/research/providers/brave", {
        token,
        json: { apiKey: FakeSearch.defaultApiKey, baseUrl: search.url }
      })
      expect(entry.status).toBe(200)
      const agent = (yield* api.post("/v1/agents", {
        token,
        json: { model: "fake/m1", keyScope: "research", builtins: ["web_search", "schedule"] }
      })).body

      world.upstream.script({
        toolCalls: [{ id: "call_s", name: "web_search", arguments: { query: "effect ts", count: 2 } }]
      })
      world.upstream.script({ text: "found it" })
      const before = world.upstream.requests().length
      const found = yield* run(api, token, agent.id, { text: "search effect ts" })
      expect(found.outcome.result).toMatchObject({ reply: "found it", toolCalls: [{ tool: "web_search", ok: true }] })
      expect(search.requests()).toHaveLength(1)
      expect(search.requests()[0]!.query).toMatchObject({ q: "effect ts", count: "2" })
      const [, second] = world.upstream.requests().slice(before) as Array<any>
      const result = JSON.stringify(second.body.messages.find((message: any) => message.role === "tool").content)
      expect(result).toContain("Result 1 for effect ts")

      world.upstream.script({
        toolCalls: [{
          id: "call_sched",
          name: "schedule",
          arguments: { action: "create", text: "time to check the oven", inSeconds: 1 }
        }]
      })
      world.upstream.script({ text: "scheduled" })
      world.upstream.script({ text: "checking the oven" })
      const scheduled = yield* run(api, token, agent.id, { text: "remind me in a second" })
      expect(scheduled.outcome.result).toMatchObject({ toolCalls: [{ tool: "schedule", ok: true }] })
      const started = Date.now()
      let delivered: any
      while (delivered === undefined && Date.now() - started < 15_000) {
        yield* Effect.sleep("200 millis")
        const history = (yield* api.get(`/v1/agents/${agent.id}/history`, { token })).body
        delivered = history.entries.find((entry: any) => entry.message.content === "time to check the oven")
      }
      expect(delivered?.message.metadata?.scheduleId).toMatch(/^sch_/)
      expect((yield* api.get(`/v1/agents/${agent.id}/schedules`, { token })).body).toEqual([])
    }))
})
