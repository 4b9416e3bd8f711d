/**
 * Webhooks over real HTTP, as a tenant's receiver sees them: every delivery
 * is checked with the `standardwebhooks` library against the endpoint's
 * secret, and every payload is decoded with the spec's schemas, no field
 * more. Endpoints and the usage webhook are managed through the API; the
 * receiver goes down, answers slowly, with 500s and with redirects.
 */
import { Webhook } from "@agent-runtime/domain"
import { FakeUpstream, Http, TestCluster, TestDatabase, TestWorld, WebhookReceiver } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"

type Api = ReturnType<typeof Http.client>

const decodeEvent = Schema.decodeUnknownSync(Webhook.WebhookEvent, { onExcessProperty: "error" })
const decodeReport = Schema.decodeUnknownSync(Webhook.UsageReport, { onExcessProperty: "error" })

const runTypes = ["run.started", "run.completed", "run.failed", "input.requested", "input.resolved", "usage.recorded"]

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    world.upstream.reset()
    const { api, tenantId, token } = yield* TestWorld.tenantWithModel(world, name)
    const receiver = yield* WebhookReceiver.start
    /** An endpoint at `path` of the receiver, its secret trusted there. */
    const endpoint = (path: string, events: ReadonlyArray<string> = runTypes) =>
      Effect.map(api.post("/v1/webhooks", { token, json: { url: `${receiver.url}${path}`, events } }), (made) => {
        expect(made.status, made.text).toBe(201)
        receiver.trust(path, [made.body.secret])
        return made.body as { id: string; secret: string }
      })
    const agent = (json: Record<string, unknown> = {}) =>
      Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1", ...json } }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body as { id: string }
      })
    return { world, api, token, tenantId, receiver, endpoint, agent }
  })

/** Every delivery verified with the endpoint's secret; the events, deduplicated by id, in `created` order. */
const verifiedEvents = (deliveries: ReadonlyArray<WebhookReceiver.Delivery>) => {
  for (const delivery of deliveries) {
    expect(delivery.verifiedWith.length, delivery.body).toBeGreaterThan(0)
    expect(delivery.headers.id).toBe(delivery.event.id)
  }
  const byId = new Map(deliveries.map((delivery) => [delivery.event.id, delivery.event]))
  return [...byId.values()].sort((a, b) => a.created - b.created)
}

const typesOf = (events: ReadonlyArray<{ readonly type: string }>) => events.map((event) => event.type)

const attempts = (api: Api, token: string, webhookId: string) =>
  Effect.map(api.get(`/v1/webhooks/${webhookId}/attempts`, { token }), (response) => {
    expect(response.status, response.text).toBe(200)
    return response.body as Array<Webhook.WebhookAttempt>
  })

