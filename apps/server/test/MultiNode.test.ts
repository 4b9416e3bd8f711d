/**
 * Nodes started together against one DATABASE_URL share tenants and keys,
 * and never print a secret.
 */
import { FakeUpstream, Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

it.scoped("two processes on one database serve the same tenants", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const operatorToken = `aro_${"k".repeat(43)}`
    // Both start on an empty database at once: migrations must not collide.
    const [one, two] = yield* Effect.all([
      TestNode.start({ databaseUrl, operatorToken }),
      TestNode.start({ databaseUrl, operatorToken })
    ], { concurrency: 2 })
    const api1 = Http.client(one.rest)
    const api2 = Http.client(two.rest)

    const tenant = (yield* api1.post("/v1/admin/tenants", { token: operatorToken, json: { name: "acme" } })).body
    expect((yield* api2.get("/v1/me", { token: tenant.token })).body.tenant).toBe(tenant.id)
    const listed = (yield* api2.get("/v1/admin/tenants", { token: operatorToken })).body.data
    expect(listed.map((t: { id: string }) => t.id)).toEqual([tenant.id])

    const extra = (yield* api2.post("/v1/tokens", { token: tenant.token, json: { name: "ci" } })).body
    expect((yield* api1.get("/v1/me", { token: extra.token })).status).toBe(200)
    yield* api2.delete(`/v1/tokens/${extra.id}`, { token: tenant.token })
    // Revocation holds on the other node at once: no cache stands in the way.
    expect((yield* api1.get("/v1/me", { token: extra.token })).status).toBe(401)

    // Secrets appear in no output of either process.
    const output = one.output() + two.output()
    expect(output).toContain("Sent HTTP response")
    for (const secret of [operatorToken, tenant.token, extra.token]) expect(output).not.toContain(secret)
  }), { timeout: 60_000 })

it.scoped("a restarted node finds its data and migrates nothing again", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const first = yield* TestNode.start({ databaseUrl })
    const tenant = (yield* Http.client(first.rest).post("/v1/admin/tenants", {
      token: first.operatorToken,
      json: { name: "acme" }
    })).body
    expect(first.output()).toContain("message=migrated")
    yield* first.stop()
    const second = yield* TestNode.start({ databaseUrl })
    expect(second.output()).not.toContain("message=migrated")
    expect((yield* Http.client(second.rest).get("/v1/me", { token: tenant.token })).body.tenant).toBe(tenant.id)
  }), { timeout: 60_000 })

/**
 * Two nodes started together on one fresh database, a tenant, and `count`
 * agents on the fake upstream: enough that both nodes own some.
 */
const twoNodesWithAgents = (count: number) =>
  Effect.gen(function*() {
    const upstream = yield* FakeUpstream.start()
    const databaseUrl = yield* TestDatabase.make
    const operatorToken = `aro_${"c".repeat(43)}`
    const env = { ALLOW_PRIVATE_URLS: "true" }
    const [one, two] = yield* Effect.all([
      TestNode.start({ databaseUrl, operatorToken, env }),
      TestNode.start({ databaseUrl, operatorToken, env })
    ], { concurrency: 2 })
    const api1 = Http.client(one.rest)
    const api2 = Http.client(two.rest)
    const tenant = (yield* api1.post("/v1/admin/tenants", { token: operatorToken, json: { name: "cluster" } })).body
    const token = tenant.token as string
    yield* api1.put("/v1/providers/fake", {
      token,
      json: { type: "openai-completions", baseUrl: `${upstream.url}/v1`, models: [{ id: "m1", contextWindow: 10000 }] }
    })
    const agents = yield* Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      () => Effect.map(api1.post("/v1/agents", { token, json: { model: "fake/m1" } }), (response) => response.body.id as string)
    )
    return { upstream, one, two, api1, api2, token, agents }
  })

it.scopedLive("agents answer on any node: work goes to the owner, events stream from any node", () =>
  Effect.gen(function*() {
    const { agents, api1, api2, token, two } = yield* twoNodesWithAgents(8)
    const watched = yield* Http.sse(two.rest, `/v1/agents/${agents[0]}/events`, { token })
    yield* watched.take((frame) => frame.event === "ready")
    const requests = yield* Effect.forEach(agents, (id, i) =>
      Effect.map(
        (i % 2 === 0 ? api2 : api1).post(`/v1/agents/${id}/prompt`, { token, json: { text: `hello ${i}` } }),
        (response) => ({ id, requestId: response.body.id as string })
      ))
    for (const { id, requestId } of requests) {
      const done = (yield* api1.get(`/v1/agents/${id}/requests/${requestId}?wait=20`, { token })).body
      expect(done.state).toBe("completed")
      expect(done.outcome.result.reply).toBe("ok")
    }
    const frames = yield* watched.take((frame) => frame.data?.includes('"type":"response"') ?? false)
    expect(frames.some((frame) => frame.data?.includes('"type":"response"'))).toBe(true)
    const state = (yield* api2.get(`/v1/agents/${agents[1]}/state`, { token })).body
    expect(state.requests[0].state).toBe("completed")
  }), { timeout: 90_000 })

it.scopedLive("when a node stops mid-turn, its agents' accepted prompts finish on the other node", () =>
  Effect.gen(function*() {
    const { agents, api2, one, token, upstream } = yield* twoNodesWithAgents(6)
    // Slow answers, so turns are running when the first node stops.
    for (let i = 0; i < 12; i++) upstream.script({ text: "one two three four five six seven eight", tokenDelayMs: 150 })
    const requests = yield* Effect.forEach(agents, (id) =>
      Effect.map(api2.post(`/v1/agents/${id}/prompt`, { token, json: { text: "go" } }), (response) => ({
        id,
        requestId: response.body.id as string
      })))
    yield* Effect.sleep("400 millis")
    yield* one.stop("SIGTERM")
    for (const { id, requestId } of requests) {
      const done = (yield* api2.get(`/v1/agents/${id}/requests/${requestId}?wait=25`, { token })).body
      expect(done.state, id).toBe("completed")
      expect(done.outcome.result.reply).toBe("one two three four five six seven eight")
    }
  }), { timeout: 120_000 })
