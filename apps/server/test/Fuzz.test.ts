/**
 * Schema fuzzing of every REST endpoint (generated from the node's own
 * OpenAPI document) and of the gateway's protocols, with a fixed seed and a
 * bounded count: no 5xx, every 4xx in its surface's error body, no secret
 * in any answer, no other tenant's resource reached, and the node still up
 * at the end. `npm run fuzz` runs the same for longer (see scripts/fuzz.ts).
 *
 * First, one request for each class of defect the fuzzing found, with the
 * exact answer, so a regression names its class.
 */
import { Fuzz, FuzzWorld, Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"

const maxBodyBytes = 256 * 1024
const seed = 20_261_110
const runs = 2_500

class World extends Context.Tag("FuzzWorld")<World, FuzzWorld.World & TestWorld.World>() {}

const WorldLive = Layer.effect(
  World,
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    return { ...world, ...(yield* FuzzWorld.make(world.node, world.upstream, { maxBodyBytes, longPollSeconds: 1 })) }
  })
).pipe(Layer.provide(TestWorld.layer((upstream) => FuzzWorld.env(upstream, maxBodyBytes))))

const invalid = (error: string) => ({
  status: 400,
  body: { error: `invalid request: ${error}`, code: "INVALID_REQUEST" }
})

layer(WorldLive, { excludeTestServices: true })("fuzz", (it) => {
  it.effect("strings PostgreSQL cannot store are refused at the edge, naming the field", () =>
    Effect.gen(function*() {
      const { agentId, fill, node } = yield* World
      const token = fill.keys.apiKey
      const api = Http.client(node.rest)
      expect(yield* api.post("/v1/tokens", { token, json: { name: "a\u0000b" } }))
        .toMatchObject(invalid("name: must not contain NUL (\\u0000)"))
      expect(yield* api.post("/v1/tokens", { token, json: { name: "a\ud800b" } }))
        .toMatchObject(invalid("name: must be valid Unicode (a lone surrogate such as \\ud800 is not)"))
      expect(yield* api.post("/v1/agents", { token, json: { model: "up-chat/m1", context: { ok: 1, "k\u0000": 1 } } }))
        .toMatchObject(invalid('context."k\\u0000": key must not contain NUL (\\u0000)'))
      expect(yield* api.delete("/v1/tokens/tok_1%00", { token })).toMatchObject(
        invalid("path: must not contain NUL (%00)")
      )
      expect(yield* api.get(`/v1/agents/${agentId}%00/state`, { token }))
        .toMatchObject(invalid("path: must not contain NUL (%00)"))
      expect(yield* api.get("/v1/tokens?limit=2&after=%00", { token })).toMatchObject(
        invalid("after: must not contain NUL (%00)")
      )
      expect(yield* api.get("/v1/agents/%FF", { token })).toMatchObject(
        invalid("path: not valid percent-encoded UTF-8")
      )
      // The same in a form body, through another decoder: the API takes JSON only.
      const form = yield* api.post("/v1/tokens", {
        token,
        body: "name=a%00b",
        headers: { "content-type": "application/x-www-form-urlencoded" }
      })
      expect(form).toMatchObject(invalid("the body must be JSON (content-type application/json)"))
      const multipart = yield* api.post("/v1/tokens", {
        token,
        body: '--x\r\ncontent-disposition: form-data; name="name"\r\n\r\na\r\n--',
        headers: { "content-type": "multipart/form-data; boundary=x" }
      })
      expect(multipart).toMatchObject(invalid("the body must be JSON (content-type application/json)"))
      // The body is read after authentication, as before.
      expect((yield* api.post("/v1/tokens", { json: { name: "\u0000" } })).status).toBe(401)
    }))

  it.effect("bodies nested too deep are refused before anything recurses through them", () =>
    Effect.gen(function*() {
      const { fill, node } = yield* World
      const deep = `${"[".repeat(10_000)}${"]".repeat(10_000)}`
      const rest = yield* Http.request(node.rest, "POST", "/v1/agents", {
        token: fill.keys.apiKey,
        body: `{"model":"up-chat/m1","context":{"a":${deep}}}`,
        headers: { "content-type": "application/json" }
      })
      expect(rest).toMatchObject(invalid(`context.a${".0".repeat(8)}.…: nested deeper than 128 levels`))
      const gateway = yield* Http.request(node.gateway, "POST", "/v1/chat/completions", {
        token: fill.keys.apiKey,
        body: `{"model":"up-chat/m1","messages":[{"role":"user","content":"hi"}],"tools":${deep}}`,
        headers: { "content-type": "application/json" }
      })
      expect(gateway.status).toBe(400)
      expect(gateway.body.error).toMatchObject({ type: "invalid_request_error", code: "INVALID_REQUEST" })
    }))

  it.effect("the gateway refuses the same strings in each protocol's own error body", () =>
    Effect.gen(function*() {
      const { fill, node } = yield* World
      const token = fill.keys.apiKey
      const chat = yield* Http.request(node.gateway, "POST", "/v1/chat/completions", {
        token,
        json: { model: "up-chat/m1\u0000", messages: [{ role: "user", content: "hi" }] }
      })
      expect(chat).toMatchObject({
        status: 400,
        body: { error: { message: "model: must not contain NUL (\\u0000)", param: "model", code: "INVALID_REQUEST" } }
      })
      const messages = yield* Http.request(node.gateway, "POST", "/v1/messages", {
        headers: { "x-api-key": token, "anthropic-version": "2023-06-01" },
        json: { model: "up-msg/m1", max_tokens: 10, messages: [{ role: "user", content: "a\ud800" }] }
      })
      expect(messages).toMatchObject({ status: 400, body: { type: "error", error: { type: "invalid_request_error" } } })
      for (const segment of ["%00", "%FF"]) {
        const admin = yield* Http.request(node.gateway, "GET", `/v1/admin/tenants/${segment}/gateway`, {
          token: fill.keys.operatorToken
        })
        expect(admin.status).toBe(400)
        expect(admin.body.error.code).toBe("INVALID_REQUEST")
      }
    }))

  it.effect("keys and headers that could never be sent are refused when saved", () =>
    Effect.gen(function*() {
      const { fill, node, upstream } = yield* World
      const api = Http.client(node.rest)
      const token = fill.keys.apiKey
      expect(yield* api.put("/v1/keys/acme", { token, json: { apiKey: "sk-\u00e9\u4e2d", verify: false } }))
        .toMatchObject(
          invalid("apiKey: must be printable ASCII without whitespace (it is sent as a header)")
        )
      const provider = (headers: Record<string, string>) =>
        api.put("/v1/providers/fz-headers", {
          token,
          json: {
            type: "openai-completions",
            baseUrl: `${upstream.url}/v1`,
            headers,
            models: [{ id: "m1", contextWindow: 1000 }]
          }
        })
      for (
        const headers of [{ "x a": "1" }, { "content-length": "1" }, { "x-team": "\u4e2d" }, { "x-team": "a\u0001" }]
      ) {
        const answer = yield* provider(headers)
        expect(answer.status).toBe(400)
        expect(answer.body.error).toMatch(/^invalid request: headers\./)
      }
      expect((yield* provider({ "x-team": "caf\u00e9 ok" })).status).toBe(200)
    }))

  it.effect("tenants' own JSON keeps its keys as written", () =>
    Effect.gen(function*() {
      const { fill, node } = yield* World
      const api = Http.client(node.rest)
      const token = fill.keys.apiKey
      // Keys were renamed snake_case to camelCase on the way out of jsonb, and one ending in `_` broke the agent.
      const metadata = { order_id: "1", trailing_: "2", camelCase: "3" }
      const agent = (yield* api.post("/v1/agents", {
        token,
        json: { model: "up-chat/m1", initialMessages: [{ role: "user", content: "x", extra_: 1 }] }
      })).body
      const prompt = (yield* api.post(`/v1/agents/${agent.id}/prompt`, { token, json: { text: "hi", metadata } })).body
      const settled = yield* api.get(`/v1/agents/${agent.id}/requests/${prompt.id}?wait=10`, { token })
      expect(settled.status).toBe(200)
      expect(settled.body.metadata).toEqual(metadata)
      expect((yield* api.get(`/v1/agents/${agent.id}/state`, { token })).status).toBe(200)
    }))

  it.effect("what is stored reads back: no numeral out of range, no field the handler's own schema refuses", () =>
    Effect.gen(function*() {
      const { fill, node, upstream } = yield* World
      const api = Http.client(node.rest)
      const token = fill.keys.apiKey
      // 1e400 parsed to Infinity, was written as null, and every later listing of the tenant's models failed.
      const huge = yield* api.put("/v1/providers/fz-pricing", {
        token,
        body: `{"type":"openai-completions","baseUrl":"${upstream.url}/v1",` +
          `"models":[{"id":"m1","contextWindow":1000,"pricing":{"input":1,"output":1e400}}]}`,
        headers: { "content-type": "application/json" }
      })
      expect(huge).toMatchObject(invalid("models.0.pricing.output: number out of range"))
      expect((yield* api.get("/v1/models", { token })).status).toBe(200)
      const configure = yield* api.post(`/clients/${(yield* World).agentId}/requests`, {
        token: fill.keys.agentToken,
        json: { method: "configure", requestId: "" }
      })
      expect(configure.status).toBe(400)
      expect(configure.body.code).toBe("INVALID_REQUEST")
    }))

  it.effect("requests node:http refuses get the error body too", () =>
    Effect.gen(function*() {
      const { node } = yield* World
      const oversized = Fuzz.malformed.find((raw) => raw.name === "headers over the limit")!
      const framing = Fuzz.malformed.find((raw) => raw.name === "content-length not a number")!
      const rest = yield* Effect.promise(() => Fuzz.sendRaw(node.rest, oversized.text("/v1/me"), 5_000))
      expect({ status: rest.status, body: JSON.parse(rest.text) }).toEqual({
        status: 413,
        body: { error: "request headers too large", code: "TOO_LARGE" }
      })
      const messages = yield* Effect.promise(() => Fuzz.sendRaw(node.gateway, framing.text("/v1/messages"), 5_000))
      expect({ status: messages.status, body: JSON.parse(messages.text) }).toMatchObject({
        status: 400,
        body: { type: "error", error: { type: "invalid_request_error", message: "malformed HTTP request" } }
      })
    }))

  it.effect("generated requests on every endpoint answer without 5xx, leaks or a crash", () =>
    Effect.gen(function*() {
      const world = yield* World
      const { node } = world
      const started = Date.now()
      const { problems, report } = yield* Fuzz.run({
        rest: node.rest,
        gateway: node.gateway,
        operations: world.operations,
        fill: world.fill,
        secrets: world.secrets,
        runs,
        seed,
        concurrency: 6,
        timeoutMs: 20_000
      })
      console.log(`fuzz: ${report.sent} requests in ${Date.now() - started} ms (seed ${seed})\n${report.format()}`)
      if (problems.length > 0) console.log(JSON.stringify(problems.slice(0, 20), null, 2))

      expect(problems).toEqual([])
      // The generated requests, then each malformed one on the REST API and on two gateway routes.
      expect(report.sent).toBe(runs + 3 * Fuzz.malformed.length)
      for (const operation of world.operations) expect(report.rows.has(Fuzz.label(operation))).toBe(true)
      expect(node.process.exitCode).toBe(null)
      expect((yield* Http.request(node.rest, "GET", "/healthz")).status).toBe(200)
      expect((yield* Http.request(node.gateway, "GET", "/healthz")).status).toBe(200)
      expect(node.output()).not.toMatch(/RangeError|Maximum call stack/)
    }), 120_000)
})