layer(TestWorld.layer(), { excludeTestServices: true })("webhooks", (it) => {
  it.scoped("endpoints: create shows the secret once; list, read, change, rotate, remove; bad input changes nothing", () =>
    Effect.gen(function*() {
      const { api, receiver, token } = yield* setup("hooks-crud")
      const made = yield* api.post("/v1/webhooks", {
        token,
        json: { url: `${receiver.url}/a`, events: ["run.completed", "billing.balance.low"], description: "ops" }
      })
      expect(made.status, made.text).toBe(201)
      expect(made.body.id).toMatch(/^we_/)
      expect(made.body.secret).toMatch(/^whsec_/)
      expect(made.body).toMatchObject({ events: ["run.completed", "billing.balance.low"], description: "ops" })
      const read = yield* api.get(`/v1/webhooks/${made.body.id}`, { token })
      expect(read.status).toBe(200)
      expect(read.body).not.toHaveProperty("secret")
      expect(read.text).not.toContain(made.body.secret.slice(6))
      const listed = yield* api.get("/v1/webhooks", { token })
      expect(listed.body.map((endpoint: any) => endpoint.id)).toEqual([made.body.id])
      expect(listed.text).not.toContain(made.body.secret.slice(6))

      const changed = yield* api.patch(`/v1/webhooks/${made.body.id}`, { token, json: { events: ["run.failed"] } })
      expect(changed.status, changed.text).toBe(200)
      expect(changed.body).toMatchObject({ url: `${receiver.url}/a`, events: ["run.failed"], description: "ops" })
      const rotated = yield* api.post(`/v1/webhooks/${made.body.id}/secret`, { token })
      expect(rotated.status).toBe(200)
      expect(rotated.body.secret).toMatch(/^whsec_/)
      expect(rotated.body.secret).not.toBe(made.body.secret)

      // Refused before anything is written.
      const bad: ReadonlyArray<Record<string, unknown>> = [
        { url: `${receiver.url}/b`, events: ["run.exploded"] },
        { url: `${receiver.url}/b` },
        { url: "not a url", events: ["run.started"] },
        { url: "ftp://example.com/hook", events: ["run.started"] },
        { url: `${receiver.url}/b`, events: ["run.started"], description: "x".repeat(501) },
        { url: `${receiver.url}/b`, events: ["run.started"], secret: "whsec_mine" }
      ]
      for (const json of bad) {
        const refused = yield* api.post("/v1/webhooks", { token, json })
        expect(refused.status, JSON.stringify(json)).toBe(400)
        expect(refused.body.code).toBe("INVALID_REQUEST")
      }
      const badPatch = yield* api.patch(`/v1/webhooks/${made.body.id}`, { token, json: { events: ["nope"] } })
      expect(badPatch.status).toBe(400)
      expect((yield* api.get("/v1/webhooks", { token })).body).toHaveLength(1)
      expect((yield* api.get(`/v1/webhooks/${made.body.id}`, { token })).body.events).toEqual(["run.failed"])

      // At most 16.
      for (let index = 1; index < 16; index++) {
        const more = yield* api.post("/v1/webhooks", { token, json: { url: `${receiver.url}/n${index}`, events: [] } })
        expect(more.status).toBe(201)
      }
      const over = yield* api.post("/v1/webhooks", { token, json: { url: `${receiver.url}/17`, events: [] } })
      expect(over.status).toBe(409)
      expect(over.body.code).toBe("CONFLICT")
      expect((yield* api.get("/v1/webhooks", { token })).body).toHaveLength(16)

      const removed = yield* api.delete(`/v1/webhooks/${made.body.id}`, { token })
      expect(removed.body).toEqual({ id: made.body.id, deleted: true })
      expect((yield* api.get(`/v1/webhooks/${made.body.id}`, { token })).status).toBe(404)
      expect((yield* api.delete(`/v1/webhooks/${made.body.id}`, { token })).status).toBe(404)
    }))

  it.scoped("another tenant's endpoints are not found on any route", () =>
    Effect.gen(function*() {
      const { api, endpoint, receiver, token, world } = yield* setup("hooks-owner")
      const { id } = yield* endpoint("/owner")
      const other = (yield* TestWorld.tenantWithModel(world, "hooks-other")).token
      const usage = yield* api.put("/v1/usage-webhook", { token, json: { url: `${receiver.url}/usage` } })
      expect(usage.status).toBe(200)
      const routes = [
        api.get(`/v1/webhooks/${id}`, { token: other }),
        api.patch(`/v1/webhooks/${id}`, { token: other, json: { events: [] } }),
        api.delete(`/v1/webhooks/${id}`, { token: other }),
        api.post(`/v1/webhooks/${id}/secret`, { token: other }),
        api.get(`/v1/webhooks/${id}/attempts`, { token: other }),
        api.get(`/v1/webhooks/${id}/deliveries`, { token: other }),
        api.post(`/v1/webhooks/${id}/deliveries/evt_x/resend`, { token: other }),
        api.get(`/v1/webhooks/${usage.body.id}/attempts`, { token: other }),
        api.get("/v1/usage-webhook", { token: other }),
        api.delete("/v1/usage-webhook", { token: other }),
        api.post("/v1/usage-webhook/secret", { token: other })
      ]
      for (const route of routes) expect((yield* route).status).toBe(404)
      expect((yield* api.get("/v1/webhooks", { token: other })).body).toEqual([])
      expect((yield* api.get(`/v1/webhooks/${id}`, { token })).status).toBe(200)
      expect((yield* api.get("/v1/usage-webhook", { token })).body.url).toBe(`${receiver.url}/usage`)
    }))

  it.scoped("a prompt: run.started, usage.recorded and run.completed, signed, with exactly the spec's fields", () =>
    Effect.gen(function*() {
      const { agent, api, endpoint, receiver, token, world } = yield* setup("hooks-prompt")
      yield* endpoint("/all")
      yield* endpoint("/ends", ["run.completed"])
      const usageHook = yield* api.put("/v1/usage-webhook", { token, json: { url: `${receiver.url}/usage` } })
      expect(usageHook.status, usageHook.text).toBe(200)
      receiver.trust("/usage", [usageHook.body.secret])
      const { id } = yield* agent({ subject: "user-7", context: { plan: "pro" } })
      world.upstream.script({ text: "Hello there." })
      const settled = yield* Http.prompted(api, token, id, {
        text: "hi",
        from: { id: "u1", name: "Ada" },
        metadata: { ticket: "T-1" }
      })
      expect(settled.state).toBe("completed")

      const all = verifiedEvents(yield* receiver.waitFor("/all", (got) => got.length >= 3))
      expect(typesOf(all)).toEqual(["run.started", "usage.recorded", "run.completed"])
      const [started, usage, completed] = all.map((event) => decodeEvent(event))
      expect(started!.data).toEqual({
        agentId: id,
        requestId: settled.id,
        method: "prompt",
        actor: "u1",
        metadata: { ticket: "T-1" }
      })
      expect(usage!.data).toMatchObject({
        agentId: id,
        requestId: settled.id,
        subject: "user-7",
        actor: "u1",
        context: { plan: "pro" },
        keyScope: null,
        provider: "fake",
        model: "m1",
        kind: "response",
        cost: { source: "catalog" }
      })
      expect(completed!.data).toMatchObject({
        agentId: id,
        requestId: settled.id,
        method: "prompt",
        actor: "u1",
        metadata: { ticket: "T-1" },
        replyIndex: 1,
        messageCount: 2,
        usage: { responses: 1 }
      })
      expect((completed!.data as Webhook.RunCompleted).usage!.input).toBe((usage!.data as any).input)
      for (const event of all) expect(event.id).toMatch(/^evt_/)

      // An endpoint gets only what it subscribed to.
      const ends = verifiedEvents(yield* receiver.waitFor("/ends", (got) => got.length >= 1))
      expect(typesOf(ends)).toEqual(["run.completed"])
      // The usage webhook: the same usage, signed with its own secret.
      const [report] = verifiedEvents(yield* receiver.waitFor("/usage", (got) => got.length >= 1))
      expect(decodeReport(report).data).toEqual(usage!.data)

      // A gateway call goes to the usage webhook alone, with agentId null.
      world.upstream.script({ text: "from the gateway" })
      const gateway = yield* Effect.promise(() =>
        fetch(`${world.node.gateway}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "fake/m1", messages: [{ role: "user", content: "hi" }] })
        })
      )
      expect(gateway.status).toBe(200)
      const reports = verifiedEvents(yield* receiver.waitFor("/usage", (got) => got.length >= 2))
      expect(decodeReport(reports[1]).data).toMatchObject({ agentId: null, requestId: null, provider: "fake" })
      yield* Effect.sleep("1500 millis")
      expect(typesOf(verifiedEvents(receiver.deliveries("/all")))).toEqual([
        "run.started",
        "usage.recorded",
        "run.completed"
      ])
    }))

  it.scoped("a failed run: run.failed with its error and null usage", () =>
    Effect.gen(function*() {
      const { agent, api, endpoint, receiver, token, world } = yield* setup("hooks-failed")
      yield* endpoint("/failed", ["run.started", "run.failed", "run.completed"])
      const { id } = yield* agent()
      world.upstream.script({ error: { status: 401, message: "bad key" } })
      const settled = yield* Http.prompted(api, token, id, { text: "hi", actor: "svc" })
      expect(settled.error).toBeDefined()
      const events = verifiedEvents(yield* receiver.waitFor("/failed", (got) => got.length >= 2))
      expect(typesOf(events)).toEqual(["run.started", "run.failed"])
      const failed = decodeEvent(events[1])
      expect(failed.data).toEqual({
        agentId: id,
        requestId: settled.id,
        method: "prompt",
        actor: "svc",
        usage: null,
        error: settled.error
      })
    }))

  it.scoped("an input: input.requested, the run stopped for it, input.resolved, and the resumed run", () =>
    Effect.gen(function*() {
      const { agent, api, endpoint, receiver, token, world } = yield* setup("hooks-input")
      yield* endpoint("/input")
      const { id } = yield* agent({ builtins: ["ask_user"] })
      world.upstream.script({
        toolCalls: [{
          id: "call_q",
          name: "ask_user",
          arguments: { questions: [{ question: "Which color?", options: [{ label: "red" }, { label: "blue" }] }] }
        }]
      })
      const stopped = yield* Http.prompted(api, token, id, { text: "paint it", from: { id: "u1" } })
      expect(stopped.stopped).toBe("input_required")
      const [pending] = stopped.outcome.result.inputs
      const first = verifiedEvents(yield* receiver.waitFor("/input", (got) => got.length >= 4))
      expect(typesOf(first)).toEqual(["run.started", "usage.recorded", "input.requested", "run.completed"])
      const requested = decodeEvent(first[2])
      expect(requested.data).toEqual({
        agentId: id,
        requestId: stopped.id,
        inputId: pending.id,
        toolCallId: "call_q",
        kind: "question",
        expiresAt: pending.expiresAt
      })
      expect(decodeEvent(first[3]).data).toMatchObject({
        requestId: stopped.id,
        stopped: "input_required",
        inputIds: [pending.id]
      })

      world.upstream.script({ text: "Blue it is." })
      const answered = yield* api.post(`/v1/agents/${id}/inputs/${pending.id}/answer`, {
        token,
        json: { action: "accept", content: { answers: { "Which color?": "blue" } }, from: { id: "u1" } }
      })
      expect(answered.status, answered.text).toBe(200)
      const resume = answered.body.request.id as string
      const all = verifiedEvents(yield* receiver.waitFor("/input", (got) => got.length >= 8))
      expect(typesOf(all.slice(4))).toEqual(["input.resolved", "run.started", "usage.recorded", "run.completed"])
      expect(decodeEvent(all[4]).data).toEqual({
        agentId: id,
        requestId: stopped.id,
        inputId: pending.id,
        state: "answered"
      })
      expect(decodeEvent(all[5]).data).toEqual({ agentId: id, requestId: resume, method: "resume", actor: "u1" })
      expect(decodeEvent(all[7]).data).toMatchObject({ requestId: resume, method: "resume", usage: { responses: 1 } })
    }))

  it.scoped(
    "a receiver down, slow past 10 s, answering 500 or 302: retried under the same id until a 2xx, without holding up a healthy endpoint",
    () =>
      Effect.gen(function*() {
        const { agent, api, endpoint, receiver, token, world } = yield* setup("hooks-faults")
        const other = yield* WebhookReceiver.start
        const made = yield* api.post("/v1/webhooks", {
          token,
          json: { url: `${other.url}/down`, events: ["run.completed"] }
        })
        other.trust("/down", [made.body.secret])
        yield* other.down
        const hooks = {
          down: made.body.id as string,
          slow: (yield* endpoint("/slow", ["run.completed"])).id,
          failing: (yield* endpoint("/failing", ["run.completed"])).id,
          redirect: (yield* endpoint("/redirect", ["run.completed"])).id,
          healthy: (yield* endpoint("/healthy", ["run.completed"])).id
        }
        receiver.behave("/slow", { delayMs: 11_000 })
        receiver.behave("/failing", { status: 500 })
        receiver.behave("/redirect", { location: `${receiver.url}/elsewhere` })
        receiver.trust("/elsewhere", [])

        const { id } = yield* agent()
        world.upstream.script({ text: "done" })
        const settled = yield* Http.prompted(api, token, id, { text: "hi" })
        const ended = Date.now()
        // The healthy endpoint is not held up by the four failing beside it.
        const [healthy] = verifiedEvents(yield* receiver.waitFor("/healthy", (got) => got.length >= 1, 3_000))
        expect(Date.now() - ended).toBeLessThan(3_000)
        expect(healthy!.data.requestId).toBe(settled.id)

        // Each failing endpoint's first try is recorded with why it did not count, and a next try.
        yield* receiver.waitFor("/failing", (got) => got.length >= 2, 20_000)
        receiver.behave("/failing", { status: 200 })
        yield* receiver.waitFor("/redirect", (got) => got.length >= 1, 5_000)
        receiver.behave("/redirect", {})
        yield* receiver.waitFor("/slow", (got) => got.length >= 1, 15_000)
        receiver.behave("/slow", {})
        yield* other.up

        for (const path of ["/failing", "/redirect", "/slow"]) {
          const got = yield* receiver.waitFor(path, (got) => got.some((delivery) => delivery.status < 300), 30_000)
          const ids = new Set(verifiedEvents(got).map((event) => event.id))
          expect(ids, path).toEqual(new Set([healthy!.id]))
        }
        const [late] = verifiedEvents(yield* other.waitFor("/down", (got) => got.length >= 1, 30_000))
        expect(late!.id).toBe(healthy!.id)
        expect(receiver.deliveries("/elsewhere")).toEqual([])

        const failing = yield* attempts(api, token, hooks.failing)
        expect(failing.map((attempt) => [attempt.attempt, attempt.status, attempt.outcome])).toEqual([
          [3, 200, "delivered"],
          [2, 500, "retrying"],
          [1, 500, "retrying"]
        ])
        expect(failing[2]!.nextAt! - failing[2]!.at).toBeGreaterThanOrEqual(3)
        expect(failing[2]!.nextAt! - failing[2]!.at).toBeLessThanOrEqual(7)
        const redirect = yield* attempts(api, token, hooks.redirect)
        expect(redirect.at(-1)).toMatchObject({ status: 302, outcome: "retrying" })
        expect(redirect.at(-1)!.error).toContain("redirects are not followed")
        const slow = yield* attempts(api, token, hooks.slow)
        expect(slow.at(-1)).toMatchObject({ status: null, outcome: "retrying" })
        expect(slow.at(-1)!.error).toContain("no answer within 10s")
        expect(slow.at(-1)!.latencyMs).toBeGreaterThanOrEqual(10_000)
        const down = yield* attempts(api, token, hooks.down)
        expect(down.at(-1)).toMatchObject({ status: null, outcome: "retrying" })
        expect(down.at(0)).toMatchObject({ outcome: "delivered" })

        // The deliveries view, and a re-send under the same id, tried from 1 again.
        const deliveries = yield* api.get(`/v1/webhooks/${hooks.failing}/deliveries?state=delivered`, { token })
        expect(deliveries.body).toEqual([
          expect.objectContaining({ eventId: healthy!.id, state: "delivered", attempts: 3, nextAt: null })
        ])
        const resent = yield* api.post(`/v1/webhooks/${hooks.healthy}/deliveries/${healthy!.id}/resend`, { token })
        expect(resent.status, resent.text).toBe(202)
        const again = yield* receiver.waitFor("/healthy", (got) => got.length >= 2, 5_000)
        expect(again.map((delivery) => delivery.event.id)).toEqual([healthy!.id, healthy!.id])
        expect((yield* attempts(api, token, hooks.healthy)).map((attempt) => attempt.attempt)).toEqual([1, 1])
        const unknown = yield* api.post(`/v1/webhooks/${hooks.healthy}/deliveries/evt_nope/resend`, { token })
        expect(unknown.status).toBe(404)

        // The operator sees any tenant's attempts; a tenant's key cannot use the operator's route.
        const operator = yield* api.get(`/v1/admin/webhooks/${hooks.failing}/attempts`, {
          token: world.node.operatorToken
        })
        expect(operator.status, operator.text).toBe(200)
        expect(operator.body).toEqual(failing)
        expect((yield* api.get(`/v1/admin/webhooks/${hooks.failing}/attempts`, { token })).status).toBe(403)
      }),
    120_000
  )
})

it.scopedLive(
  "three nodes, the one sending killed -9 mid-delivery: another takes the endpoint over and every event arrives, duplicates under their ids",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({
        size: 3,
        databaseUrl,
        env: { ALLOW_PRIVATE_URLS: "true", WEBHOOK_LEASE_SECONDS: "5" }
      })
      const { api, token } = yield* TestWorld.tenantWithModel(
        { node: cluster.members[0]!.node, upstream },
        "hooks-kill"
      )
      const receiver = yield* WebhookReceiver.start
      const made = yield* api.post("/v1/webhooks", { token, json: { url: `${receiver.url}/kill`, events: runTypes } })
      expect(made.status, made.text).toBe(201)
      receiver.trust("/kill", [made.body.secret])
      // Each answer takes 3 s: the sending node has the whole batch in flight when it is killed.
      receiver.behave("/kill", { delayMs: 3_000 })

      const requests: Array<string> = []
      for (let index = 0; index < 3; index++) {
        const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
        upstream.script({ text: `reply ${index}` })
        requests.push((yield* Http.prompted(api, token, agentId, { text: "hi" })).id)
      }
      yield* Effect.gen(function*() {
        while (receiver.arrived("/kill") === 0) yield* Effect.sleep("20 millis")
      }).pipe(Effect.timeout("10 seconds"), Effect.orDie)
      const [lease] = yield* TestDatabase.query(databaseUrl, `SELECT lease_owner FROM webhook_endpoints`)
      const holder = cluster.members.findIndex((member) => lease?.lease_owner.startsWith(`${member.runnerAddress}/`))
      expect(holder, String(lease?.lease_owner)).toBeGreaterThanOrEqual(0)
      yield* cluster.stop(holder, "SIGKILL")
      receiver.behave("/kill", {})

      const expected = requests.length * 3
      const got = yield* receiver.waitFor(
        "/kill",
        (got) => new Set(got.map((delivery) => delivery.event.id)).size >= expected,
        30_000
      )
      const events = verifiedEvents(got)
      expect(events).toHaveLength(expected)
      // The batch in flight when its node died was answered by the receiver and sent again by the next node.
      expect(got.length).toBeGreaterThan(expected)
      for (const delivery of got) {
        expect(events.find((event) => event.id === delivery.event.id)).toEqual(delivery.event)
      }
      // In `created` order, each run's events come as they happened.
      for (const requestId of requests) {
        expect(typesOf(events.filter((event) => event.data.requestId === requestId))).toEqual([
          "run.started",
          "usage.recorded",
          "run.completed"
        ])
      }
      // The last answers are recorded by the sender a moment after the receiver has them.
      const undelivered = TestDatabase.query(
        databaseUrl,
        `SELECT count(*)::int AS count FROM webhook_deliveries WHERE state <> 'delivered'`
      ).pipe(Effect.map(([row]) => row?.count as number))
      let left = yield* undelivered
      for (let wait = 0; wait < 50 && left > 0; wait++) {
        yield* Effect.sleep("100 millis")
        left = yield* undelivered
      }
      expect(left).toBe(0)
    }),
  120_000
)
