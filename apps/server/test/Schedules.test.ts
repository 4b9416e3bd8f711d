/**
 * Schedules over real HTTP: the API (make, list, cancel, bad input changing
 * nothing, another tenant seeing nothing); a due schedule delivered as a
 * prompt with a stable request id; a repeating schedule whose times passed
 * firing once, not once per missed period; three nodes firing each due
 * schedule exactly once; and a schedule that fell due while every node was
 * down firing once when one came back.
 */
import { FakeUpstream, Http, TestCluster, TestDatabase, TestWorld } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"

type Api = ReturnType<typeof Http.client>

/** The agent's user messages, oldest first. */
const userTexts = (api: Api, token: string, agentId: string) =>
  Effect.map(
    api.get(`/v1/agents/${agentId}/history?limit=500`, { token }),
    (response) =>
      (response.body.entries as Array<any>).filter((entry) => entry.message.role === "user").map((entry) =>
        entry.message
      )
  )

/** Polls `check` until it holds or `timeoutMs` passes. */
const waitFor = (check: () => Effect.Effect<boolean, any>, what: string, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const started = Date.now()
    while (Date.now() - started < timeoutMs) {
      if (yield* check()) return
      yield* Effect.sleep("200 millis")
    }
    return yield* Effect.die(new Error(`${what}: not within ${timeoutMs} ms`))
  })

layer(TestWorld.layer(), { excludeTestServices: true })("schedules", (it) => {
  it.scoped("the API: make, list, cancel; bad input changes nothing; another tenant sees nothing", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "schedules-api")
      const agent = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const path = `/v1/agents/${agent.id}/schedules`
      const made = yield* api.post(path, {
        token,
        json: { text: "daily report", inSeconds: 3600, everySeconds: 86400 }
      })
      expect(made.status).toBe(201)
      expect(made.body).toMatchObject({
        id: expect.stringMatching(/^sch_/),
        agent: agent.id,
        text: "daily report",
        everySeconds: 86400
      })
      expect(made.body.dueAt).toBeGreaterThan(Date.now() / 1000 + 3500)
      const at = new Date(Date.now() + 7200_000).toISOString()
      const second = (yield* api.post(path, { token, json: { text: "later", at } })).body
      expect(second.dueAt).toBeCloseTo(Date.parse(at) / 1000, 0)

      for (
        const json of [
          { text: "a", code: "return 1" },
          {},
          { text: "a", everySeconds: 30 },
          { text: "a", at: "not a time" },
          { text: "a", at: Date.now() - 3600_000 },
          { text: "a", at, inSeconds: 5 },
          { text: "a", extra: true }
        ]
      ) {
        const refused = yield* api.post(path, { token, json })
        expect(refused.status, JSON.stringify(json)).toBe(400)
        expect(refused.body.code).toBe("INVALID_REQUEST")
      }
      expect((yield* api.post("/v1/agents/client_nope/schedules", { token, json: { text: "a" } })).status).toBe(404)

      const listed = (yield* api.get(path, { token })).body
      expect(listed.map((schedule: any) => schedule.id)).toEqual([made.body.id, second.id])
      expect((yield* api.get("/v1/schedules", { token })).body).toHaveLength(2)

      const other = yield* TestWorld.tenantWithModel(world, "schedules-other")
      expect((yield* other.api.get(path, { token: other.token })).status).toBe(404)
      expect((yield* other.api.get("/v1/schedules", { token: other.token })).body).toEqual([])
      expect((yield* other.api.post(path, { token: other.token, json: { text: "x" } })).status).toBe(404)
      expect((yield* other.api.delete(`${path}/${second.id}`, { token: other.token })).status).toBe(404)

      expect((yield* api.delete(`${path}/${second.id}`, { token })).body).toEqual({ id: second.id, deleted: true })
      expect((yield* api.delete(`${path}/${second.id}`, { token })).status).toBe(404)
      expect((yield* api.get(path, { token })).body.map((schedule: any) => schedule.id)).toEqual([made.body.id])

      // Deleting the agent removes its schedules.
      yield* api.delete(`/v1/agents/${agent.id}`, { token })
      expect((yield* api.get("/v1/schedules", { token })).body).toEqual([])
      expect((yield* api.get(path, { token })).status).toBe(404)
    }))

  it.scoped("a due schedule is delivered once as a prompt; missed repeats fire once, then at the next time", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "schedules-fire")
      const agent = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const path = `/v1/agents/${agent.id}/schedules`
      const once = (yield* api.post(path, { token, json: { text: "ping once", inSeconds: 1 } })).body
      // Ten minutes of missed minutes: one delivery, not ten.
      const missed = (yield* api.post(path, {
        token,
        json: { text: "every minute", at: Date.now() - 600_000, everySeconds: 60 }
      })).body
      yield* waitFor(
        () => Effect.map(userTexts(api, token, agent.id), (texts) => texts.length >= 2),
        "both schedules delivered"
      )
      yield* Effect.sleep("3 seconds")
      const texts = yield* userTexts(api, token, agent.id)
      expect(texts.map((message: any) => message.content).sort()).toEqual(["every minute", "ping once"])
      const ping = texts.find((message: any) => message.content === "ping once")
      expect(ping.requestId).toMatch(new RegExp(`^sched_${once.id}_`))
      expect(ping.metadata).toEqual({ scheduleId: once.id })
      const record = (yield* api.get(`/v1/agents/${agent.id}/requests/${ping.requestId}?wait=20`, { token })).body
      expect(record).toMatchObject({ method: "prompt", state: "completed", metadata: { scheduleId: once.id } })

      const left = (yield* api.get(path, { token })).body
      expect(left.map((schedule: any) => schedule.id)).toEqual([missed.id])
      const now = Date.now() / 1000
      expect(left[0].dueAt).toBeGreaterThan(now)
      expect(left[0].dueAt).toBeLessThanOrEqual(now + 60)
      // Still on its own grid: a whole number of minutes after its first time.
      expect((left[0].dueAt - missed.dueAt) % 60).toBeCloseTo(0, 3)
    }))
})

