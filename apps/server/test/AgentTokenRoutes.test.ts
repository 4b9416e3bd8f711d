/**
 * The routes camelRun's client calls beside the connection, over real HTTP:
 * with the agent's own token, its name and type, schedules, answering an
 * input by its id, the whole history or a page of it, and deleting the agent
 * (its token refused from then on); with the API key, the tenant's inbox of
 * inputs and an agent's mounts. Each refuses bad input before writing, and a
 * token or tenant reaches only its own.
 */
import { Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

type Api = ReturnType<typeof Http.client>

const askUser = (id: string, question: string) => ({
  id,
  name: "ask_user",
  arguments: { questions: [{ question, options: [{ label: "red" }, { label: "blue" }] }] }
})

const made = (api: Api, token: string, json: Record<string, unknown>) =>
  Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1", ...json } }), (response) => {
    expect(response.status, response.text).toBe(201)
    return response.body as { id: string; token: string }
  })

/** A prompt whose turn stops on an ask_user question; the pending input. */
const asked = (world: TestWorld.TestWorld["Type"], api: Api, token: string, agentId: string, call: string) =>
  Effect.gen(function*() {
    world.upstream.script({ toolCalls: [askUser(call, `Which color for ${call}?`)] })
    const stopped = yield* Http.prompted(api, token, agentId, { text: "paint it", from: { id: "u1" } })
    expect(stopped.stopped, JSON.stringify(stopped)).toBe("input_required")
    return stopped.outcome.result.inputs[0] as { id: string; requestId: string }
  })

const expectRefused = (response: Http.Response, status: number, code: string) => {
  expect(response.status, response.text).toBe(status)
  expect(response.body).toMatchObject({ error: expect.any(String), code })
}

