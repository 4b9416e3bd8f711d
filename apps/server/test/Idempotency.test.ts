/**
 * Request ids, Idempotency-Keys and upserts over real HTTP, on a real node on
 * the embedded PostgreSQL: a reused id or key with a body that differs
 * anywhere, also deep inside it, is a conflict; a true retry does nothing
 * twice; an upsert always leaves the agent with the settings it names.
 */
import type { Http } from "@agent-runtime/testing"
import { TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

const WorldLive = TestWorld.layer()

const tenantWithModel = TestWorld.tenantWithModel

const settle = (api: ReturnType<typeof Http.client>, token: string, agentId: string, requestId: string) =>
  Effect.map(
    api.get(`/v1/agents/${agentId}/requests/${requestId}?wait=20`, { token }),
    (response) => response.body
  )

layer(WorldLive, { excludeTestServices: true })("idempotency", (it) => {
  it.effect("a prompt requestId reused with a nested change in metadata, from or spendLimit is a conflict", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "nested-prompt")
      const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
      const prompt = (json: Record<string, unknown>) => api.post(`/v1/agents/${agentId}/prompt`, { token, json })

      const cases: ReadonlyArray<readonly [string, Record<string, unknown>, Record<string, unknown>]> = [
        ["p-metadata", { metadata: { ticket: "T-1" } }, { metadata: { ticket: "T-2" } }],
        ["p-from", { from: { id: "u-1", name: "Ann" } }, { from: { id: "u-1", name: "Bob" } }],
        ["p-spend", { spendLimit: { usd: 1 } }, { spendLimit: { usd: 2 } }]
      ]
      // Every case's answer is collected before asserting, so a failure shows them all.
      const reused: Array<unknown> = []
      for (const [requestId, first, changed] of cases) {
        const accepted = yield* prompt({ text: "hi", requestId, ...first })
        expect(accepted.status, requestId).toBe(202)
        yield* settle(api, token, agentId, requestId)
        const answer = yield* prompt({ text: "hi", requestId, ...changed })
        reused.push([requestId, answer.status, answer.body.code])
        // The same body again is a retry: the same request, not a conflict.
        const retried = yield* prompt({ text: "hi", requestId, ...first })
        expect(retried.status, requestId).toBe(202)
        expect(retried.body).toMatchObject({ id: requestId, fingerprint: accepted.body.fingerprint })
      }
      expect(reused).toEqual(cases.map(([requestId]) => [requestId, 409, "IDEMPOTENCY_CONFLICT"]))

      // Key order is not content: the same metadata written the other way round is a retry.
      const ordered = yield* prompt({ text: "hi", requestId: "p-order", metadata: { a: "1", b: "2" } })
      const reordered = yield* prompt({ requestId: "p-order", metadata: { b: "2", a: "1" }, text: "hi" })
      expect(reordered.status).toBe(202)
      expect(reordered.body.fingerprint).toBe(ordered.body.fingerprint)
      yield* settle(api, token, agentId, "p-order")
      // Each accepted request ran once: four user messages, four replies.
      expect((yield* api.get(`/v1/agents/${agentId}/history`, { token })).body.total).toBe(8)
    }))

  it.effect("an Idempotency-Key reused with another body reconfigures the agent; creation-only fields are refused", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "nested-key")
      const create = (key: string, json: Record<string, unknown>) =>
        api.post("/v1/agents", { token, json: { model: "fake/m1", ...json }, headers: { "idempotency-key": key } })
      const detail = (id: string) => Effect.map(api.get(`/v1/agents/${id}`, { token }), (response) => response.body)

      // A nested change applies, under the same agent; each body again is a retry of it.
      const made = yield* create("k-headers", { modelHeaders: { "x-team": "alpha" } })
      expect(made.status).toBe(201)
      const changed = yield* create("k-headers", { modelHeaders: { "x-team": "beta" } })
      expect(changed.body).toMatchObject({ id: made.body.id, reconfigured: { id: expect.any(String) } })
      expect((yield* detail(made.body.id)).modelHeaders).toEqual({ "x-team": "beta" })
      expect((yield* create("k-headers", { modelHeaders: { "x-team": "beta" } })).body).not.toHaveProperty(
        "reconfigured"
      )

      // The starting history is only for a new agent: another one is refused and changes nothing.
      const seeded = yield* create("k-messages", { initialMessages: [{ role: "user", content: "first" }] })
      const refused = yield* create("k-messages", { initialMessages: [{ role: "user", content: "second" }] })
      expect([refused.status, refused.body.code]).toEqual([400, "INVALID_REQUEST"])
      expect((yield* create("k-messages", { initialMessages: [{ role: "user", content: "first" }] })).body.id).toBe(
        seeded.body.id
      )

      // Another first prompt is new work, sent once however often its body is retried.
      world.upstream.script({ text: "one" })
      const prompted = yield* create("k-prompt", { prompt: { text: "hi", metadata: { ticket: "T-1" } } })
      yield* settle(api, token, prompted.body.id, prompted.body.prompt.id)
      world.upstream.script({ text: "two" })
      const second = yield* create("k-prompt", { prompt: { text: "hi", metadata: { ticket: "T-2" } } })
      expect(second.body.id).toBe(prompted.body.id)
      expect(second.body.prompt.id).not.toBe(prompted.body.prompt.id)
      yield* settle(api, token, prompted.body.id, second.body.prompt.id)
      const retried = yield* create("k-prompt", { prompt: { text: "hi", metadata: { ticket: "T-2" } } })
      expect(retried.body.prompt).toMatchObject({ id: second.body.prompt.id, state: "completed" })
      expect((yield* api.get(`/v1/agents/${prompted.body.id}/history`, { token })).body.total).toBe(4)
    }))

  it.effect("upserts A, B, A, B leave the agent on B; A, B, A on A", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "upsert-aba")
      const seen: Array<unknown> = []
      let agentId: string | undefined
      for (const team of ["alpha", "beta", "alpha", "beta"]) {
        const upserted = yield* api.put("/v1/agents/by-key/flip-flop", {
          token,
          json: { model: "fake/m1", modelHeaders: { "x-team": team } }
        })
        expect(upserted.status).toBeLessThan(300)
        agentId ??= upserted.body.id as string
        expect(upserted.body.id).toBe(agentId)
        seen.push((yield* api.get(`/v1/agents/${agentId}`, { token })).body.modelHeaders)
      }
      expect(seen).toEqual([{ "x-team": "alpha" }, { "x-team": "beta" }, { "x-team": "alpha" }, { "x-team": "beta" }])

      // The settings reach the model too.
      const prompt = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "hi" } })).body
      yield* settle(api, token, agentId!, prompt.id)
      const sent = world.upstream.requests().filter((request) => request.protocol === "openai-chat").at(-1)!
      expect(sent.headers["x-team"]).toBe("beta")
    }))

  it.effect("a retried upsert makes one agent, sends one first prompt and changes nothing the second time", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "upsert-retry")
      const modelCalls = () => world.upstream.requests().filter((request) => request.protocol === "openai-chat").length
      const callsBefore = modelCalls()
      const body = {
        model: "fake/m1",
        systemPrompt: "Be brief.",
        modelHeaders: { "x-team": "alpha" },
        prompt: { text: "once only", requestId: "u-1", metadata: { ticket: "T-1" } }
      }
      const upsert = (json: unknown) => api.put("/v1/agents/by-key/retried", { token, json })
      const first = (yield* upsert(body)).body
      yield* settle(api, token, first.id, "u-1")
      const detailBefore = (yield* api.get(`/v1/agents/${first.id}`, { token })).body

      const again = (yield* upsert(body)).body
      expect(again).toMatchObject({ id: first.id, token: first.token, prompt: { id: "u-1", state: "completed" } })
      const detailAfter = (yield* api.get(`/v1/agents/${first.id}`, { token })).body
      // Nothing was recorded or published: the same requests, the same event cursor.
      expect(detailAfter.requests.map((request: any) => request.id)).toEqual(
        detailBefore.requests.map((request: any) => request.id)
      )
      expect(detailAfter.cursor).toBe(detailBefore.cursor)
      expect(detailAfter).toMatchObject({ systemPrompt: "Be brief.", modelHeaders: { "x-team": "alpha" } })
      expect((yield* api.get(`/v1/agents/${first.id}/history`, { token })).body.total).toBe(2)
      expect(modelCalls() - callsBefore).toBe(1)

      // A change is applied once; its retry records nothing more.
      const changed = { ...body, modelHeaders: { "x-team": "beta" }, prompt: undefined }
      yield* upsert(changed)
      const configured = (yield* api.get(`/v1/agents/${first.id}`, { token })).body
      expect(configured.modelHeaders).toEqual({ "x-team": "beta" })
      expect(configured.requests.filter((request: any) => request.method === "configure")).toHaveLength(1)
      yield* upsert(changed)
      const retried = (yield* api.get(`/v1/agents/${first.id}`, { token })).body
      expect(retried.requests.map((request: any) => request.id))
        .toEqual(configured.requests.map((request: any) => request.id))
      expect(retried.cursor).toBe(configured.cursor)
    }))

  it.effect("a configure requestId reused with another body is a conflict on both routes and changes nothing", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "configure-reuse")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", systemPrompt: "One." } })).body
      const agentId = created.id as string
      const configure = (json: Record<string, unknown>) => api.post(`/v1/agents/${agentId}/configure`, { token, json })
      const fromAgent = (json: Record<string, unknown>) =>
        api.post(`/clients/${agentId}/requests`, { token: created.token, json })
      const detail = () => Effect.map(api.get(`/v1/agents/${agentId}`, { token }), (response) => response.body)

      const first = yield* configure({ requestId: "cfg-1", systemPrompt: "Two." })
      expect(first.status, first.text).toBe(200)
      const viaAgent = yield* fromAgent({ method: "configure", requestId: "cfg-2", systemPromptAppend: "In French." })
      expect(viaAgent.status, viaAgent.text).toBe(200)
      // The same body again is a retry, on either route: the same record.
      const retries = [
        yield* configure({ systemPrompt: "Two.", requestId: "cfg-1" }),
        yield* fromAgent({ method: "configure", requestId: "cfg-1", systemPrompt: "Two." }),
        yield* configure({ requestId: "cfg-2", systemPromptAppend: "In French." })
      ]
      expect(retries.map((retry) => [retry.status, retry.body.id, retry.body.fingerprint])).toEqual([
        [200, "cfg-1", first.body.fingerprint],
        [200, "cfg-1", first.body.fingerprint],
        [200, "cfg-2", viaAgent.body.fingerprint]
      ])

      // Another body, on either route, is a conflict; so is a configure or abort under another request's id.
      const prompted = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "hi", requestId: "p-1" }
      })
      yield* settle(api, token, agentId, prompted.body.id)
      const before = yield* detail()
      const reused = [
        yield* configure({ requestId: "cfg-1", systemPrompt: "Three." }),
        yield* configure({ requestId: "cfg-1", systemPrompt: "Two.", modelHeaders: { "x-team": "red" } }),
        yield* fromAgent({ method: "configure", requestId: "cfg-1", systemPrompt: "Three." }),
        yield* fromAgent({ method: "configure", requestId: "cfg-2", systemPromptAppend: "In German." }),
        yield* configure({ requestId: "cfg-2", systemPromptAppend: "In German." }),
        yield* configure({ requestId: "p-1", systemPrompt: "Four." }),
        yield* fromAgent({ method: "configure", requestId: "p-1", systemPrompt: "Four." }),
        yield* api.post(`/v1/agents/${agentId}/abort`, { token, json: { requestId: "cfg-1" } }),
        yield* fromAgent({ method: "abort", requestId: "p-1" })
      ]
      expect(reused.map((answer) => [answer.status, answer.body.code])).toEqual(
        reused.map(() => [409, "IDEMPOTENCY_CONFLICT"])
      )
      const after = yield* detail()
      expect(after).toMatchObject({ systemPrompt: "Two.", systemPromptAppend: "In French.", modelHeaders: null })
      expect(after.requests.map((request: any) => request.id)).toEqual(
        before.requests.map((request: any) => request.id)
      )
      expect(after.cursor).toBe(before.cursor)

      // A new budget's retry a second later is still a retry: the body is compared, not when the budget began.
      const budget = yield* configure({ requestId: "cfg-spend", spendLimit: { usd: 3 } })
      yield* Effect.sleep("1100 millis")
      const budgetAgain = yield* configure({ requestId: "cfg-spend", spendLimit: { usd: 3 } })
      expect([budgetAgain.status, budgetAgain.body.fingerprint]).toEqual([200, budget.body.fingerprint])

      // A continue and a prompt without text digest alike; the method tells them apart.
      const continued = yield* api.post(`/v1/agents/${agentId}/continue`, { token, json: { requestId: "c-1" } })
      expect(continued.status, continued.text).toBe(202)
      yield* settle(api, token, agentId, "c-1")
      const asPrompt = [
        yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "", requestId: "c-1" } }),
        yield* fromAgent({ method: "prompt", text: "", requestId: "c-1" })
      ]
      expect(asPrompt.map((answer) => [answer.status, answer.body.code])).toEqual([
        [409, "IDEMPOTENCY_CONFLICT"],
        [409, "IDEMPOTENCY_CONFLICT"]
      ])
    }))

  it.effect("an upsert applies name, type, ttlSeconds, spendLimit and mounts; a retry records nothing", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "upsert-fields")
      const volume = (yield* api.post("/v1/volumes", { token, json: { name: "kb" } })).body.id as string
      // Made by POST with an Idempotency-Key: the upserts by that key find it.
      const original = { model: "fake/m1", name: "one", type: "a" }
      const made = yield* api.post("/v1/agents", { token, json: original, headers: { "idempotency-key": "fields" } })
      expect(made.status, made.text).toBe(201)
      const agentId = made.body.id as string
      const detail = () => Effect.map(api.get(`/v1/agents/${agentId}`, { token }), (response) => response.body)
      const upsert = (json: Record<string, unknown>) =>
        api.put("/v1/agents/by-key/fields", { token, json: { model: "fake/m1", ...json } })

      const mounts = [{ volumeId: volume, path: "/kb", mode: "ro" }]
      const settings = { name: "two", type: "b", ttlSeconds: 3600, spendLimit: { usd: 2 }, mounts }
      const now = Math.floor(Date.now() / 1000)
      const changed = yield* upsert(settings)
      expect(changed.status, changed.text).toBeLessThan(300)
      expect(changed.body.id).toBe(agentId)
      expect(changed.body.expiresAt).toBeGreaterThanOrEqual(now + 3600 - 1)
      expect(changed.body.expiresAt).toBeLessThanOrEqual(now + 3600 + 30)
      const applied = yield* detail()
      expect(applied).toMatchObject({
        name: "two",
        type: "b",
        expiresAt: changed.body.expiresAt,
        spendLimit: { usd: 2, spent: 0 },
        mounts
      })
      const listed = (yield* api.get("/v1/agents", { token })).body.find((agent: any) => agent.id === agentId)
      expect(listed).toMatchObject({ name: "two", type: "b", expiresAt: changed.body.expiresAt })

      // The same settings again: no configure is recorded (the budget keeps counting from when it was set).
      yield* upsert(settings)
      const retried = yield* detail()
      expect(retried.requests.map((request: any) => request.id)).toEqual(
        applied.requests.map((request: any) => request.id)
      )
      expect(retried.cursor).toBe(applied.cursor)

      // Left out: the name goes back to the id, no type, no expiry, no budget; the mounts stay.
      const bare = yield* upsert({})
      expect(bare.body.expiresAt).toBeNull()
      expect(yield* detail()).toMatchObject({ name: agentId, type: "agent", expiresAt: null, spendLimit: null, mounts })

      // A prompt under a request id another prompt used is refused before any setting is applied.
      expect((yield* upsert({ prompt: { text: "first", requestId: "up-1" } })).status).toBeLessThan(300)
      yield* settle(api, token, agentId, "up-1")
      const conflicting = yield* upsert({ name: "renamed", prompt: { text: "second", requestId: "up-1" } })
      expect([conflicting.status, conflicting.body.code]).toEqual([409, "IDEMPOTENCY_CONFLICT"])
      expect((yield* detail()).name).toBe(agentId)

      // POST with the key is the same upsert: the first body again is the same agent set back to it, another
      // body changes it again, and a retry of that body changes nothing more.
      const again = yield* api.post("/v1/agents", { token, json: original, headers: { "idempotency-key": "fields" } })
      expect([again.status, again.body.id]).toEqual([201, agentId])
      const other = yield* api.post("/v1/agents", {
        token,
        json: { ...original, name: "three" },
        headers: { "idempotency-key": "fields" }
      })
      expect([other.status, other.body.id]).toEqual([201, agentId])
      expect((yield* detail()).name).toBe("three")
      const otherAgain = yield* api.post("/v1/agents", {
        token,
        json: { ...original, name: "three" },
        headers: { "idempotency-key": "fields" }
      })
      expect(otherAgain.body).not.toHaveProperty("reconfigured")
    }))

  it.effect("an upsert refuses a subject, context or initialMessages other than the agent's, changing nothing", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "upsert-creation-only")
      const body = {
        model: "fake/m1",
        name: "first",
        subject: "user-1",
        context: { team: "blue", level: 2 },
        initialMessages: [{ role: "user", content: "hello" }, { role: "user", content: "again", timestamp: 5 }]
      }
      const upsert = (json: Record<string, unknown>) => api.put("/v1/agents/by-key/creation-only", { token, json })
      const agentId = (yield* upsert(body)).body.id as string
      const detail = () => Effect.map(api.get(`/v1/agents/${agentId}`, { token }), (response) => response.body)
      const before = yield* detail()

      const cases: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
        ["subject", { subject: "user-2" }],
        ["context", { context: { team: "red", level: 2 } }],
        ["initialMessages", { initialMessages: [{ role: "user", content: "other" }] }],
        ["initialMessages", { initialMessages: body.initialMessages.slice(0, 1) }],
        ["initialMessages", { initialMessages: [] }]
      ]
      const answers: Array<unknown> = []
      for (const [field, change] of cases) {
        const refused = yield* upsert({ ...body, name: "second", systemPrompt: "Changed.", ttlSeconds: 600, ...change })
        answers.push([field, refused.status, refused.body.code, String(refused.body.error).includes(field)])
      }
      expect(answers).toEqual(cases.map(([field]) => [field, 400, "INVALID_REQUEST", true]))
      const after = yield* detail()
      expect(after).toMatchObject({ name: "first", systemPrompt: "", expiresAt: null })
      expect(after.requests).toEqual(before.requests)
      expect((yield* api.get(`/v1/agents/${agentId}/history`, { token })).body.total).toBe(2)

      // The same values are accepted (key order aside), and the rest applied; left out, they say nothing.
      const same = yield* upsert({ ...body, name: "second", context: { level: 2, team: "blue" } })
      expect(same.status, same.text).toBeLessThan(300)
      expect((yield* detail()).name).toBe("second")
      const without = yield* upsert({ model: "fake/m1", name: "third" })
      expect(without.status, without.text).toBeLessThan(300)
      expect((yield* detail()).name).toBe("third")
    }))
})
