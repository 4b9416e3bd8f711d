/**
 * Stateless runs in process (see InProcess), over real HTTP and the real
 * model wire: a run answered within its wait, one that outlives it, its
 * events streamed to its end and resumed, abort, delete, retention, an
 * idempotent create, structured output, files, and that a run is no agent.
 */
import { Runs } from "@agent-runtime/agent"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import * as InProcess from "./InProcess.ts"

const { ServerLive, Upstream, raw, tenantWithModel } = InProcess

/** A JSON answer, read loosely: these tests check the wire as any client would see it. */
type Answer = { readonly status: number; readonly body: any }

const post = (path: string, body: unknown, token: string, headers: Record<string, string> = {}) =>
  raw(
    HttpClientRequest.post(path).pipe(HttpClientRequest.bodyUnsafeJson(body), HttpClientRequest.setHeaders(headers)),
    token
  ) as Effect.Effect<Answer, unknown, HttpClient.HttpClient>

const get = (path: string, token: string) =>
  raw(HttpClientRequest.get(path), token) as Effect.Effect<Answer, unknown, HttpClient.HttpClient>

/** The whole SSE body of a stream that ends by itself, with the request's headers. */
const streamed = (path: string, token: string, headers: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const response = yield* HttpClient.execute(
      HttpClientRequest.get(path).pipe(HttpClientRequest.bearerToken(token), HttpClientRequest.setHeaders(headers))
    )
    expect(response.status).toBe(200)
    return yield* response.text
  }).pipe(Effect.timeout("20 seconds"))

/** The frames of an SSE body: each with its id (when it has one) and data. */
const framesOf = (body: string) =>
  body.split("\n\n").filter((frame) => frame.includes("data:")).map((frame) => {
    const id = /^id: (\d+)$/m.exec(frame)?.[1]
    const event = /^event: (.+)$/m.exec(frame)?.[1]
    const data = JSON.parse(/^data: (.*)$/m.exec(frame)![1]!) as { type?: string; id?: string }
    return { id: id === undefined ? undefined : Number(id), event, data }
  })

const Vote = {
  type: "object",
  properties: { vote: { enum: ["yes", "no"] }, reason: { type: "string" } },
  required: ["vote", "reason"]
}

const fresh = Effect.gen(function*() {
  const upstream = yield* Upstream
  upstream.reset()
  const { api, tenant } = yield* tenantWithModel(`runs-${Math.random().toString(36).slice(2, 8)}`)
  return { api, token: tenant.token, upstream }
})