layer(TestWorld.layer(), { excludeTestServices: true })("agent token routes", (it) => {
  it.scoped("metadata sets name and type; bad bodies change nothing; another agent's token is 401", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "token-metadata")
      const agent = yield* made(api, token, { name: "before" })
      const other = yield* made(api, token, {})
      const path = `/clients/${agent.id}/metadata`

      const set = yield* api.post(path, { token: agent.token, json: { name: "Painter", type: "helper" } })
      expect(set.status, set.text).toBe(200)
      expect(set.body).toEqual({ id: agent.id, name: "Painter", type: "helper" })
      // One left out stays.
      expect((yield* api.post(path, { token: agent.token, json: { type: "artist" } })).body)
        .toEqual({ id: agent.id, name: "Painter", type: "artist" })
      for (const json of [{ name: 5 }, { name: "x", color: "red" }, []]) {
        expectRefused(yield* api.post(path, { token: agent.token, json }), 400, "INVALID_REQUEST")
      }
      expect((yield* api.get(`/v1/agents/${agent.id}`, { token })).body).toMatchObject({
        name: "Painter",
        type: "artist"
      })
      // The lifetime is not touched.
      expect((yield* api.get(`/v1/agents/${agent.id}`, { token })).body.expiresAt).not.toBeNull()

      expectRefused(
        yield* api.post(`/clients/${other.id}/metadata`, { token: agent.token, json: { name: "stolen" } }),
        401,
        "UNAUTHORIZED"
      )
      expectRefused(yield* api.post(path, { token, json: { name: "by key" } }), 401, "UNAUTHORIZED")
      expect((yield* api.get(`/v1/agents/${other.id}`, { token })).body.name).toBe(other.id)
    }))

  it.scoped("schedules over the agent's token: make, list, cancel; bad input makes none; only its own", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "token-schedules")
      const agent = yield* made(api, token, {})
      const other = yield* made(api, token, {})
      const path = `/clients/${agent.id}/schedules`

      const at = new Date(Date.now() + 7200_000).toISOString()
      const once = yield* api.post(path, { token: agent.token, json: { text: "check in", at } })
      expect(once.status, once.text).toBe(201)
      expect(once.body).toMatchObject({ id: expect.stringMatching(/^sch_/), agent: agent.id, text: "check in" })
      expect(once.body.dueAt).toBeCloseTo(Date.parse(at) / 1000, 0)
      const repeating = yield* api.post(path, {
        token: agent.token,
        json: { code: "return 1", inSeconds: 3600, everySeconds: 86400 }
      })
      expect(repeating.body).toMatchObject({ code: "return 1", everySeconds: 86400, createdAt: expect.any(Number) })

      for (
        const json of [{ text: "a", code: "return 1" }, {}, { text: "a", everySeconds: 30 }, { text: "a", at: "soon" }]
      ) {
        expectRefused(yield* api.post(path, { token: agent.token, json }), 400, "INVALID_REQUEST")
      }
      const listed = yield* api.get(path, { token: agent.token })
      expect(listed.body.map((schedule: any) => schedule.id)).toEqual([repeating.body.id, once.body.id])
      // The same schedules the account sees.
      expect((yield* api.get(`/v1/agents/${agent.id}/schedules`, { token })).body).toHaveLength(2)

      expectRefused(yield* api.get(`/clients/${other.id}/schedules`, { token: agent.token }), 401, "UNAUTHORIZED")
      expectRefused(
        yield* api.delete(`/clients/${other.id}/schedules/${once.body.id}`, { token: agent.token }),
        401,
        "UNAUTHORIZED"
      )
      // Another agent's token cannot cancel it through its own route either.
      expectRefused(
        yield* api.delete(`/clients/${other.id}/schedules/${once.body.id}`, { token: other.token }),
        404,
        "NOT_FOUND"
      )
      const cancelled = yield* api.delete(`${path}/${once.body.id}`, { token: agent.token })
      expect(cancelled.status).toBe(200)
      expect(cancelled.body).toEqual({ id: once.body.id, deleted: true })
      expectRefused(yield* api.delete(`${path}/${once.body.id}`, { token: agent.token }), 404, "NOT_FOUND")
      expect((yield* api.get(path, { token: agent.token })).body.map((schedule: any) => schedule.id))
        .toEqual([repeating.body.id])
    }))

  it.scoped("an input answered at /clients/{id}/inputs/{inputId}, as at .../answer; ?state= filters", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      world.upstream.reset()
      const { api, token } = yield* TestWorld.tenantWithModel(world, "token-inputs")
      const agent = yield* made(api, token, { builtins: ["ask_user"] })
      const other = yield* made(api, token, { builtins: ["ask_user"] })
      const input = yield* asked(world, api, token, agent.id, "call_a")

      const pending = yield* api.get(`/clients/${agent.id}/inputs?state=pending`, { token: agent.token })
      expect(pending.body).toEqual([expect.objectContaining({ id: input.id, state: "pending" })])
      expect((yield* api.get(`/clients/${agent.id}/inputs?state=answered`, { token: agent.token })).body).toEqual([])
      expectRefused(
        yield* api.get(`/clients/${agent.id}/inputs?state=bogus`, { token: agent.token }),
        400,
        "INVALID_REQUEST"
      )

      const body = { action: "accept", content: { answers: { "Which color for call_a?": "blue" } }, from: { id: "u1" } }
      // Not from another agent's token, nor with a body the schema refuses.
      expectRefused(
        yield* api.post(`/clients/${agent.id}/inputs/${input.id}`, { token: other.token, json: body }),
        401,
        "UNAUTHORIZED"
      )
      expectRefused(
        yield* api.post(`/clients/${agent.id}/inputs/${input.id}`, {
          token: agent.token,
          json: { ...body, action: "maybe" }
        }),
        400,
        "INVALID_REQUEST"
      )
      expect((yield* api.get(`/clients/${agent.id}/inputs?state=pending`, { token: agent.token })).body).toHaveLength(1)

      world.upstream.script({ text: "Blue it is." })
      const answered = yield* api.post(`/clients/${agent.id}/inputs/${input.id}`, { token: agent.token, json: body })
      expect(answered.status, answered.text).toBe(200)
      expect(answered.body.input).toMatchObject({ id: input.id, state: "answered" })
      expect(answered.body.request).toMatchObject({ method: "resume", suspension: input.requestId })
      const resumed = yield* Http.settled(api, token, agent.id, answered.body.request.id)
      expect(resumed.outcome.result.reply).toBe("Blue it is.")
      // The same answer again, at either route, is the same answer; another is a conflict.
      const again = yield* api.post(`/clients/${agent.id}/inputs/${input.id}/answer`, {
        token: agent.token,
        json: body
      })
      expect(again.status, again.text).toBe(200)
      expect(again.body.input.answer).toEqual(answered.body.input.answer)
      expectRefused(
        yield* api.post(`/clients/${agent.id}/inputs/${input.id}`, { token: agent.token, json: { action: "cancel" } }),
        409,
        "CONFLICT"
      )
      expectRefused(
        yield* api.post(`/clients/${other.id}/inputs/${input.id}`, { token: other.token, json: body }),
        404,
        "NOT_FOUND"
      )
    }))

  it.scoped("history: the whole of it without a query, a page with limit or before", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      world.upstream.reset()
      const { api, token } = yield* TestWorld.tenantWithModel(world, "token-history")
      const agent = yield* made(api, token, {})
      for (const text of ["one", "two"]) {
        world.upstream.script({ text: `re ${text}` })
        yield* Http.prompted(api, token, agent.id, { text })
      }
      const whole = yield* api.get(`/clients/${agent.id}/history`, { token: agent.token })
      expect(whole.status, whole.text).toBe(200)
      expect(Object.keys(whole.body)).toEqual(["messages"])
      expect(whole.body.messages.map((message: any) => message.role)).toEqual([
        "user",
        "assistant",
        "user",
        "assistant"
      ])
      const page = yield* api.get(`/clients/${agent.id}/history?limit=2`, { token: agent.token })
      expect(page.body).toMatchObject({ next: 2, total: 4 })
      expect(page.body.entries.map((entry: any) => entry.index)).toEqual([2, 3])
      const older = yield* api.get(`/clients/${agent.id}/history?before=2`, { token: agent.token })
      expect(older.body).toMatchObject({ next: null, total: 4 })
      expect(older.body.entries.map((entry: any) => entry.message)).toEqual(whole.body.messages.slice(0, 2))
      // The account's route answers pages only, with or without a query.
      expect((yield* api.get(`/v1/agents/${agent.id}/history`, { token })).body).toMatchObject({ total: 4 })
    }))

  it.scoped("a history past the bound is 413 whole, and still read in pages", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "token-history-large")
      // About 12 MiB of compact JSON, within initialMessages' 16 MB; stored as jsonb, whose text puts a space
      // after each comma, it is about 18 MiB, past the 16 MiB answered whole.
      const padding = new Array(62_000).fill(1)
      const initialMessages = Array.from(
        { length: 100 },
        (_, index) => ({ role: index % 2 === 0 ? "user" : "assistant", content: `m${index}`, padding })
      )
      const agent = yield* made(api, token, { initialMessages })
      const whole = yield* api.get(`/clients/${agent.id}/history`, { token: agent.token })
      expectRefused(whole, 413, "TOO_LARGE")
      expect(whole.body.error).toContain("limit, before")
      const page = yield* api.get(`/clients/${agent.id}/history?limit=2`, { token: agent.token })
      expect(page.status).toBe(200)
      expect(page.body.total).toBe(100)
    }))

  it.scoped("DELETE /clients/{id} deletes the agent; its token is 401 from then on, everywhere", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "token-delete")
      const agent = yield* made(api, token, {})
      const other = yield* made(api, token, {})
      expectRefused(yield* api.delete(`/clients/${other.id}`, { token: agent.token }), 401, "UNAUTHORIZED")
      expect((yield* api.get(`/v1/agents/${other.id}`, { token })).status).toBe(200)

      const deleted = yield* api.delete(`/clients/${agent.id}`, { token: agent.token })
      expect(deleted.status).toBe(200)
      expect(deleted.body).toEqual({ id: agent.id, deleted: true })
      for (
        const [method, path] of [
          ["GET", "/events?poll=1"],
          ["GET", "/events"],
          ["GET", "/state"],
          ["GET", "/history"],
          ["GET", "/schedules"],
          ["POST", "/metadata"],
          ["DELETE", ""]
        ] as const
      ) {
        const response = method === "GET"
          ? yield* api.get(`/clients/${agent.id}${path}`, { token: agent.token })
          : method === "POST"
          ? yield* api.post(`/clients/${agent.id}${path}`, { token: agent.token, json: { name: "x" } })
          : yield* api.delete(`/clients/${agent.id}${path}`, { token: agent.token })
        expectRefused(response, 401, "UNAUTHORIZED")
      }
      expectRefused(yield* api.get(`/v1/agents/${agent.id}`, { token }), 404, "NOT_FOUND")
    }))
})

