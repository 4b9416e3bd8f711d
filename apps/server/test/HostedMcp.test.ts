/**
 * The account's MCP server at /mcp, used by the MCP TypeScript SDK's own
 * client against a real node: it lists the tools, creates an agent, prompts
 * it and reads its reply, each through the REST operation the tool is, with
 * the caller's key; the agent is the account's, as REST shows. Without a live
 * key it answers 401; a tool's error carries the API's code; a key reaches only
 * its own tenant.
 */
import { Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Effect } from "effect"

const connect = (url: string, token: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Client({ name: "coding-agent", version: "1.0.0" })
      await client.connect(
        new StreamableHTTPClientTransport(new URL(url), {
          requestInit: { headers: { authorization: `Bearer ${token}` } }
        })
      )
      return client
    }),
    (client) => Effect.promise(() => client.close())
  )

const structured = (result: unknown) => (result as { structuredContent: Record<string, any> }).structuredContent

layer(TestWorld.layer(), { timeout: 60_000, excludeTestServices: true })("hosted MCP server", (it) => {
  it.scoped("the SDK's client lists the tools, creates an agent, prompts it and reads its reply", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "mcp-user")
      const client = yield* connect(`${world.node.rest}/mcp`, token)

      const { tools } = yield* Effect.promise(() => client.listTools())
      const names = tools.map((tool) => tool.name)
      for (const name of ["agents_create", "agents_prompt", "agents_request", "agents_events", "definitions_create"]) {
        expect(names).toContain(name)
      }
      // Nothing only an operator does, and no API token is made through it.
      expect(names.some((name) => name.startsWith("admin_") || name.startsWith("tokens_"))).toBe(false)
      const create = tools.find((tool) => tool.name === "agents_create")!
      expect(create.description).toContain("POST /v1/agents")
      // Its body is the API's own schema of an agent's creation, carried with the tool.
      const body = (create.inputSchema.properties as any).body
      const resolved = body.$ref === undefined ? body : (create.inputSchema as any).$defs[body.$ref.slice(8)]
      expect(Object.keys(resolved.properties ?? resolved.anyOf?.[0]?.properties ?? {})).toContain("model")

      world.upstream.script({ text: "hello from the agent" })
      const agent = structured(
        yield* Effect.promise(() =>
          client.callTool({ name: "agents_create", arguments: { body: { model: "fake/m1" } } })
        )
      )
      expect(agent.id).toMatch(/^client_/)
      const request = structured(
        yield* Effect.promise(() =>
          client.callTool({ name: "agents_prompt", arguments: { id: agent.id, body: { text: "hi" } } })
        )
      )
      const outcome = structured(
        yield* Effect.promise(() =>
          client.callTool({ name: "agents_request", arguments: { id: agent.id, requestId: request.id, wait: 20 } })
        )
      )
      expect(outcome).toMatchObject({ state: "completed", outcome: { result: { reply: "hello from the agent" } } })
      const events = structured(
        yield* Effect.promise(() => client.callTool({ name: "agents_events", arguments: { id: agent.id } }))
      )
      expect(events.events.some((event: any) => event.data.type === "response")).toBe(true)

      // The same agent and request through REST.
      expect((yield* api.get(`/v1/agents/${agent.id}`, { token })).status).toBe(200)
      const viaRest = yield* api.get(`/v1/agents/${agent.id}/requests/${request.id}`, { token })
      expect(viaRest.body.outcome.result.reply).toBe("hello from the agent")

      // An error answer is the API's, with its code.
      const missing = yield* Effect.promise(() =>
        client.callTool({ name: "agents_get", arguments: { id: "client_missing" } })
      )
      expect(missing.isError).toBe(true)
      expect(structured(missing)).toMatchObject({ code: "NOT_FOUND" })
      const invalid = yield* Effect.promise(() =>
        client.callTool({ name: "agents_create", arguments: { body: { model: "fake/m1", unknown: 1 } } })
      )
      expect(structured(invalid)).toMatchObject({ code: "INVALID_REQUEST" })
    }))

  it.scoped("without a live key /mcp answers 401; a key reaches only its own tenant", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const url = `${world.node.rest}/mcp`
      const initialize = {
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } }
      }
      for (const token of [undefined, "ar_live_not_a_key"]) {
        const response = yield* Http.client(world.node.rest).post("/mcp", {
          ...(token === undefined ? {} : { token }),
          headers: { accept: "application/json, text/event-stream" },
          json: initialize
        })
        expect(response.status).toBe(401)
        expect(response.body.code).toBe("UNAUTHORIZED")
        expect(response.headers.get("www-authenticate")).toContain("Bearer")
      }

      const mine = yield* TestWorld.tenantWithModel(world, "mcp-owner")
      const other = yield* TestWorld.tenantWithModel(world, "mcp-other")
      const created = yield* mine.api.post("/v1/agents", { token: mine.token, json: { model: "fake/m1" } })
      const client = yield* connect(url, other.token)
      const read = yield* Effect.promise(() =>
        client.callTool({ name: "agents_get", arguments: { id: created.body.id } })
      )
      expect(read.isError).toBe(true)
      expect(structured(read)).toMatchObject({ code: "NOT_FOUND" })
      const listed = structured(yield* Effect.promise(() => client.callTool({ name: "agents_list", arguments: {} })))
      expect(listed.data).toEqual([])
    }))
})
