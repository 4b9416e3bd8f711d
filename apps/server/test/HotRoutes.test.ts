/**
 * The hot routes (a turn's prompt and the long-poll of its outcome, served
 * before the HttpApi pipeline) answer exactly as the API does: each request
 * is sent as is, then with an Origin header, which hands it to the API, and
 * both answers must be the same, success or error.
 */
import { FakeUpstream, Http, TestDatabase, TestNode, TestWorld } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"

it.scoped(
  "the prompt and request routes answer as the API does, success and every error",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const node = yield* TestNode.start({ databaseUrl: yield* TestDatabase.make, env: { ALLOW_PRIVATE_URLS: "true" } })
      const { api, token } = yield* TestWorld.tenantWithModel({ node, upstream }, "acme")
      const other = yield* TestWorld.tenantWithModel({ node, upstream }, "other")
      const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
      const theirs = (yield* api.post("/v1/agents", { token: other.token, json: { model: "fake/m1" } })).body.id
      const revoked = (yield* api.post("/v1/tokens", { token, json: { name: "old" } })).body
      yield* api.delete(`/v1/tokens/${revoked.id}`, { token })

      /** The answer as served, and as the API serves it: they must agree. */
      const both = (method: string, path: string, options: Http.RequestOptions) =>
        Effect.gen(function*() {
          const hot = yield* Http.request(node.rest, method, path, options)
          const viaApi = yield* Http.request(node.rest, method, path, {
            ...options,
            headers: { ...options.headers, origin: "https://app.example" }
          })
          expect({ status: hot.status, body: hot.body }).toEqual({ status: viaApi.status, body: viaApi.body })
          expect(hot.headers.get("content-type")).toBe(viaApi.headers.get("content-type"))
          return hot
        })
      const prompt = (body: string, options: { readonly token?: string; readonly agent?: string } = {}) =>
        both("POST", `/v1/agents/${options.agent ?? agentId}/prompt`, {
          token: options.token ?? token,
          body,
          headers: { "content-type": "application/json" }
        })

      const first = JSON.stringify({ text: "hi", requestId: "req_same", metadata: { a: "b" } })
      const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        body: first,
        headers: { "content-type": "application/json" }
      })
      expect(accepted).toMatchObject({ status: 202, body: { id: "req_same", method: "prompt", prompt: "hi" } })
      // Settled, the same prompt again answers the same record, however it is served.
      yield* Http.settled(api, token, agentId, "req_same")
      expect((yield* prompt(first)).body).toMatchObject({ id: "req_same", state: "completed" })
      expect((yield* prompt("{}")).body).toEqual({
        error: "invalid request: text: is missing",
        code: "INVALID_REQUEST"
      })
      expect((yield* prompt(JSON.stringify({ text: 7 }))).status).toBe(400)
      // A field the prompt does not have, at the top or inside its sender or files, is refused, not dropped.
      expect((yield* prompt(JSON.stringify({ text: "hi", requestId: "req_stray", runLimits: { turns: 1 } }))).body)
        .toEqual({ error: "invalid request: runLimits: unknown field", code: "INVALID_REQUEST" })
      expect(
        (yield* prompt(JSON.stringify({ text: "hi", requestId: "req_stray", from: { id: "u_1", role: "admin" } })))
          .body
      ).toEqual({ error: "invalid request: from.role: unknown field", code: "INVALID_REQUEST" })
      expect(
        (yield* prompt(JSON.stringify({ text: "hi", requestId: "req_stray", files: [{ path: "a", mode: "ro" }] })))
          .body.error
      ).toContain("files.0.mode: unknown field")
      expect((yield* prompt("{")).body).toEqual({ error: "request body is not valid JSON", code: "INVALID_REQUEST" })
      expect((yield* prompt("")).status).toBe(400)
      expect((yield* prompt(JSON.stringify({ text: "a\u0000b" }))).body.code).toBe("INVALID_REQUEST")
      expect((yield* prompt(JSON.stringify({ text: "other", requestId: "req_same" }))).body.code).toBe(
        "IDEMPOTENCY_CONFLICT"
      )
      expect((yield* prompt(JSON.stringify({ text: "hi" }), { agent: "agt_none" })).status).toBe(404)
      expect((yield* prompt(JSON.stringify({ text: "hi" }), { agent: theirs })).status).toBe(404)
      expect((yield* prompt(JSON.stringify({ text: "hi" }), { token: revoked.token })).body).toEqual({
        error: "invalid or revoked token",
        code: "UNAUTHORIZED"
      })
      expect((yield* prompt(JSON.stringify({ text: "hi" }), { token: "art_unknown" })).status).toBe(401)
      // The key is checked in the statement that reads the agent, yet its failure is still the answer first.
      expect((yield* prompt("{", { token: revoked.token })).status).toBe(401)
      expect((yield* prompt("{}", { token: "art_unknown", agent: "agt_none" })).status).toBe(401)
      expect((yield* prompt(JSON.stringify({ text: "hi" }), { token: "art_unknown", agent: theirs })).status).toBe(
        401
      )

      const record = (path: string, options: { readonly token?: string } = {}) =>
        both("GET", `/v1/agents/${agentId}/requests/${path}`, { token: options.token ?? token })
      const done = yield* record("req_same?wait=20")
      expect(done).toMatchObject({ status: 200, body: { id: "req_same", state: "completed" } })
      expect((yield* record("req_same")).body).toEqual(done.body)
      // More than 25 waits 25 (camelRun's client sends what it was asked): settled, it answers at once.
      expect((yield* record("req_same?wait=30")).body).toEqual(done.body)
      expect((yield* record("req_same?wait=-1")).status).toBe(400)
      expect((yield* record("req_same?wait=soon")).status).toBe(400)
      expect((yield* record("req_none")).status).toBe(404)
      // The prompts refused for a field they did not know were not recorded.
      expect((yield* record("req_stray")).status).toBe(404)
      expect((yield* record("req_same", { token: other.token })).status).toBe(404)
      expect((yield* record("req_same", { token: revoked.token })).status).toBe(401)
      expect((yield* record("req_same?wait=soon", { token: revoked.token })).status).toBe(401)
      expect((yield* record("req_none?wait=1", { token: "art_unknown" })).status).toBe(401)
      expect((yield* both("GET", `/v1/agents/${theirs}/requests/req_same`, { token })).status).toBe(404)

      // Logged as the API logs a request.
      expect(node.output()).toContain(`http.url=/v1/agents/${agentId}/prompt`)
    }),
  { timeout: 60_000 }
)

