/**
 * Browser tokens over real HTTP: issuing and its limits, the four read routes
 * and nothing else (per scope, per agent), the events filter, outcomes
 * reduced to whether and why a run stopped, cost redaction, expiry, CORS on
 * those routes only, and tenant isolation.
 */
import { Http, TestDatabase, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

const publicUrl = "https://runtime.example.test"

const WorldLive = TestWorld.layer(() => Effect.succeed({ PUBLIC_URL: publicUrl }))

type Api = ReturnType<typeof Http.client>

/** A tenant with a priced model `paid/m1` (1,000 USD per million tokens), so responses carry a cost. */
const tenantWithPaidModel = (world: TestWorld.World, name: string) =>
  Effect.gen(function*() {
    const tenant = yield* TestWorld.tenantWithModel(world, name)
    const saved = yield* tenant.api.put("/v1/providers/paid", {
      token: tenant.token,
      json: {
        type: "openai-completions",
        baseUrl: `${world.upstream.url}/v1`,
        models: [{ id: "m1", contextWindow: 100_000, pricing: { input: 1000, output: 1000 } }]
      }
    })
    expect(saved.status).toBe(200)
    return tenant
  })

const newAgent = (api: Api, token: string, json: Record<string, unknown> = { model: "fake/m1" }) =>
  Effect.map(api.post("/v1/agents", { token, json }), (response) => {
    expect(response.status).toBe(201)
    return response.body.id as string
  })

const browserToken = (api: Api, token: string, agentId: string, json: Record<string, unknown> = {}) =>
  Effect.map(api.post(`/v1/agents/${agentId}/browser-tokens`, { token, json }), (response) => {
    expect(response.status).toBe(201)
    return response.body.token as string
  })

/** The frames of a poll from `cursor`, once the request's response frame is among them. */
const pollUntilResponse = (api: Api, token: string, agentId: string, requestId: string, cursor = 0) =>
  Effect.gen(function*() {
    const frames: Array<any> = []
    let at = cursor
    const started = Date.now()
    while (Date.now() - started < 20_000) {
      const polled = yield* api.get(`/v1/agents/${agentId}/events?poll=1&wait=5`, {
        token,
        headers: { "last-event-id": String(at) }
      })
      expect(polled.status).toBe(200)
      for (const entry of polled.body.events) frames.push(entry.data)
      at = polled.body.cursor
      if (frames.some((frame) => frame.type === "response" && frame.id === requestId)) return frames
    }
    return yield* Effect.die(new Error(`no response frame for ${requestId}`))
  })

const eventTypes = (frames: ReadonlyArray<any>) =>
  frames.filter((frame) => frame.type === "event").map((frame) => frame.event.type as string)

const assistantEnds = (frames: ReadonlyArray<any>) =>
  frames.filter((frame) =>
    frame.type === "event" && frame.event.type === "message_end" && frame.event.message.role === "assistant"
  )

layer(WorldLive, { excludeTestServices: true })("browser tokens", (it) => {
  it.effect("issuing: the answer, its limits, live agents of the tenant only", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, tenantId, token } = yield* TestWorld.tenantWithModel(world, "issue")
      const agentId = yield* newAgent(api, token)
      const path = `/v1/agents/${agentId}/browser-tokens`

      const issued = yield* api.post(path, { token, json: {} })
      expect(issued.status).toBe(201)
      expect(issued.body).toMatchObject({ agentId, url: publicUrl })
      expect(issued.body.token).toMatch(/^abt_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/)
      expect(issued.body.expiresAt).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000) + 895)
      expect(issued.body.expiresAt).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + 901)
      const short = yield* api.post(path, { token, json: { ttlSeconds: 5, subject: "user-7" } })
      expect(short.body.expiresAt).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + 6)

      // The operator acting for the tenant may mint one too.
      const asOperator = yield* api.post(path, {
        token: world.node.operatorToken,
        headers: { "x-agent-runtime-tenant": tenantId },
        json: { scopes: ["state"] }
      })
      expect(asOperator.status).toBe(201)

      for (
        const json of [
          { ttlSeconds: 4 },
          { ttlSeconds: 3601 },
          { ttlSeconds: 10.5 },
          { events: Array.from({ length: 65 }, (_, i) => `type_${i}`) },
          { subject: "s".repeat(201) },
          { scopes: ["events", "admin"] },
          { scopes: [] },
          { redact: ["usage.tokens"] }
        ]
      ) {
        const refused = yield* api.post(path, { token, json })
        expect(refused.status, JSON.stringify(json)).toBe(400)
        expect(refused.body.code).toBe("INVALID_REQUEST")
      }
      // At the limits.
      expect(
        (yield* api.post(path, {
          token,
          json: {
            ttlSeconds: 3600,
            events: Array.from({ length: 64 }, (_, i) => `type_${i}`),
            subject: "s".repeat(200),
            redact: ["usage.cost"]
          }
        })).status
      ).toBe(201)

      expect((yield* api.post("/v1/agents/client_nobody/browser-tokens", { token, json: {} })).status).toBe(404)
      // Another tenant's key cannot mint a token for this tenant's agent.
      const other = yield* TestWorld.tenantWithModel(world, "issue-other")
      expect(yield* api.post(path, { token: other.token, json: {} })).toMatchObject({
        status: 404,
        body: { code: "NOT_FOUND" }
      })
      // Nor can a browser token mint another.
      expect((yield* api.post(path, { token: issued.body.token, json: {} })).status).toBe(403)

      // An expired agent: 410 for a new token, and the old token reads nothing.
      yield* TestDatabase.query(
        world.databaseUrl,
        `UPDATE agents SET expires_at = now() - interval '1 second' WHERE id = '${agentId}'`
      )
      expect(yield* api.post(path, { token, json: {} })).toMatchObject({ status: 410, body: { code: "GONE" } })
      expect((yield* api.get(`/v1/agents/${agentId}/state`, { token: issued.body.token })).status).toBe(410)
      expect((yield* api.get(`/v1/agents/${agentId}/events?poll=1`, { token: issued.body.token })).status).toBe(410)
    }))

  it.effect("a token reads its agent's routes within its scopes and nothing else", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "scopes")
      const agentId = yield* newAgent(api, token)
      const otherAgent = yield* newAgent(api, token)
      const all = yield* browserToken(api, token, agentId)
      const read = (path: string, as: string) => Effect.map(api.get(path, { token: as }), (response) => response.status)
      const routes = {
        events: `/v1/agents/${agentId}/events?poll=1`,
        state: `/v1/agents/${agentId}/state`,
        history: `/v1/agents/${agentId}/history`,
        inputs: `/v1/agents/${agentId}/inputs`
      }

      for (const path of Object.values(routes)) expect(yield* read(path, all), path).toBe(200)
      for (const scope of ["events", "state", "history", "inputs"] as const) {
        const only = yield* browserToken(api, token, agentId, { scopes: [scope] })
        for (const [route, path] of Object.entries(routes)) {
          const answer = yield* api.get(path, { token: only })
          if (route === scope) expect(answer.status, `${scope} on ${route}`).toBe(200)
          else {
            expect(answer, `${scope} on ${route}`).toMatchObject({
              status: 403,
              body: { code: "FORBIDDEN", error: `this browser token has no ${route} scope` }
            })
          }
        }
      }

      // Another agent, and every other route: 403.
      expect(yield* api.get(`/v1/agents/${otherAgent}/state`, { token: all })).toMatchObject({
        status: 403,
        body: { code: "FORBIDDEN", error: "this browser token is for another agent" }
      })
      expect(yield* read(`/v1/agents/${otherAgent}/events?poll=1`, all)).toBe(403)
      expect((yield* api.post(`/v1/agents/${agentId}/prompt`, { token: all, json: { text: "hi" } })).status).toBe(
        403
      )
      expect((yield* api.post(`/v1/agents/${agentId}/abort`, { token: all, json: {} })).status).toBe(403)
      expect((yield* api.post(`/v1/agents/${agentId}/answers`, { token: all, json: { answers: [] } })).status).toBe(
        403
      )
      for (
        const path of [
          `/v1/agents/${agentId}`,
          `/v1/agents/${agentId}/credentials`,
          `/v1/agents/${agentId}/requests/req_x`,
          "/v1/agents",
          "/v1/me",
          "/v1/tokens",
          "/v1/models"
        ]
      ) {
        const answer = yield* api.get(path, { token: all })
        expect(answer.status, path).toBe(403)
        expect(answer.body.code).toBe("FORBIDDEN")
      }
      expect((yield* api.delete(`/v1/agents/${agentId}`, { token: all })).status).toBe(403)
      // Operator routes do not know it.
      expect((yield* api.get("/v1/admin/tenants", { token: all })).status).toBe(401)

      // A forged, tampered or malformed token: 401.
      const [body, mac] = all.slice("abt_".length).split(".")
      const claims = JSON.parse(Buffer.from(body!, "base64url").toString("utf8"))
      const forged = `abt_${
        Buffer.from(JSON.stringify({ ...claims, agentId: otherAgent })).toString("base64url")
      }.${mac}`
      for (const bad of [forged, `${all.slice(0, -2)}xx`, "abt_garbage", `abt_${body}`, `${all}.x`]) {
        expect(yield* api.get(routes.state, { token: bad })).toMatchObject({
          status: 401,
          body: { code: "UNAUTHORIZED", error: "invalid or expired browser token" }
        })
      }
      expect((yield* api.get(`/v1/agents/${otherAgent}/state`, { token: forged })).status).toBe(401)

      // /clients takes only the agent's own token: a browser token is 401 there, and any browser request is 403.
      expect((yield* api.get(`/clients/${agentId}/events?poll=1`, { token: all })).status).toBe(401)
      expect((yield* api.get(`/clients/${agentId}/history`, { token: all })).status).toBe(401)
      expect(
        (yield* api.get(`/clients/${agentId}/events?poll=1`, {
          token: all,
          headers: { origin: "https://app.example.test" }
        })).status
      ).toBe(403)
    }))

  it.scoped("events: the filter, response frames reduced, usage.cost redacted; state and history likewise", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithPaidModel(world, "events")
      const agentId = yield* newAgent(api, token, { model: "paid/m1" })
      const ends = yield* browserToken(api, token, agentId, { events: ["message_end"] })
      const plain = yield* browserToken(api, token, agentId)
      const redacted = yield* browserToken(api, token, agentId, { redact: ["usage.cost"] })

      const sse = (as: string) =>
        Http.sse(world.node.rest, `/v1/agents/${agentId}/events`, {
          token: as,
          headers: { origin: "https://app.example.test" }
        })
      const streams = { key: yield* sse(token), ends: yield* sse(ends), plain: yield* sse(plain) }
      const redactedStream = yield* sse(redacted)
      for (const stream of [...Object.values(streams), redactedStream]) {
        expect(stream.status).toBe(200)
        yield* stream.take((frame) => frame.event === "ready")
      }
      expect(streams.plain.headers.get("access-control-allow-origin")).toBe("*")
      expect(streams.plain.headers.get("content-type")).toContain("text/event-stream")

      world.upstream.script({ text: "the secret reply", usage: { input: 200, output: 50 } })
      const prompt = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "hi" } })).body
      const done = yield* Http.settled(api, token, agentId, prompt.id)
      expect(done.outcome.result.reply).toBe("the secret reply")

      const responded = (frame: Http.SseFrame) =>
        frame.data !== undefined && frame.data.includes(`"${prompt.id}"`) &&
        JSON.parse(frame.data).type === "response"
      const framesOf = (stream: { take: typeof redactedStream.take }) =>
        Effect.map(
          stream.take(responded),
          (frames) =>
            frames.filter((frame) => frame.id !== undefined && frame.event === undefined).map((frame) =>
              JSON.parse(frame.data!)
            )
        )
      const seen = {
        key: yield* framesOf(streams.key),
        ends: yield* framesOf(streams.ends),
        plain: yield* framesOf(streams.plain),
        redacted: yield* framesOf(redactedStream)
      }

      // The API key sees everything; the filtered token only message_end event frames, but the response too.
      expect(eventTypes(seen.key)).toContain("message_update")
      expect(eventTypes(seen.ends).length).toBeGreaterThan(0)
      expect(new Set(eventTypes(seen.ends))).toEqual(new Set(["message_end"]))
      expect(eventTypes(seen.plain)).toEqual(eventTypes(seen.key))

      // The outcome: the API key's in full, the browser's only whether and why the run stopped.
      const responseOf = (frames: ReadonlyArray<any>) =>
        frames.find((frame) => frame.type === "response" && frame.id === prompt.id)
      expect(responseOf(seen.key).outcome.result.reply).toBe("the secret reply")
      for (const frames of [seen.ends, seen.plain, seen.redacted]) {
        expect(responseOf(frames)).toEqual({ type: "response", id: prompt.id, outcome: { result: { error: null } } })
      }

      // usage.cost: there without the redaction, gone with it (usage itself stays).
      const [plainEnd] = assistantEnds(seen.plain)
      expect(plainEnd.event.message.usage.cost.total).toBeGreaterThan(0)
      const [redactedEnd] = assistantEnds(seen.redacted)
      expect(redactedEnd.event.message.usage).toMatchObject({ input: 200, output: 50 })
      expect(redactedEnd.event.message.usage.cost).toBeUndefined()
      expect(JSON.stringify(seen.redacted)).not.toContain('"cost"')
      expect(redactedEnd.event.message.content).toEqual(plainEnd.event.message.content)

      // Polling shows the same.
      const polledEnds = yield* pollUntilResponse(api, ends, agentId, prompt.id)
      expect(new Set(eventTypes(polledEnds))).toEqual(new Set(["message_end"]))
      expect(responseOf(polledEnds).outcome).toEqual({ result: { error: null } })
      const polledRedacted = yield* pollUntilResponse(api, redacted, agentId, prompt.id)
      expect(eventTypes(polledRedacted)).toEqual(eventTypes(seen.key))
      expect(JSON.stringify(polledRedacted)).not.toContain('"cost"')
      const polledPlain = yield* pollUntilResponse(api, plain, agentId, prompt.id)
      expect(assistantEnds(polledPlain)[0].event.message.usage.cost.total).toBeGreaterThan(0)

      // State: outcomes reduced.
      const state = yield* api.get(`/v1/agents/${agentId}/state`, { token: plain })
      expect(state.status).toBe(200)
      expect(state.headers.get("access-control-allow-origin")).toBe("*")
      const record = state.body.requests.find((request: any) => request.id === prompt.id)
      expect(record).toMatchObject({ id: prompt.id, state: "completed", outcome: { result: { error: null } } })
      expect(record.outcome).toEqual({ result: { error: null } })
      const full = (yield* api.get(`/v1/agents/${agentId}/state`, { token })).body.requests
        .find((request: any) => request.id === prompt.id)
      expect(full.outcome.result.reply).toBe("the secret reply")

      // History: cost there without the redaction, gone with it.
      const history = (as: string) =>
        Effect.map(api.get(`/v1/agents/${agentId}/history`, { token: as }), (response) => {
          expect(response.status).toBe(200)
          return response.body.entries.find((entry: any) => entry.message.role === "assistant").message
        })
      expect((yield* history(plain)).usage.cost.total).toBeGreaterThan(0)
      const hidden = yield* history(redacted)
      expect(hidden.usage).toMatchObject({ input: 200, output: 50 })
      expect(hidden.usage.cost).toBeUndefined()
      expect((yield* history(token)).usage.cost.total).toBeGreaterThan(0)
    }))

  it.effect("state alone shows which runs ran and how they ended, not what they were asked", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "state-only")
      const agentId = yield* newAgent(api, token)
      world.upstream.script({ text: "the secret reply" })
      const prompt = (yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "the secret question", metadata: { ticket: "T-9" } }
      })).body
      yield* Http.settled(api, token, agentId, prompt.id)

      const recordAs = (scopes: ReadonlyArray<string>, events?: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const as = yield* browserToken(api, token, agentId, { scopes, ...(events === undefined ? {} : { events }) })
          const state = yield* api.get(`/v1/agents/${agentId}/state`, { token: as })
          expect(state.status).toBe(200)
          return state.body.requests.find((request: any) => request.id === prompt.id)
        })
      // State alone: the run, its state and how it ended; not its prompt, metadata or reply.
      const alone = yield* recordAs(["state"])
      expect(alone).toMatchObject({ id: prompt.id, method: "prompt", state: "completed", outcome: { result: {} } })
      expect(alone.prompt).toBeUndefined()
      expect(alone.metadata).toBeUndefined()
      expect(JSON.stringify(alone)).not.toContain("secret")
      expect(JSON.stringify(alone)).not.toContain("T-9")
      // Nor with events whose filter lets no user message through.
      expect((yield* recordAs(["state", "events"], ["turn_start"])).prompt).toBeUndefined()
      // With a scope that shows the prompt anyway (history, or events with the user's message), state shows it too;
      // the reply stays out of state (it is in the history and events).
      for (
        const [scopes, events] of [
          [["state", "history"], undefined],
          [["state", "events"], undefined],
          [["state", "events"], ["message_end"]]
        ] as const
      ) {
        const record = yield* recordAs(scopes, events)
        expect(record, scopes.join()).toMatchObject({ prompt: "the secret question", metadata: { ticket: "T-9" } })
        expect(JSON.stringify(record)).not.toContain("the secret reply")
      }
    }))

  it.effect("the default filter leaves out the runtime's own types; an outcome says why the run stopped", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* tenantWithPaidModel(world, "defaults")
      // One response of 1,000 in and 1,000 out costs 2 USD: the next round meets the 1 USD limit.
      const agentId = yield* newAgent(api, token, { model: "paid/m1", spendLimit: { usd: 1 } })
      const plain = yield* browserToken(api, token, agentId)
      const asked = yield* browserToken(api, token, agentId, { events: ["spend_limit_reached", "turn_start"] })
      world.upstream.script({
        toolCalls: [{ name: "lookup", arguments: { q: "x" } }],
        usage: { input: 1000, output: 1000 }
      })
      const prompt = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "go" } })).body
      expect(yield* Http.settled(api, token, agentId, prompt.id)).toMatchObject({ stopped: "spend_limit" })

      const byKey = yield* pollUntilResponse(api, token, agentId, prompt.id)
      expect(eventTypes(byKey)).toContain("spend_limit_reached")
      const byDefault = yield* pollUntilResponse(api, plain, agentId, prompt.id)
      expect(eventTypes(byDefault)).not.toContain("spend_limit_reached")
      expect(eventTypes(byDefault)).toEqual(eventTypes(byKey).filter((type) => type !== "spend_limit_reached"))
      const byAsking = yield* pollUntilResponse(api, asked, agentId, prompt.id)
      expect(new Set(eventTypes(byAsking))).toEqual(new Set(["spend_limit_reached", "turn_start"]))

      const response = byDefault.find((frame) => frame.type === "response" && frame.id === prompt.id)
      expect(response.outcome).toEqual({ result: { stopped: "spend_limit", error: null } })
      const state = (yield* api.get(`/v1/agents/${agentId}/state`, { token: plain })).body
      const record = state.requests.find((request: any) => request.id === prompt.id)
      expect(record).toMatchObject({ stopped: "spend_limit", outcome: { result: { stopped: "spend_limit" } } })
      expect(Object.keys(record.outcome.result).sort()).toEqual(["error", "stopped"])
    }))

  it.scoped(
    "a snapshot (a cursor behind the buffer) is redacted, and the stream after it filtered",
    () =>
      Effect.gen(function*() {
        const world = yield* TestWorld.TestWorld
        const { api, token } = yield* tenantWithPaidModel(world, "snapshot")
        const agentId = yield* newAgent(api, token, { model: "paid/m1" })
        const redacted = yield* browserToken(api, token, agentId, { redact: ["usage.cost"], events: ["message_end"] })
        const plain = yield* browserToken(api, token, agentId)
        // A first response of 600 words (more events than the buffer keeps) and a tool call, then a slow second one.
        world.upstream.script({
          text: Array.from({ length: 600 }, (_, i) => `w${i}`).join(" "),
          toolCalls: [{ name: "lookup", arguments: { q: "x" } }],
          usage: { input: 100, output: 600 }
        })
        world.upstream.script({
          text: "a slow answer of ten words at the very end",
          tokenDelayMs: 400,
          usage: { input: 10, output: 5 }
        })
        const prompt = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "go" } })).body
        yield* Http.waitFor(
          () =>
            Effect.map(
              api.get(`/v1/agents/${agentId}/events?poll=1`, { token, headers: { "last-event-id": "1" } }),
              (response) => response.status === 409
            ),
          "the buffer moves past cursor 1"
        )
        const snapshotOf = (as: string) =>
          Effect.gen(function*() {
            const stream = yield* Http.sse(world.node.rest, `/v1/agents/${agentId}/events?snapshot=1`, {
              token: as,
              headers: { "last-event-id": "1" }
            })
            expect(stream.status).toBe(200)
            const isResponse = (frame: Http.SseFrame) => frame.data?.includes(`"response"`) ?? false
            const taken = yield* stream.take(isResponse)
            // Cut before the snapshot, the stream would be asked again from the same cursor.
            expect(taken[0]).toMatchObject({ event: "ready", id: "1" })
            const frames = taken.filter((frame) => frame.id !== undefined && frame.event === undefined)
              .map((frame) => JSON.parse(frame.data!))
            expect(frames[0].type).toBe("snapshot")
            return frames
          })
        const [hidden, shown] = yield* Effect.all([snapshotOf(redacted), snapshotOf(plain)], { concurrency: 2 })
        const costOf = (snapshot: any) =>
          snapshot.turn.find((message: any) => message.role === "assistant" && message.usage !== undefined)?.usage
        expect(costOf(shown[0]).cost.total).toBeGreaterThan(0)
        expect(costOf(hidden[0])).toMatchObject({ input: 100, output: 600 })
        expect(costOf(hidden[0]).cost).toBeUndefined()
        expect(JSON.stringify(hidden)).not.toContain('"cost"')
        // After the snapshot: only message_end event frames, and the reduced response.
        expect(new Set(eventTypes(hidden.slice(1)))).toEqual(new Set(["message_end"]))
        expect(eventTypes(shown.slice(1))).toContain("message_update")
        expect(hidden.at(-1)).toEqual({ type: "response", id: prompt.id, outcome: { result: { error: null } } })
      }),
    60_000
  )

  it.effect("a token stops working when it expires", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "expiry")
      const agentId = yield* newAgent(api, token)
      const short = yield* browserToken(api, token, agentId, { ttlSeconds: 5 })
      expect((yield* api.get(`/v1/agents/${agentId}/state`, { token: short })).status).toBe(200)
      yield* Effect.sleep("6 seconds")
      expect(yield* api.get(`/v1/agents/${agentId}/state`, { token: short })).toMatchObject({
        status: 401,
        body: { code: "UNAUTHORIZED", error: "invalid or expired browser token" }
      })
    }), 30_000)

  it.effect("CORS: granted on the four read routes, for any origin, and nowhere else", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "cors")
      const agentId = yield* newAgent(api, token)
      const browser = yield* browserToken(api, token, agentId)
      const preflight = (path: string, method = "GET") =>
        Http.request(world.node.rest, "OPTIONS", path, {
          headers: {
            origin: "https://any.example.test",
            "access-control-request-method": method,
            "access-control-request-headers": "authorization, last-event-id"
          }
        })

      for (const route of ["events", "state", "history", "inputs"]) {
        const answer = yield* preflight(`/v1/agents/${agentId}/${route}`)
        expect(answer.status, route).toBe(204)
        expect(answer.headers.get("access-control-allow-origin")).toBe("*")
        expect(answer.headers.get("access-control-allow-methods")).toBe("GET")
        const allowed = answer.headers.get("access-control-allow-headers")!.split(/,\s*/)
        expect(allowed).toEqual(expect.arrayContaining(["authorization", "last-event-id", "content-type"]))
        expect(Number(answer.headers.get("access-control-max-age"))).toBeGreaterThan(0)

        const read = yield* api.get(`/v1/agents/${agentId}/${route}${route === "events" ? "?poll=1" : ""}`, {
          token: browser,
          headers: { origin: "https://any.example.test" }
        })
        expect(read.status, route).toBe(200)
        expect(read.headers.get("access-control-allow-origin")).toBe("*")
      }
      // A refusal on those routes is readable by the page too.
      const refused = yield* api.get(`/v1/agents/${agentId}/state`, { token: "abt_nope" })
      expect(refused.status).toBe(401)
      expect(refused.headers.get("access-control-allow-origin")).toBe("*")

      for (
        const [path, method] of [
          [`/v1/agents/${agentId}/prompt`, "POST"],
          [`/v1/agents/${agentId}`, "GET"],
          [`/v1/agents/${agentId}/credentials`, "GET"],
          [`/v1/agents/${agentId}/browser-tokens`, "POST"],
          ["/v1/me", "GET"],
          [`/clients/${agentId}/events`, "GET"]
        ] as const
      ) {
        const answer = yield* preflight(path, method)
        expect(answer.status, path).not.toBe(204)
        expect(answer.headers.get("access-control-allow-origin"), path).toBeNull()
        expect(answer.headers.get("access-control-allow-methods"), path).toBeNull()
      }
      const detail = yield* api.get(`/v1/agents/${agentId}`, { token, headers: { origin: "https://any.example.test" } })
      expect(detail.status).toBe(200)
      expect(detail.headers.get("access-control-allow-origin")).toBeNull()
      const prompt = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token: browser,
        json: { text: "hi" },
        headers: { origin: "https://any.example.test" }
      })
      expect(prompt.status).toBe(403)
      expect(prompt.headers.get("access-control-allow-origin")).toBeNull()
    }))
})