layer(TestWorld.layer(), { excludeTestServices: true })("inbox and mounts", (it) => {
  it.scoped("GET /v1/inputs: the tenant's inputs newest first, by state, in pages; no other tenant's", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      world.upstream.reset()
      const { api, token } = yield* TestWorld.tenantWithModel(world, "inbox")
      const first = yield* made(api, token, { builtins: ["ask_user"] })
      const second = yield* made(api, token, { builtins: ["ask_user"] })
      const gone = yield* made(api, token, { builtins: ["ask_user"] })
      const older = yield* asked(world, api, token, first.id, "call_1")
      const newer = yield* asked(world, api, token, second.id, "call_2")
      yield* asked(world, api, token, gone.id, "call_3")
      yield* api.delete(`/v1/agents/${gone.id}`, { token })

      const inbox = yield* api.get("/v1/inputs", { token })
      expect(inbox.status, inbox.text).toBe(200)
      expect(inbox.body.map((input: any) => input.id)).toEqual([newer.id, older.id])
      expect(inbox.body[0]).toMatchObject({ agent: second.id, kind: "question", state: "pending" })
      expect(inbox.headers.get("link")).toBeNull()

      // Paged by limit and after, the next page named in the Link header.
      const page = yield* api.get("/v1/inputs?state=pending&limit=1", { token })
      expect(page.body.map((input: any) => input.id)).toEqual([newer.id])
      const link = page.headers.get("link")!
      expect(link).toContain('rel="next"')
      const next = yield* api.get(/^<([^>]+)>/.exec(link)![1]!, { token })
      expect(next.body.map((input: any) => input.id)).toEqual([older.id])
      expect(next.headers.get("link")).toBeNull()

      world.upstream.script({ text: "ok" })
      yield* api.post(`/v1/agents/${first.id}/inputs/${older.id}/answer`, {
        token,
        json: { action: "accept", content: { answers: { "Which color for call_1?": "red" } }, from: { id: "u1" } }
      })
      expect((yield* api.get("/v1/inputs?state=pending", { token })).body.map((input: any) => input.id))
        .toEqual([newer.id])
      expect((yield* api.get("/v1/inputs?state=answered", { token })).body.map((input: any) => input.id))
        .toEqual([older.id])
      expectRefused(yield* api.get("/v1/inputs?state=open", { token }), 400, "INVALID_REQUEST")
      expectRefused(yield* api.get("/v1/inputs?limit=0", { token }), 400, "INVALID_REQUEST")

      const stranger = yield* TestWorld.tenantWithModel(world, "inbox-other")
      expect((yield* stranger.api.get("/v1/inputs", { token: stranger.token })).body).toEqual([])
      expect((yield* stranger.api.get(`/v1/inputs?after=${newer.id}`, { token: stranger.token })).body).toEqual([])
      expectRefused(yield* api.get("/v1/inputs", { token: first.token }), 401, "UNAUTHORIZED")
    }))

  it.scoped("GET and PUT /v1/agents/{id}/mounts: a configure; a volume not the tenant's changes nothing", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "mounts")
      const agent = yield* made(api, token, {})
      const path = `/v1/agents/${agent.id}/mounts`
      const mounts = (yield* api.get(path, { token })).body
      expect(mounts).toEqual([expect.objectContaining({ path: "/workspace", mode: "rw" })])
      expect((yield* api.get(`/v1/agents/${agent.id}`, { token })).body.mounts).toEqual(mounts)

      const volume = (yield* api.post("/v1/volumes", { token, json: { name: "docs" } })).body
      const stranger = yield* TestWorld.tenantWithModel(world, "mounts-other")
      const theirs = (yield* stranger.api.post("/v1/volumes", { token: stranger.token, json: { name: "x" } })).body
      expectRefused(
        yield* api.put(path, {
          token,
          json: { mounts: [...mounts, { volumeId: theirs.id, path: "/theirs", mode: "ro" }] }
        }),
        404,
        "NOT_FOUND"
      )
      for (
        const json of [
          { mounts: [{ volumeId: volume.id, path: "/docs", mode: "rwx" }] },
          { mounts: [{ volumeId: volume.id, path: "docs", mode: "ro" }] },
          { mounts: [...mounts, { volumeId: volume.id, path: "/workspace/docs", mode: "ro" }] },
          { mounts: [], extra: true }
        ]
      ) {
        expectRefused(yield* api.put(path, { token, json }), 400, "INVALID_REQUEST")
      }
      expect((yield* api.get(path, { token })).body).toEqual(mounts)

      const set = yield* api.put(path, {
        token,
        json: { mounts: [...mounts, { volumeId: volume.id, path: "/docs", mode: "ro", notify: true }] }
      })
      expect(set.status, set.text).toBe(200)
      expect(set.body).toEqual([...mounts, { volumeId: volume.id, path: "/docs", mode: "ro", notify: true }])
      expect((yield* api.get(path, { token })).body).toEqual(set.body)

      expectRefused(yield* stranger.api.get(path, { token: stranger.token }), 404, "NOT_FOUND")
      expectRefused(yield* stranger.api.put(path, { token: stranger.token, json: { mounts: [] } }), 404, "NOT_FOUND")
      expectRefused(yield* api.get(path, { token: agent.token }), 401, "UNAUTHORIZED")
      expect((yield* api.get(path, { token })).body).toHaveLength(2)
    }))
})