it.scopedLive(
  "a long poll that hears its request settle answers what a read of it answers afterwards",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const node = yield* TestNode.start({ databaseUrl: yield* TestDatabase.make, env: { ALLOW_PRIVATE_URLS: "true" } })
      const { api, token } = yield* TestWorld.tenantWithModel({ node, upstream }, "acme")
      const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
      const prompt = (json: Record<string, unknown>) =>
        Effect.map(api.post(`/v1/agents/${agentId}/prompt`, { token, json }), (accepted) => accepted.body.id as string)
      /** Waits on the request from now; its answer, and a plain read made once it answered. */
      const waiting = (requestId: string) =>
        Effect.fork(Effect.gen(function*() {
          const waited = yield* api.get(`/v1/agents/${agentId}/requests/${requestId}?wait=20`, { token })
          const read = yield* api.get(`/v1/agents/${agentId}/requests/${requestId}`, { token })
          return {
            waited: { status: waited.status, body: waited.body },
            read: { status: read.status, body: read.body }
          }
        }))
      const same = (answers: { readonly waited: unknown; readonly read: unknown }) => {
        expect(answers.waited).toEqual(answers.read)
        return answers.read as { readonly body: Record<string, any> }
      }

      // A reply with what PostgreSQL cannot store (kept as U+FFFD), and metadata.
      upstream.script({ text: "a\u0000b \ud800 c", latencyMs: 400 })
      const plain = yield* waiting(yield* prompt({ text: "hi", metadata: { k: "v" } }))
      const answered = same(yield* Fiber.join(plain))
      expect(answered.body).toMatchObject({ state: "completed", began: 0, metadata: { k: "v" } })
      expect(answered.body.outcome.result.reply).toBe("a\uFFFDb \uFFFD c")

      // A turn that fails: its error and code.
      upstream.script({ error: { status: 400, message: "no such thing" }, latencyMs: 400 })
      const failing = yield* waiting(yield* prompt({ text: "fail" }))
      expect(same(yield* Fiber.join(failing)).body).toMatchObject({
        state: "completed",
        began: 2,
        error: expect.stringContaining("no such thing")
      })

      // A steered prompt ends with the turn it joined, and a prompt queued behind it is cancelled by an abort.
      upstream.script({ text: "one two three four five six", tokenDelayMs: 150 })
      upstream.script({ text: "noted", tokenDelayMs: 150 })
      const running = yield* prompt({ text: "start" })
      const runningWait = yield* waiting(running)
      yield* Effect.sleep("300 millis")
      const steered = yield* prompt({ text: "and this", whileRunning: "steer" })
      const steeredWait = yield* waiting(steered)
      const turnEnd = same(yield* Fiber.join(runningWait))
      expect(same(yield* Fiber.join(steeredWait)).body).toMatchObject({ state: "completed", steeredInto: running })
      expect(turnEnd.body.outcome.result.reply).toBe("noted")

      upstream.script({ text: Array.from({ length: 40 }, (_, i) => `w${i}`).join(" "), tokenDelayMs: 100 })
      const long = yield* prompt({ text: "long" })
      const queued = yield* prompt({ text: "later" })
      const longWait = yield* waiting(long)
      const queuedWait = yield* waiting(queued)
      yield* Effect.sleep("500 millis")
      expect((yield* api.post(`/v1/agents/${agentId}/abort`, { token, json: {} })).status).toBe(200)
      expect(same(yield* Fiber.join(longWait)).body).toMatchObject({ code: "aborted" })
      expect(same(yield* Fiber.join(queuedWait)).body).toMatchObject({ code: "cancelled" })
      expect(same(yield* Fiber.join(queuedWait)).body).not.toHaveProperty("began")
    }),
  { timeout: 60_000 }
)
