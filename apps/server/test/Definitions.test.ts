/**
 * Definitions over real HTTP: revisions (create, read, list, update, an
 * earlier revision, delete), secrets sealed and never shown, URLs checked
 * before anything is written, and how a definition's settings combine with
 * an agent's: AgentInput's rules at creation, an agent's own model,
 * thinkingLevel and fileTools surviving a move to a newer revision,
 * systemPromptAppend kept, a configured systemPrompt replaced, builtins
 * refused on such an agent; the definition's system prompt is what the
 * model gets. Another tenant sees none of it. An Idempotency-Key makes the
 * create an upsert by key (camelRun's upsertDefinition).
 */
import { TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

const mcp = (name: string, token?: string) => ({
  kind: "mcp",
  name,
  url: `http://127.0.0.1:9/${name}/mcp`,
  auth: token === undefined ? { type: "runtime" } : { type: "bearer", token }
})

layer(TestWorld.layer(), { excludeTestServices: true })("definitions", (it) => {
  it.scoped("revisions: create, read, list, update, an earlier revision, delete; secrets never shown", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "definitions-crud")
      const created = yield* api.post("/v1/definitions", {
        token,
        json: {
          name: "support",
          description: "answers tickets",
          model: "fake/m1",
          systemPrompt: "You are support.",
          thinkingLevel: "low",
          builtins: ["web_fetch"],
          toolSources: [mcp("crm", "crm-secret-token-1234"), mcp("docs")]
        }
      })
      expect(created.status, JSON.stringify(created.body)).toBe(201)
      const first = created.body
      expect(first).toMatchObject({
        id: expect.stringMatching(/^def_/),
        revision: 1,
        name: "support",
        model: "fake/m1",
        systemPrompt: "You are support.",
        builtins: ["web_fetch"],
        toolSources: [
          { kind: "mcp", name: "crm", auth: { type: "bearer", last4: "1234" } },
          { kind: "mcp", name: "docs", auth: { type: "runtime" } }
        ]
      })
      expect(JSON.stringify(first)).not.toContain("crm-secret-token")

      // An update writes revision 2; a source's secret left out keeps the same-named source's.
      const updated = yield* api.patch(`/v1/definitions/${first.id}`, {
        token,
        json: {
          systemPrompt: "You are better support.",
          thinkingLevel: null,
          toolSources: [{ ...mcp("crm"), auth: { type: "bearer" } }]
        }
      })
      expect(updated.status).toBe(200)
      expect(updated.body).toMatchObject({
        revision: 2,
        systemPrompt: "You are better support.",
        toolSources: [{ name: "crm", auth: { type: "bearer", last4: "1234" } }]
      })
      expect(updated.body.thinkingLevel).toBeUndefined()
      expect((yield* api.get(`/v1/definitions/${first.id}`, { token })).body.revision).toBe(2)
      const earlier = (yield* api.get(`/v1/definitions/${first.id}?revision=1`, { token })).body
      expect(earlier).toMatchObject({ revision: 1, systemPrompt: "You are support.", thinkingLevel: "low" })
      expect((yield* api.get(`/v1/definitions/${first.id}?revision=3`, { token })).status).toBe(404)

      const listed = (yield* api.get("/v1/definitions", { token })).body
      expect(listed.map((definition: any) => [definition.id, definition.revision])).toEqual([[first.id, 2]])

      // Bad input changes nothing: a new source without its secret, a private address, a duplicate name.
      for (
        const toolSources of [
          [{ ...mcp("new"), auth: { type: "bearer" } }],
          [{ ...mcp("crm"), auth: { type: "bearer" }, url: "http://127.0.0.1:9/crm/mcp" }, mcp("crm")],
          [{ kind: "openapi", name: "pets" }],
          [{ kind: "mcp", name: "bad name!", url: "http://127.0.0.1:9/mcp" }]
        ]
      ) {
        const refused = yield* api.patch(`/v1/definitions/${first.id}`, { token, json: { toolSources } })
        expect(refused.status, JSON.stringify(toolSources)).toBe(400)
        expect(refused.body.code).toBe("INVALID_REQUEST")
      }
      expect((yield* api.get(`/v1/definitions/${first.id}`, { token })).body.revision).toBe(2)
      const extra = yield* api.post("/v1/definitions", { token, json: { name: "x", unknownField: 1 } })
      expect(extra.status).toBe(400)

      // Another tenant sees nothing and changes nothing.
      const other = yield* TestWorld.tenantWithModel(world, "definitions-other")
      expect((yield* other.api.get(`/v1/definitions/${first.id}`, { token: other.token })).status).toBe(404)
      expect(
        (yield* other.api.patch(`/v1/definitions/${first.id}`, { token: other.token, json: { name: "y" } })).status
      )
        .toBe(404)
      expect((yield* other.api.delete(`/v1/definitions/${first.id}`, { token: other.token })).status).toBe(404)
      expect((yield* other.api.get("/v1/definitions", { token: other.token })).body).toEqual([])
      const foreign = yield* other.api.post("/v1/agents", { token: other.token, json: { definition: first.id } })
      expect(foreign.status).toBe(400)

      // Deleted: no new agents from it, its revisions still readable by number for the agents made from it.
      expect((yield* api.delete(`/v1/definitions/${first.id}`, { token })).body).toEqual({
        id: first.id,
        deleted: true
      })
      expect((yield* api.get(`/v1/definitions/${first.id}`, { token })).status).toBe(404)
      expect((yield* api.get(`/v1/definitions/${first.id}?revision=2`, { token })).status).toBe(200)
      expect((yield* api.post("/v1/agents", { token, json: { definition: first.id } })).status).toBe(400)
      expect((yield* api.get("/v1/definitions", { token })).body).toEqual([])
    }))

  it.scoped("a private tool source address is refused before anything is written", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "definitions-ssrf")
      // This node allows private addresses (tests point providers at loopback); a scheme it never calls is refused.
      const refused = yield* api.post("/v1/definitions", {
        token,
        json: { name: "s", toolSources: [{ kind: "mcp", name: "m", url: "file:///etc/passwd" }] }
      })
      expect(refused.status).toBe(400)
      expect((yield* api.get("/v1/definitions", { token })).body).toEqual([])
    }))

  it.scoped("combining with an agent: creation rules, own settings survive a move, append kept, prompt replaced", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "definitions-combine")
      // Reasoning models, so the thinking level in force shows in what the model is sent.
      yield* api.put("/v1/providers/fake", {
        token,
        json: {
          type: "openai-completions",
          baseUrl: `${world.upstream.url}/v1`,
          models: ["m1", "m2", "m3"].map((id) => ({ id, contextWindow: 100_000, reasoning: true }))
        }
      })
      const definition = (yield* api.post("/v1/definitions", {
        token,
        json: {
          name: "writer",
          model: "fake/m1",
          systemPrompt: "Definition prompt one.",
          thinkingLevel: "low",
          fileTools: false,
          builtins: ["web_fetch"]
        }
      })).body

      // systemPrompt and builtins cannot be combined with a definition.
      for (const json of [{ systemPrompt: "mine" }, { builtins: ["web_fetch"] }]) {
        const refused = yield* api.post("/v1/agents", { token, json: { definition: definition.id, ...json } })
        expect(refused.status).toBe(400)
        expect(refused.body.error).toContain(Object.keys(json)[0])
      }

      // One agent takes everything from the definition; another sets its own thinking level and appends.
      const plain = (yield* api.post("/v1/agents", { token, json: { definition: definition.id, name: "plain" } })).body
      const own = (yield* api.post("/v1/agents", {
        token,
        json: {
          definition: definition.id,
          thinkingLevel: "high",
          systemPromptAppend: "Sign as Ada.",
          name: "own"
        }
      })).body
      const detailOf = (id: string) => Effect.map(api.get(`/v1/agents/${id}`, { token }), (response) => response.body)
      expect(yield* detailOf(plain.id)).toMatchObject({
        definition: { id: definition.id, revision: 1 },
        model: "fake/m1",
        systemPrompt: "Definition prompt one.",
        fileTools: false,
        builtins: ["web_fetch"],
        name: "plain"
      })
      expect(yield* detailOf(own.id)).toMatchObject({
        definition: { id: definition.id, revision: 1 },
        systemPromptAppend: "Sign as Ada."
      })

      // The model gets the definition's prompt with the agent's append after it.
      world.upstream.script({ text: "hello" })
      const prompted = (yield* api.post(`/v1/agents/${own.id}/prompt`, { token, json: { text: "hi" } })).body
      yield* api.get(`/v1/agents/${own.id}/requests/${prompted.id}?wait=20`, { token })
      const sent = world.upstream.requests().at(-1) as any
      expect(sent.body.messages[0]).toMatchObject({
        content: "Definition prompt one.\n\nSign as Ada."
      })

      // Configure on such an agent: a systemPrompt is taken (until the definition is re-applied); a model is
      // its own from then on; builtins are refused.
      const configured = yield* api.post(`/v1/agents/${own.id}/configure`, {
        token,
        json: { systemPrompt: "Configured prompt.", model: "fake/m2" }
      })
      expect(configured.status).toBe(200)
      expect(yield* detailOf(own.id)).toMatchObject({ systemPrompt: "Configured prompt.", model: "fake/m2" })
      const builtins = yield* api.post(`/v1/agents/${own.id}/configure`, { token, json: { builtins: [] } })
      expect(builtins.status).toBe(400)

      // Revision 2 changes everything it supplies.
      yield* api.patch(`/v1/definitions/${definition.id}`, {
        token,
        json: {
          model: "fake/m3",
          systemPrompt: "Definition prompt two.",
          thinkingLevel: "medium",
          fileTools: true,
          builtins: []
        }
      })
      // Agents stay on their revision until moved.
      expect((yield* detailOf(plain.id)).definition).toEqual({ id: definition.id, revision: 1 })

      for (const agent of [plain, own]) {
        const moved = yield* api.post(`/v1/agents/${agent.id}/definition`, { token, json: {} })
        expect(moved.status).toBe(200)
        expect(moved.body).toMatchObject({ method: "configure", state: "completed" })
      }
      expect(yield* detailOf(plain.id)).toMatchObject({
        definition: { id: definition.id, revision: 2 },
        model: "fake/m3",
        systemPrompt: "Definition prompt two.",
        builtins: []
      })
      expect((yield* detailOf(plain.id)).fileTools).toBeUndefined()
      const movedOwn = yield* detailOf(own.id)
      expect(movedOwn).toMatchObject({
        definition: { id: definition.id, revision: 2 },
        // Its own model survives; the configured system prompt is replaced; the append is kept.
        model: "fake/m2",
        systemPrompt: "Definition prompt two.",
        systemPromptAppend: "Sign as Ada.",
        builtins: []
      })

      // Its own thinking level survived too: the model is asked with it.
      world.upstream.script({ text: "thought" })
      const second = (yield* api.post(`/v1/agents/${own.id}/prompt`, { token, json: { text: "think" } })).body
      const settled = (yield* api.get(`/v1/agents/${own.id}/requests/${second.id}?wait=20`, { token })).body
      expect(settled.state).toBe("completed")
      const thinking = world.upstream.requests().at(-1) as any
      expect(thinking.body.model).toBe("m2")
      expect(thinking.body.reasoning_effort).toBe("high")

      // Back to revision 1 by number; an agent without a definition cannot be moved.
      const back = yield* api.post(`/v1/agents/${plain.id}/definition`, { token, json: { revision: 1 } })
      expect(back.status).toBe(200)
      expect(yield* detailOf(plain.id)).toMatchObject({ definition: { revision: 1 }, model: "fake/m1" })
      const stranger = yield* TestWorld.tenantWithModel(world, "definitions-stranger")
      const foreignMove = yield* stranger.api.post(`/v1/agents/${plain.id}/definition`, {
        token: stranger.token,
        json: {}
      })
      expect(foreignMove.status).toBe(404)
      const loose = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      expect((yield* api.post(`/v1/agents/${loose.id}/definition`, { token, json: {} })).status).toBe(400)
      expect((yield* api.post(`/v1/agents/${plain.id}/definition`, { token, json: { revision: 9 } })).status).toBe(400)
    }))

  it.scoped("an upsert naming the definition re-applies its latest revision; the agent's own settings stay", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "definitions-upsert")
      const definition = (yield* api.post("/v1/definitions", {
        token,
        json: { name: "bot", model: "fake/m1", systemPrompt: "One.", thinkingLevel: "low" }
      })).body
      const upsert = (json: Record<string, unknown>) =>
        Effect.map(api.put("/v1/agents/by-key/bot-1", { token, json }), (response) => response)
      const first = yield* upsert({ definition: definition.id, model: "fake/m9", systemPromptAppend: "Append." })
      expect(first.status).toBe(200)
      yield* api.patch(`/v1/definitions/${definition.id}`, {
        token,
        json: { model: "fake/m2", systemPrompt: "Two.", thinkingLevel: "high" }
      })
      const again = yield* upsert({ definition: definition.id })
      expect(again.body.id).toBe(first.body.id)
      expect((yield* api.get(`/v1/agents/${first.body.id}`, { token })).body).toMatchObject({
        definition: { id: definition.id, revision: 2 },
        model: "fake/m9",
        systemPrompt: "Two.",
        systemPromptAppend: "Append."
      })
    }))

  it.scoped("Idempotency-Key upserts by key: one definition per key and tenant, a changed body is its next revision", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "definitions-keyed")
      const upsert = (key: string, json: unknown, as = token) =>
        api.post("/v1/definitions", { token: as, json, headers: { "idempotency-key": key } })
      const key = "7f0c1b9e-3a52-4c1e-9d2b-6a1f0e8c4d21"
      const input = { name: "triage", model: "fake/m1", toolSources: [mcp("crm", "crm-secret-token-1234")] }

      const made = yield* upsert(key, input)
      expect(made.status, made.text).toBe(201)
      expect(made.body).toMatchObject({ id: expect.stringMatching(/^def_/), revision: 1, name: "triage" })
      // A retry with the same body (its secret too) is the same definition, unchanged.
      const again = yield* upsert(key, input)
      expect(again.status, again.text).toBe(200)
      expect(again.body).toEqual(made.body)
      expect((yield* api.get(`/v1/definitions/${made.body.id}?revision=2`, { token })).status).toBe(404)

      // Another body under the key: the next revision of the same definition, holding that body.
      const changed = yield* upsert(key, { name: "triage", systemPrompt: "Sort tickets.", builtins: ["web_fetch"] })
      expect(changed.status, changed.text).toBe(200)
      expect(changed.body).toMatchObject({
        id: made.body.id,
        revision: 2,
        systemPrompt: "Sort tickets.",
        builtins: ["web_fetch"],
        toolSources: []
      })
      expect(changed.body).not.toHaveProperty("model")
      expect((yield* api.get(`/v1/definitions/${made.body.id}?revision=1`, { token })).body).toEqual(made.body)
      expect((yield* api.get("/v1/definitions", { token })).body.map((d: any) => [d.id, d.revision])).toEqual([
        [made.body.id, 2]
      ])

      // Concurrent first calls under a new key make one definition.
      const raced = yield* Effect.all(Array.from({ length: 6 }, () => upsert("race-1", { name: "raced" })), {
        concurrency: "unbounded"
      })
      expect(raced.map((response) => response.status).sort()).toEqual([200, 200, 200, 200, 200, 201])
      expect(new Set(raced.map((response) => response.body.id)).size).toBe(1)
      expect(raced.every((response) => response.body.revision === 1)).toBe(true)

      // A bad key is refused before anything is written.
      for (const bad of ["", "has space", "x".repeat(81), "semi;colon"]) {
        const refused = yield* upsert(bad, { name: "bad" })
        expect(refused.status, bad).toBe(400)
        expect(refused.body).toEqual({ error: expect.stringContaining("idempotency-key"), code: "INVALID_REQUEST" })
      }
      // A keyed call with a bad body is refused the same way, and the key stays free.
      expect(
        (yield* upsert("fresh", { name: "x", toolSources: [{ kind: "mcp", name: "m", url: "file:///x" }] })).status
      )
        .toBe(400)
      expect((yield* api.get("/v1/definitions", { token })).body).toHaveLength(2)

      // Another tenant's same key is another definition; neither sees the other's.
      const other = yield* TestWorld.tenantWithModel(world, "definitions-keyed-other")
      const theirs = yield* upsert(key, input, other.token)
      expect(theirs.status, theirs.text).toBe(201)
      expect(theirs.body.id).not.toBe(made.body.id)
      expect((yield* upsert(key, input, other.token)).body.id).toBe(theirs.body.id)
      expect((yield* other.api.get("/v1/definitions", { token: other.token })).body.map((d: any) => d.id)).toEqual([
        theirs.body.id
      ])
      expect((yield* api.get(`/v1/definitions/${made.body.id}`, { token })).body.revision).toBe(2)

      // Deleting the definition frees its key: the next call makes a new one.
      expect((yield* api.delete(`/v1/definitions/${made.body.id}`, { token })).status).toBe(200)
      const remade = yield* upsert(key, input)
      expect(remade.status, remade.text).toBe(201)
      expect(remade.body.id).not.toBe(made.body.id)
    }))
})