it.scopedLive(
  "three nodes: each due schedule fires exactly once; one due while all were down fires once on restart",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({ size: 3, databaseUrl, env: { ALLOW_PRIVATE_URLS: "true" } })
      const { api, token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "sched3")
      const agents = yield* Effect.forEach(
        [1, 2, 3],
        () => Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1" } }), (response) => response.body)
      )
      // Made through different nodes; all due within the same second.
      for (const [i, agent] of agents.entries()) {
        const node = Http.client(cluster.members[i]!.node.rest)
        for (const n of [1, 2, 3]) {
          const made = yield* node.post(`/v1/agents/${agent.id}/schedules`, {
            token,
            json: { text: `job ${n}`, inSeconds: 2 }
          })
          expect(made.status).toBe(201)
        }
      }
      for (const agent of agents) {
        yield* waitFor(
          () => Effect.map(userTexts(api, token, agent.id), (texts) => texts.length >= 3),
          `three schedules delivered to ${agent.id}`
        )
      }
      yield* Effect.sleep("3 seconds")
      for (const agent of agents) {
        const texts = (yield* userTexts(api, token, agent.id)).map((message: any) => message.content).sort()
        expect(texts).toEqual(["job 1", "job 2", "job 3"])
      }
      expect((yield* api.get("/v1/schedules", { token })).body).toEqual([])

      // Every node down while a schedule falls due; it fires once when a node comes back.
      const agent = agents[0]!
      yield* api.post(`/v1/agents/${agent.id}/schedules`, { token, json: { text: "while down", inSeconds: 2 } })
      yield* Effect.forEach([0, 1, 2], (index) => cluster.stop(index), { concurrency: "unbounded", discard: true })
      yield* Effect.sleep("4 seconds")
      const back = yield* cluster.start(1)
      const backApi = Http.client(back.rest)
      yield* waitFor(
        () => Effect.map(userTexts(backApi, token, agent.id), (texts) => texts.length >= 4),
        "the schedule due while all were down delivered"
      )
      yield* Effect.sleep("3 seconds")
      const texts = (yield* userTexts(backApi, token, agent.id)).map((message: any) => message.content)
      expect(texts.filter((text: string) => text === "while down")).toHaveLength(1)
      expect(texts).toHaveLength(4)
    }),
  { timeout: 120_000 }
)
