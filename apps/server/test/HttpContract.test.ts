/**
 * The REST contract in process (see InProcess): an operator's tenant, an
 * agent prompted and read through the typed client, the error bodies, unknown
 * fields refused, and the /clients requests.
 */
import { Agent as AgentSchemas, ApiError, Run } from "@agent-runtime/domain"
import { HttpClientRequest } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as InProcess from "./InProcess.ts"

const { ServerLive, Upstream, clientFor, operatorToken, raw, tenantWithModel } = InProcess

layer(ServerLive, { timeout: 60_000, excludeTestServices: true })("HTTP contract", (it) => {
  it.effect("an operator makes a tenant; its key makes an agent, prompts it, and reads the request, history and state", () =>
    Effect.gen(function*() {
      const upstream = yield* Upstream
      const { api, tenant } = yield* tenantWithModel("contract")
      expect(tenant.id).toMatch(/^tn_/)
      expect(tenant.name).toBe("contract")
      expect(tenant.token).toMatch(/^art_/)

      const created = yield* api.agents.create({
        headers: {},
        payload: new AgentSchemas.AgentInput({ model: "fake/m1", name: "helper", systemPrompt: "Be brief." })
      })
      expect(created.id).toMatch(/^client_/)
      expect(created.token).toMatch(/^aat_/)

      upstream.script({ text: "Hello over HTTP", usage: { input: 12, output: 4 } })
      const accepted = yield* api.agents.prompt({
        path: { id: created.id },
        payload: new Run.PromptInput({ text: "hi", requestId: "req_contract", metadata: { ticket: "T-9" } })
      })
      expect(accepted).toMatchObject({ id: "req_contract", method: "prompt", state: "running", prompt: "hi" })

      const settled = yield* api.agents.request({
        path: { id: created.id, requestId: "req_contract" },
        urlParams: { wait: 20 }
      })
      expect(settled).toMatchObject({
        id: "req_contract",
        state: "completed",
        began: 0,
        metadata: { ticket: "T-9" },
        outcome: { result: { reply: "Hello over HTTP", replyIndex: 1, messages: 2, error: null } }
      })
      // The fake provider got the call the agent's settings describe.
      const [call] = upstream.requests().filter((request) => request.protocol === "openai-chat")
      expect(call!.body).toMatchObject({
        model: "m1",
        messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hi" }]
      })

      const history = yield* api.agents.history({ path: { id: created.id }, urlParams: {} })
      expect(history).toMatchObject({ total: 2, next: null, split: false })
      expect(history.entries.map((entry) => [entry.index, (entry.message as { role: string }).role])).toEqual([
        [0, "user"],
        [1, "assistant"]
      ])

      const state = yield* api.agents.state({ path: { id: created.id } })
      expect(state.requests.map((request) => [request.id, request.state])).toEqual([["req_contract", "completed"]])
      expect(state.cursor).toBeGreaterThan(0)

      const detail = yield* api.agents.get({ path: { id: created.id } })
      expect(detail).toMatchObject({ id: created.id, name: "helper", model: "fake/m1", busy: false })
    }))

  it.effect("an unknown agent is 404 and a bad body is 400, each with its {error, code} body", () =>
    Effect.gen(function*() {
      const { api, tenant } = yield* tenantWithModel("errors")

      // Through the typed client: the declared error, decoded.
      const missing = yield* api.agents.get({ path: { id: "client_missing" } }).pipe(Effect.flip)
      expect(missing).toBeInstanceOf(ApiError.NotFound)
      expect(missing).toMatchObject({ error: "no agent client_missing" })

      // On the wire.
      const notFound = yield* raw(HttpClientRequest.get("/v1/agents/client_missing"), tenant.token)
      expect(notFound).toEqual({ status: 404, body: { error: "no agent client_missing", code: "NOT_FOUND" } })

      const invalid = yield* raw(
        HttpClientRequest.post("/v1/agents").pipe(HttpClientRequest.bodyUnsafeJson({ model: 5, name: "x" })),
        tenant.token
      )
      expect(invalid.status).toBe(400)
      expect(invalid.body).toEqual({ error: expect.stringContaining("model"), code: "INVALID_REQUEST" })

      const unknownRoute = yield* raw(HttpClientRequest.get("/v1/nothing-here"), tenant.token)
      expect(unknownRoute).toEqual({ status: 404, body: { error: "no route GET /v1/nothing-here", code: "NOT_FOUND" } })

      const noToken = yield* raw(HttpClientRequest.get("/v1/agents"), "")
      expect(noToken.status).toBe(401)
      expect(noToken.body).toMatchObject({ code: "UNAUTHORIZED" })
    }))

  it.effect("a field a body's schema does not know is refused at any depth, naming each, and nothing is written", () =>
    Effect.gen(function*() {
      const { api, tenant } = yield* tenantWithModel("unknown-fields")
      const send = (method: "POST" | "PUT" | "PATCH", path: string, body: unknown, token = tenant.token) =>
        raw(HttpClientRequest.make(method)(path).pipe(HttpClientRequest.bodyUnsafeJson(body)), token)
      const refused = (error: string) => ({
        status: 400,
        body: { error: `invalid request: ${error}`, code: "INVALID_REQUEST" }
      })

      // A setting the API does not have, and a misspelt one: neither is dropped.
      expect(yield* send("POST", "/v1/agents", { model: "fake/m1", runLimits: { turns: 3 }, spendLimt: { usd: 1 } }))
        .toEqual(refused("spendLimt: unknown field; runLimits.turns: unknown field"))
      // Inside a setting and inside a list's items.
      expect(
        yield* send("POST", "/v1/agents", {
          model: "fake/m1",
          spendLimit: { usd: 1, currency: "EUR" },
          mounts: [{ volumeId: "vol_1", path: "/data", mode: "ro", readOnly: true }]
        })
      ).toEqual(refused("mounts.0.readOnly: unknown field; spendLimit.currency: unknown field"))
      expect(yield* send("PUT", "/v1/agents/by-key/support", { model: "fake/m1", runLimit: {} }))
        .toEqual(refused("runLimit: unknown field"))
      expect(yield* api.agents.list({ urlParams: {} })).toEqual([])

      expect(
        yield* send("PUT", "/v1/providers/other", {
          type: "openai-completions",
          baseUrl: "https://models.example.com/v1",
          models: [{ id: "m1", contextWindow: 1000, contextWindw: 2000 }]
        })
      ).toEqual(refused("models.0.contextWindw: unknown field"))
      expect((yield* raw(HttpClientRequest.get("/v1/providers/other"), tenant.token)).status).toBe(404)
      expect(yield* send("POST", "/v1/tokens", { name: "ci", scopes: ["read"] })).toEqual(
        refused("scopes: unknown field")
      )
      expect(yield* send("POST", "/v1/admin/tenants", { name: "stray", plan: "pro" }, operatorToken)).toEqual(
        refused("plan: unknown field")
      )
      const operator = yield* clientFor(operatorToken)
      const tenants = yield* operator.admin.listTenants({ urlParams: { limit: 100 } })
      expect(tenants.map((listed) => listed.name)).not.toContain("stray")

      // On an agent: the prompt (with its sender), configure, fork, and the agent's own token.
      const agent = yield* api.agents.create({
        headers: {},
        payload: new AgentSchemas.AgentInput({ model: "fake/m1" })
      })
      expect(
        yield* send("POST", `/v1/agents/${agent.id}/prompt`, {
          text: "hi",
          requestId: "req_stray",
          from: { id: "u_1", role: "admin" }
        })
      ).toEqual(refused("from.role: unknown field"))
      expect(yield* send("POST", `/v1/agents/${agent.id}/configure`, { model: "fake/m1", runLimit: {} }))
        .toEqual(refused("runLimit: unknown field"))
      expect(yield* send("POST", `/v1/agents/${agent.id}/fork`, { atMesage: 0 })).toEqual(
        refused("atMesage: unknown field")
      )
      expect(
        yield* send(
          "POST",
          `/clients/${agent.id}/requests`,
          { method: "prompt", text: "hi", runLimits: {} },
          agent.token
        )
      )
        .toEqual(refused("runLimits: unknown field"))
      expect(yield* send("POST", `/clients/${agent.id}/requests`, { method: "status", verbose: true }, agent.token))
        .toEqual(refused("verbose: unknown field"))
      const state = yield* api.agents.state({ path: { id: agent.id } })
      expect(state.requests).toEqual([])
      expect((yield* api.agents.list({ urlParams: {} })).map((listed) => listed.id)).toEqual([agent.id])

      // The typed client still sends what the schemas allow.
      const configured = yield* api.agents.configure({
        path: { id: agent.id },
        payload: new AgentSchemas.ConfigureInput({ systemPrompt: "Be brief." })
      })
      expect(configured).toMatchObject({ method: "configure" })
    }))

  it.effect("a client request's error names the problem of the method it names", () =>
    Effect.gen(function*() {
      const { api } = yield* tenantWithModel("client-requests")
      const agent = yield* api.agents.create({
        headers: {},
        payload: new AgentSchemas.AgentInput({ model: "fake/m1" })
      })
      const request = (body: unknown) =>
        raw(
          HttpClientRequest.post(`/clients/${agent.id}/requests`).pipe(HttpClientRequest.bodyUnsafeJson(body)),
          agent.token
        )
      const refused = (error: string) => ({
        status: 400,
        body: { error: `invalid request: ${error}`, code: "INVALID_REQUEST" }
      })

      expect(yield* request({ method: "prompt", text: 5 })).toEqual(refused("text: Expected string, actual 5"))
      expect(yield* request({ method: "prompt" })).toEqual(refused("text: is missing"))
      expect(yield* request({ method: "steer", text: "x", from: {} })).toEqual(refused("from.id: is missing"))
      expect(yield* request({ method: "execute" })).toEqual(refused("code: is missing"))
      expect(yield* request({ method: "abort", requestId: "" })).toEqual(refused(
        'requestId: Expected a string at least 1 character(s) long, actual ""'
      ))
      expect(yield* request({ method: "reboot" })).toEqual(refused(
        'method: Expected "prompt" | "steer" | "execute" | "abort" | "status" | "continue" | "configure", actual "reboot"'
      ))
      expect((yield* api.agents.state({ path: { id: agent.id } })).requests).toEqual([])

      // The camelRun client's envelope {id, method, params}: the id is the request's, problems named the same way.
      expect(yield* request({ id: "f3b1c2d4-0000-4000-8000-000000000001", method: "prompt", params: {} })).toEqual(
        refused("text: is missing")
      )
      expect(yield* request({ id: "x", method: "prompt", params: { text: "hi", colour: "red" } })).toEqual(
        refused("colour: unknown field")
      )
      const id = "f3b1c2d4-0000-4000-8000-000000000002"
      const prompt = { id, method: "prompt", params: { text: "hi", metadata: { via: "envelope" } } }
      const accepted = (yield* request(prompt)).body as {
        id: string
        method: string
        prompt: string
        metadata: unknown
      }
      expect(accepted).toMatchObject({ id, method: "prompt", prompt: "hi", metadata: { via: "envelope" } })
      // Sent again (a retry), it is the same request.
      expect(((yield* request(prompt)).body as { id: string }).id).toBe(id)
      const status = (yield* request({ id: "st-1", method: "status", params: {} })).body as { method: string }
      expect(status.method).toBe("status")
      expect((yield* api.agents.state({ path: { id: agent.id } })).requests.map((record) => record.id)).toEqual([id])
    }))

  it.effect("the camelRun client's wire: ids it accepts, /clients/{id}/state, the connection header under its name", () =>
    Effect.gen(function*() {
      const upstream = yield* Upstream
      const { api } = yield* tenantWithModel("camelrun-wire")
      const agent = yield* api.agents.create({
        headers: {},
        payload: new AgentSchemas.AgentInput({ model: "fake/m1" })
      })
      // The ids its AgentClient and VolumeHandle check.
      expect(agent.id).toMatch(/^client_[a-f0-9]{40}$/)
      const detail = yield* api.agents.get({ path: { id: agent.id } })
      expect(detail.mounts[0]!.volumeId).toMatch(/^vol_[a-f0-9]{24}$/)

      upstream.script({ text: "stated" })
      yield* api.agents.prompt({
        path: { id: agent.id },
        payload: new Run.PromptInput({ text: "hi", requestId: "req_s" })
      })
      yield* api.agents.request({ path: { id: agent.id, requestId: "req_s" }, urlParams: { wait: 20 } })
      const state = yield* raw(HttpClientRequest.get(`/clients/${agent.id}/state`), agent.token)
      expect(state.status).toBe(200)
      expect(state.body).toMatchObject({
        cursor: expect.any(Number),
        requests: [{ id: "req_s", state: "completed", outcome: { result: { reply: "stated" } } }]
      })
      expect((yield* raw(HttpClientRequest.get(`/clients/${agent.id}/state`), "aat_wrong")).status).toBe(401)

      // POST /clients/{id}/mcp names its connection under either header; an unknown one is 404, none is 400.
      const mcp = (headers: Record<string, string>) =>
        Effect.map(
          raw(
            HttpClientRequest.post(`/clients/${agent.id}/mcp`).pipe(
              HttpClientRequest.setHeaders(headers),
              HttpClientRequest.bodyUnsafeJson({ jsonrpc: "2.0", id: 1, result: {} })
            ),
            agent.token
          ),
          (answer) => answer as { readonly status: number; readonly body: any }
        )
      expect((yield* mcp({ "x-agent-connection": "conn_gone" })).body.code).toBe("NOT_FOUND")
      expect((yield* mcp({ "agent-runtime-connection": "conn_gone" })).body.code).toBe("NOT_FOUND")
      const none = yield* mcp({})
      expect(none.status).toBe(400)
      expect(none.body.error).toContain("agent-runtime-connection")
      const both = yield* mcp({ "agent-runtime-connection": "conn_a", "x-agent-connection": "conn_b" })
      expect(both.status).toBe(400)
      expect(both.body.error).toContain("x-agent-connection")
    }))

  it.effect("a tenant cannot see or use another tenant's agent: it does not exist for it", () =>
    Effect.gen(function*() {
      const upstream = yield* Upstream
      const owner = yield* tenantWithModel("owner")
      const other = yield* tenantWithModel("other")
      const agent = yield* owner.api.agents.create({
        headers: {},
        payload: new AgentSchemas.AgentInput({ model: "fake/m1" })
      })
      const before = upstream.requests().length

      const attempts: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        other.api.agents.get({ path: { id: agent.id } }),
        other.api.agents.history({ path: { id: agent.id }, urlParams: {} }),
        other.api.agents.state({ path: { id: agent.id } }),
        other.api.agents.prompt({ path: { id: agent.id }, payload: new Run.PromptInput({ text: "let me in" }) })
      ]
      for (const read of attempts) {
        const refused = yield* Effect.flip(read)
        expect(refused).toBeInstanceOf(ApiError.NotFound)
      }
      const listed = yield* other.api.agents.list({ urlParams: {} })
      expect(listed).toEqual([])
      // The operator acting for the other tenant is held to that tenant too.
      const operator = yield* clientFor(operatorToken, { "x-agent-runtime-tenant": other.tenant.id })
      expect(yield* Effect.flip(operator.agents.get({ path: { id: agent.id } }))).toBeInstanceOf(ApiError.NotFound)

      // Nothing reached the agent: its owner sees it untouched.
      expect(upstream.requests().length).toBe(before)
      const history = yield* owner.api.agents.history({ path: { id: agent.id }, urlParams: {} })
      expect(history.total).toBe(0)
    }))
})