layer(ServerLive, { timeout: 90_000, excludeTestServices: true })("stateless runs", (it) => {
  it.effect("a run answered within its wait is 200 with its text and usage, and is no agent", () =>
    Effect.gen(function*() {
      const { api, token, upstream } = yield* fresh
      upstream.script({ text: "Paris.", usage: { input: 20, output: 3 } })
      const created = yield* post("/v1/runs", {
        model: "fake/m1",
        systemPrompt: "Answer in one word.",
        input: "Capital of France?",
        metadata: { ticket: "T-1" },
        temperature: 0.2,
        maxOutputTokens: 64,
        wait: 10
      }, token)
      expect(created.status).toBe(200)
      expect(created.body).toMatchObject({
        status: "completed",
        text: "Paris.",
        model: "fake/m1",
        usage: { responses: 1, input: 20, output: 3 },
        toolCalls: [],
        toolErrors: 0,
        metadata: { ticket: "T-1" },
        retentionSeconds: 86400
      })
      const id = created.body.id as string
      expect(id).toMatch(/^run_/)
      expect(created.body.expiresAt).toBe(created.body.endedAt + 86400)
      // No tools at all: a classifier's model sees only the instructions and the input.
      const [call] = upstream.requests()
      expect((call!.body as { tools?: unknown }).tools).toBeUndefined()
      // Its output limit and temperature reach the model.
      expect(call!.body).toMatchObject({ temperature: 0.2, max_completion_tokens: 64 })

      const messages = yield* get(`/v1/runs/${id}/messages`, token)
      expect(messages.body.entries.map((entry: { message: { role: string } }) => entry.message.role)).toEqual([
        "user",
        "assistant"
      ])
      expect((yield* get("/v1/runs", token)).body.map((run: { id: string }) => run.id)).toEqual([id])
      // Not an agent: not listed, not found, not promptable.
      const agents = yield* api.agents.list({ urlParams: {} })
      expect(agents).toEqual([])
      expect((yield* get(`/v1/agents/${id}`, token)).status).toBe(404)
      expect((yield* post(`/v1/agents/${id}/prompt`, { text: "again" }, token)).status).toBe(404)
      expect((yield* get(`/v1/agents/${id}/history`, token)).status).toBe(404)
      // Nor another tenant's.
      const other = yield* tenantWithModel("runs-other")
      for (const path of [`/v1/runs/${id}`, `/v1/runs/${id}/messages`, `/v1/runs/${id}/events`]) {
        expect((yield* get(path, other.tenant.token)).status, path).toBe(404)
      }
      expect((yield* post(`/v1/runs/${id}/abort`, {}, other.tenant.token)).status).toBe(404)
      expect((yield* raw(HttpClientRequest.del(`/v1/runs/${id}`), other.tenant.token)).status).toBe(404)
      expect((yield* get("/v1/runs", other.tenant.token)).body).toEqual([])
      // A cursor from another tenant's list reveals nothing.
      expect((yield* get(`/v1/runs?after=run_0`, other.tenant.token)).body).toEqual([])
      expect((yield* get(`/v1/runs/${id}`, token)).body.status).toBe("completed")
    }))

  it.effect("a run that outlives its wait is 202 running, and GET with wait answers it ended", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      upstream.script({ text: "slow answer", latencyMs: 1500 })
      const created = yield* post("/v1/runs", { model: "fake/m1", input: "take your time" }, token)
      expect(created.status).toBe(202)
      expect(created.body.status).toBe("running")
      expect(created.body.endedAt).toBeUndefined()
      const now = yield* get(`/v1/runs/${created.body.id}`, token)
      expect(now.body.status).toBe("running")
      const ended = yield* get(`/v1/runs/${created.body.id}?wait=10`, token)
      expect(ended.body).toMatchObject({ status: "completed", text: "slow answer" })
    }))

  it.effect("its events stream to its response frame and end; resumed with Last-Event-ID they go on from there", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      upstream.script({ text: "streamed words here", latencyMs: 300, tokenDelayMs: 20 })
      const created = yield* post("/v1/runs", { model: "fake/m1", input: "stream it" }, token)
      const id = created.body.id as string
      const whole = framesOf(yield* streamed(`/v1/runs/${id}/events`, token))
      expect(whole[0]!.event).toBe("ready")
      const last = whole.at(-1)!
      expect(last.data).toMatchObject({ type: "response", id })
      const kinds = whole.map((frame) => (frame.data as { event?: { type: string } }).event?.type)
      expect(kinds).toContain("message_update")
      expect(kinds.filter((kind) => kind === "agent_end")).toHaveLength(1)

      // Resumed after an event in the middle: the rest, to the same end.
      const numbered = whole.filter((frame) => frame.id !== undefined && frame.event === undefined)
      const cut = numbered[Math.floor(numbered.length / 2)]!
      const rest = framesOf(yield* streamed(`/v1/runs/${id}/events`, token, { "last-event-id": String(cut.id) }))
      const restIds = rest.filter((frame) => frame.event === undefined).map((frame) => frame.id)
      expect(restIds).toEqual(numbered.filter((frame) => frame.id! > cut.id!).map((frame) => frame.id))
      expect(rest.at(-1)!.data).toMatchObject({ type: "response", id })

      // The poll form answers as an agent's does.
      const polled = yield* get(`/v1/runs/${id}/events?poll=1`, token)
      expect(polled.status).toBe(200)
      expect(polled.body.events.length).toBeGreaterThan(0)
    }))

  it.effect("abort ends a running run failed, code aborted; delete removes it", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      upstream.script({ text: "never finished", latencyMs: 10_000 })
      const created = yield* post("/v1/runs", { model: "fake/m1", input: "long one" }, token)
      expect(created.status).toBe(202)
      const aborted = yield* post(`/v1/runs/${created.body.id}/abort`, {}, token)
      expect(aborted.status).toBe(200)
      expect(aborted.body).toMatchObject({ status: "failed", error: { code: "aborted" } })
      // Aborting an ended run answers it as it is.
      expect((yield* post(`/v1/runs/${created.body.id}/abort`, {}, token)).body.status).toBe("failed")

      const deleted = yield* raw(HttpClientRequest.del(`/v1/runs/${created.body.id}`), token)
      expect(deleted.body).toEqual({ id: created.body.id, deleted: true })
      expect((yield* get(`/v1/runs/${created.body.id}`, token)).status).toBe(404)
      expect((yield* get(`/v1/runs/${created.body.id}/messages`, token)).status).toBe(404)
      expect((yield* raw(HttpClientRequest.del(`/v1/runs/${created.body.id}`), token)).status).toBe(404)
    }))

  it.effect("past its retention a run is gone, and the sweep deletes it with its messages and workspace", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      const sql = yield* SqlClient.SqlClient
      const runs = yield* Runs.Runs
      upstream.script({ text: "kept a minute" })
      const file = { type: "file", name: "notes.txt", data: Buffer.from("hello").toString("base64") }
      const created = yield* post("/v1/runs", {
        model: "fake/m1",
        input: [{ type: "text", text: "read the file" }, file],
        retentionSeconds: 60,
        wait: 10
      }, token)
      expect(created.body).toMatchObject({ status: "completed", retentionSeconds: 60 })
      const id = created.body.id as string
      // The file was saved in the run's own workspace, and named to the model.
      const sent = JSON.stringify(upstream.requests().map((request) => request.body))
      expect(sent).toContain(`/workspace/uploads/${id}/notes.txt`)
      const [volume] = yield* sql<{ id: string }>`SELECT id FROM volumes WHERE agent_id = ${id}`
      expect(volume).toBeDefined()

      yield* sql`UPDATE agent_requests SET ended_at = now() - interval '61 seconds' WHERE agent_id = ${id}`
      expect((yield* get(`/v1/runs/${id}`, token)).status).toBe(404)
      expect((yield* get(`/v1/runs/${id}/events`, token)).status).toBe(404)
      expect(yield* runs.sweep).toBeGreaterThanOrEqual(1)
      expect(yield* sql`SELECT 1 FROM agents WHERE id = ${id}`).toEqual([])
      expect(yield* sql`SELECT 1 FROM agent_messages WHERE agent_id = ${id}`).toEqual([])
      expect(yield* sql`SELECT 1 FROM volumes WHERE id = ${volume!.id}`).toEqual([])
    }))

  it.effect("a run its owner stopped serving while the release went unrecorded is picked up by that owner", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      const sql = yield* SqlClient.SqlClient
      upstream.script({ text: "first" })
      const created = yield* post("/v1/runs", { model: "fake/m1", input: "answer", wait: 10 }, token)
      expect(created.body).toMatchObject({ status: "completed", text: "first" })
      const id = created.body.id as string
      const [held] = yield* sql<{ owner: string }>`SELECT owner FROM agents WHERE id = ${id}`
      expect(held!.owner).toEqual(expect.any(String))
      // Its entity idles out (10 s) and lets the run go.
      yield* Effect.repeat(sql<{ owner: string | null }>`SELECT owner FROM agents WHERE id = ${id}`, {
        until: ([row]) => row?.owner === null,
        schedule: Schedule.spaced("500 millis")
      }).pipe(Effect.timeout("20 seconds"))
      // The node in process writes no runner report: it is given one, kept fresh, as a live node's is.
      yield* sql`INSERT INTO runner_reports (address, started_at, reported_at, state)
        VALUES (${held!.owner}, now() - interval '1 hour', now(), 'active')
        ON CONFLICT (address) DO UPDATE SET started_at = excluded.started_at, reported_at = now()`
      const reporting = yield* sql`UPDATE runner_reports SET reported_at = now() WHERE address = ${held!.owner}`.pipe(
        Effect.repeat(Schedule.spaced("500 millis")),
        Effect.fork
      )
      // The shape a database outage once left: the entity gone mid-turn, its release unrecorded, so the run
      // looks held by a live runner to every sweep, with its turn open and no one running it.
      yield* sql`UPDATE agents SET owner = ${held!.owner} WHERE id = ${id}`
      yield* sql`UPDATE agent_requests SET state = 'running', ended_at = NULL WHERE agent_id = ${id}`
      // Watched from the database only: any message to the run (a read of it) would start it by itself.
      yield* Effect.repeat(sql<{ state: string }>`SELECT state FROM agent_requests WHERE agent_id = ${id}`, {
        until: ([row]) => row?.state === "completed",
        schedule: Schedule.spaced("500 millis")
      }).pipe(Effect.timeout("20 seconds"))
      yield* Fiber.interrupt(reporting)
      yield* sql`DELETE FROM runner_reports WHERE address = ${held!.owner}`
      const ended = yield* get(`/v1/runs/${id}`, token)
      // Its turn's answer was journaled: the resumed turn ends with it, and asks the model nothing more.
      expect(ended.body).toMatchObject({ status: "completed", text: "first" })
      expect(upstream.requests()).toHaveLength(1)
    }))

  it.effect("the same Idempotency-Key and body are the same run; another body is 409", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      upstream.script({ text: "once" })
      const body = { model: "fake/m1", input: "only once", wait: 10 }
      const first = yield* post("/v1/runs", body, token, { "idempotency-key": "run-key-1" })
      // How long the retry waits is no part of the run.
      const again = yield* post("/v1/runs", { ...body, wait: 1 }, token, { "idempotency-key": "run-key-1" })
      expect(again.body.id).toBe(first.body.id)
      expect(again.body.text).toBe("once")
      const other = yield* post("/v1/runs", { ...body, input: "another" }, token, { "idempotency-key": "run-key-1" })
      expect(other.status).toBe(409)
      expect(other.body.code).toBe("IDEMPOTENCY_CONFLICT")
      expect(upstream.requests()).toHaveLength(1)
      // Agents' keys are another namespace.
      const agent = yield* post("/v1/agents", { model: "fake/m1" }, token, { "idempotency-key": "run-key-1" })
      expect(agent.status).toBe(201)
    }))

  it.effect("structured: a schema the model first violates then fits is the output; prose twice is output_missing", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      upstream.script([
        { toolCalls: [{ name: "final_output", arguments: { vote: "perhaps" } }] },
        { text: "Done.", toolCalls: [{ name: "final_output", arguments: { vote: "no", reason: "Friday" } }] }
      ])
      const voted = yield* post("/v1/runs", {
        model: "fake/m1",
        systemPrompt: "You review release plans.",
        input: "Ship on Friday?",
        output: { schema: Vote },
        wait: 10
      }, token)
      expect(voted.body).toMatchObject({
        status: "completed",
        output: { vote: "no", reason: "Friday" },
        text: "Done.",
        toolErrors: 1
      })

      upstream.script([{ text: "Yes." }, { text: "Yes, really." }])
      const prose = yield* post(
        "/v1/runs",
        { model: "fake/m1", input: "Ship?", output: { schema: Vote }, wait: 10 },
        token
      )
      expect(prose.body).toMatchObject({
        status: "failed",
        text: "Yes, really.",
        error: { code: "output_missing" }
      })
      expect(prose.body.output).toBeUndefined()
    }))

  it.effect("a definition's approval ends a run input_required, for good: the sweep cancels what it asked", () =>
    Effect.gen(function*() {
      const { token, upstream } = yield* fresh
      const runs = yield* Runs.Runs
      const definition = yield* post("/v1/definitions", {
        name: "careful",
        model: "fake/m1",
        builtins: ["web_fetch", "ask_user"],
        humanInput: { approvals: [{ tool: "web_fetch" }] }
      }, token)
      expect(definition.status, JSON.stringify(definition.body)).toBe(201)
      upstream.script({ toolCalls: [{ name: "web_fetch", arguments: { url: "http://127.0.0.1:9/never" } }] })
      const created = yield* post("/v1/runs", { definition: definition.body.id, input: "fetch it", wait: 10 }, token)
      expect(created.body).toMatchObject({ status: "input_required", inputs: [{ kind: "approval", state: "pending" }] })
      // The definition's ask_user is no run's: the model had web_fetch (and code mode to call it).
      const tools = (upstream.requests()[0]!.body as { tools: Array<{ function: { name: string } }> }).tools
      expect(tools.map((tool) => tool.function.name)).toEqual(["web_fetch", "codemode"])

      yield* runs.sweep
      const inputs = yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        for (let i = 0; i < 50; i++) {
          const rows = yield* sql<{ state: string }>`SELECT state FROM agent_inputs WHERE agent_id = ${created.body.id}`
          if (rows.every((row) => row.state !== "pending")) return rows
          yield* Effect.sleep("100 millis")
        }
        return []
      })
      expect(inputs.map((row) => row.state)).toEqual(["cancelled"])
      // Nothing resumed it: one model request, and the run is as it ended.
      const asked = upstream.requests().map((request) =>
        JSON.stringify((request.body as { messages: ReadonlyArray<unknown> }).messages).slice(0, 600)
      )
      expect(asked, asked.join("\n")).toHaveLength(1)
      expect((yield* get(`/v1/runs/${created.body.id}`, token)).body.status).toBe("input_required")
    }))

  it.effect("bad input is refused with its error and leaves nothing behind", () =>
    Effect.gen(function*() {
      const { token } = yield* fresh
      const refused = [
        [{ model: "fake/m1" }, 400, "input"],
        [{ model: "fake/m1", input: "x", builtins: ["ask_user"] }, 400, "builtins"],
        [{ model: "fake/m1", input: "x", retentionSeconds: 10 }, 400, "retentionSeconds"],
        [{ model: "fake/m1", input: "x", output: { schema: { type: "string" } } }, 400, "object"],
        [{ model: "fake/m1", input: "x", definition: "def_missing" }, 400, "definition"],
        [{ model: "fake/m1", input: "x", wait: 61 }, 400, "wait"],
        [{ model: "fake/m1", input: "x", colour: "red" }, 400, "colour"],
        // A budget already spent refuses the run as it would a prompt, leaving nothing.
        [{ model: "fake/m1", input: "x", spendLimit: { usd: 0 } }, 402, "spend limit"],
        [
          { model: "fake/m1", input: [{ type: "file", name: "big", data: "A".repeat(6 * 1024 * 1024) }] },
          413,
          "inline"
        ]
      ] as const
      for (const [body, status, mentions] of refused) {
        const response = yield* post("/v1/runs", body, token)
        expect(response.status, JSON.stringify(response.body)).toBe(status)
        expect(response.body.error).toContain(mentions)
      }
      expect((yield* get("/v1/runs", token)).body).toEqual([])
    }))
})
