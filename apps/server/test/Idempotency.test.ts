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

  it.effect("an Idempotency-Key reused with a nested change in modelHeaders, initialMessages or the prompt is a conflict", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithModel(world, "nested-key")
      const create = (key: string, json: Record<string, unknown>) =>
        api.post("/v1/agents", { token, json: { model: "fake/m1", ...json }, headers: { "idempotency-key": key } })

      const cases: ReadonlyArray<readonly [string, Record<string, unknown>, Record<string, unknown>]> = [
        ["k-headers", { modelHeaders: { "x-team": "alpha" } }, { modelHeaders: { "x-team": "beta" } }],
        [
          "k-messages",
          { initialMessages: [{ role: "user", content: "first" }] },
          { initialMessages: [{ role: "user", content: "second" }] }
        ],
        ["k-prompt", { prompt: { text: "hi", metadata: { ticket: "T-1" } } }, {
          prompt: { text: "hi", metadata: { ticket: "T-2" } }
        }]
      ]
      const reused: Array<unknown> = []
      for (const [key, first, changed] of cases) {
        const made = yield* create(key, first)
        expect(made.status, key).toBe(201)
        const answer = yield* create(key, changed)
        reused.push([key, answer.status, answer.body.code])
        const retried = yield* create(key, first)
        expect(retried.body.id, key).toBe(made.body.id)
      }
      expect(reused).toEqual(cases.map(([key]) => [key, 409, "IDEMPOTENCY_CONFLICT"]))
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
})
