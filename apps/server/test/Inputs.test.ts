/**
 * Human input over real HTTP: a turn asks a person (ask_user questions,
 * approvals a definition requires, forms and pages an application tool asks
 * for), its request ends with stopped input_required, and the answers resume
 * it as a request of method resume, once. Every state an input settles in:
 * answered, declined, cancelled, expired, superseded.
 */
import {
  BareApplication,
  FakeUpstream,
  Http,
  McpTestServer,
  TestCluster,
  TestDatabase,
  TestWorld,
  WebhookReceiver
} from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { McpError } from "@modelcontextprotocol/sdk/types.js"
import { Effect } from "effect"

type Api = ReturnType<typeof Http.client>

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    world.upstream.reset()
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    const define = (json: Record<string, unknown>) =>
      Effect.map(api.post("/v1/definitions", { token, json: { model: "fake/m1", ...json } }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body.id as string
      })
    const agent = (json: Record<string, unknown>) =>
      Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1", ...json } }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body as { id: string; token: string }
      })
    return { world, api, token, define, agent }
  })

const prompt = Http.prompted

const answer = (api: Api, token: string, agentId: string, inputId: string, json: Record<string, unknown>) =>
  api.post(`/v1/agents/${agentId}/inputs/${inputId}/answer`, { token, json })

const events = (api: Api, token: string, agentId: string) =>
  Effect.map(
    api.get(`/v1/agents/${agentId}/events?poll=1`, { token, headers: { "last-event-id": "0" } }),
    (response) =>
      (response.body.events as Array<any>).map((entry) => entry.data).filter((frame) => frame.type === "event")
        .map((frame) => frame.event)
  )

/** The tool results the model read in its latest request. */
const lastToolResults = (upstream: FakeUpstream.FakeUpstream) => {
  const body = upstream.requests().at(-1)!.body as any
  return (body.messages as Array<any>).filter((message) => message.role === "tool")
}

const askUser = (id: string, questions: ReadonlyArray<Record<string, unknown>>) => ({
  id,
  name: "ask_user",
  arguments: { questions }
})

layer(TestWorld.layer(), { excludeTestServices: true })("human input", (it) => {
  it.scoped("ask_user: the run stops with the question; the sender's answer resumes it once with the answers", () =>
    Effect.gen(function*() {
      const { agent, api, token, world } = yield* setup("inputs-question")
      const { id } = yield* agent({ builtins: ["ask_user"] })
      world.upstream.script({
        toolCalls: [askUser("call_q", [{
          question: "Which color?",
          options: [{ label: "red" }, { label: "blue" }]
        }])]
      })
      const stopped = yield* prompt(api, token, id, { text: "paint it", from: { id: "u1", name: "Ada" } })
      expect(stopped.state).toBe("completed")
      expect(stopped.stopped, JSON.stringify(stopped)).toBe("input_required")
      const [pending] = stopped.outcome.result.inputs
      expect(pending).toMatchObject({
        kind: "question",
        state: "pending",
        requestId: stopped.id,
        toolCallId: "call_q",
        agent: id,
        message: "Which color?",
        responders: { audience: ["u1"] },
        detail: { questions: [{ question: "Which color?", options: [{ label: "red" }, { label: "blue" }] }] }
      })
      expect(pending.expiresAt - pending.createdAt).toBe(86_400)
      // The model does not see the question answered yet: one request so far.
      expect(world.upstream.requests()).toHaveLength(1)
      const listed = yield* api.get(`/v1/agents/${id}/inputs?state=pending`, { token })
      expect(listed.body.map((input: any) => input.id)).toEqual([pending.id])

      // Someone outside the audience: 403, nothing recorded.
      const outsider = yield* answer(api, token, id, pending.id, {
        action: "accept",
        content: { answers: { "Which color?": "red" } },
        from: { id: "mallory" }
      })
      expect(outsider.status, outsider.text).toBe(403)
      expect(outsider.body.code).toBe("FORBIDDEN")
      // An answer to a question that was not asked: 400, nothing recorded.
      const wrong = yield* answer(api, token, id, pending.id, {
        action: "accept",
        content: { answers: { "Which size?": "L" } },
        from: { id: "u1" }
      })
      expect(wrong.status, wrong.text).toBe(400)
      expect((yield* api.get(`/v1/agents/${id}/inputs?state=pending`, { token })).body).toHaveLength(1)

      world.upstream.script({ text: "Blue it is." })
      const json = {
        action: "accept",
        content: { answers: { "Which color?": "blue" } },
        from: { id: "u1", name: "Ada" }
      }
      const answered = yield* answer(api, token, id, pending.id, json)
      expect(answered.status, answered.text).toBe(200)
      expect(answered.body.input).toMatchObject({
        id: pending.id,
        state: "answered",
        answer: { action: "accept", content: { answers: { "Which color?": "blue" } }, by: { id: "u1", name: "Ada" } }
      })
      const resume = answered.body.request
      expect(resume).toMatchObject({ method: "resume", suspension: stopped.id })
      // The same answer again is the same answer, with the same resume; another one is a conflict.
      const again = yield* answer(api, token, id, pending.id, json)
      expect(again.status, again.text).toBe(200)
      expect(again.body.request.id).toBe(resume.id)
      const other = yield* answer(api, token, id, pending.id, {
        ...json,
        content: { answers: { "Which color?": "red" } }
      })
      expect(other.status, other.text).toBe(409)

      const done = yield* Http.settled(api, token, id, resume.id)
      expect(done.outcome.result.reply).toBe("Blue it is.")
      expect(done.suspension).toBe(stopped.id)
      expect(done.stopped).toBeUndefined()
      const [result] = lastToolResults(world.upstream)
      expect(result.tool_call_id).toBe("call_q")
      expect(result.content).toContain("Ada answered")
      expect(result.content).toContain("blue")
      expect(world.upstream.requests()).toHaveLength(2)

      // History: the question call, its answer, the reply, in order, once.
      const history = (yield* api.get(`/v1/agents/${id}/history`, { token })).body
      expect(history.entries.map((entry: any) => entry.message.role)).toEqual([
        "user",
        "assistant",
        "toolResult",
        "assistant"
      ])
      const types = (yield* events(api, token, id)).map((event) => event.type)
      expect(types).toContain("input_required")
      expect(types).toContain("input_resolved")
      const resolved = (yield* events(api, token, id)).find((event) => event.type === "input_resolved")
      expect(resolved).toMatchObject({ inputId: pending.id, state: "answered", kind: "question" })
      const requests = (yield* api.get(`/v1/agents/${id}/state`, { token })).body.requests as Array<any>
      expect(requests.filter((request) => request.method === "resume")).toHaveLength(1)
    }))

  it.scoped("approval: the call waits for an approver; accepted it runs once with the shown arguments, declined never", () =>
    Effect.gen(function*() {
      const { agent, api, define, token, world } = yield* setup("inputs-approval")
      const definition = yield* define({
        name: "careful",
        builtins: ["schedule"],
        humanInput: { approvals: [{ tool: "schedule", source: "builtins" }], approvers: ["boss"] }
      })
      const { id } = yield* agent({ definition, model: undefined })
      const args = { action: "create", text: "water the plants", inSeconds: 3600 }
      world.upstream.script({ toolCalls: [{ id: "call_s1", name: "schedule", arguments: args }] })
      const stopped = yield* prompt(api, token, id, { text: "remind me", from: { id: "u1" } })
      const [approval] = stopped.outcome.result.inputs
      expect(approval).toMatchObject({
        kind: "approval",
        detail: {
          tool: "schedule",
          source: "builtins",
          arguments: args,
          argumentsHash: expect.stringMatching(/^sha256:/)
        }
      })
      // Nothing ran before the approval.
      expect((yield* api.get(`/v1/agents/${id}/schedules`, { token })).body).toHaveLength(0)
      // An approval naming other arguments is refused.
      const stale = yield* answer(api, token, id, approval.id, {
        action: "accept",
        content: { argumentsHash: "sha256:00" },
        from: { id: "boss" }
      })
      expect(stale.status, stale.text).toBe(400)

      world.upstream.script({ text: "Scheduled." })
      const approved = yield* answer(api, token, id, approval.id, {
        action: "accept",
        content: { argumentsHash: approval.detail.argumentsHash },
        from: { id: "boss" }
      })
      expect(approved.status, approved.text).toBe(200)
      const done = yield* Http.settled(api, token, id, approved.body.request.id)
      expect(done.outcome.result.reply).toBe("Scheduled.")
      expect(done.outcome.result.toolCalls).toEqual([{ tool: "schedule", toolCallId: "call_s1", ok: true }])
      const schedules = (yield* api.get(`/v1/agents/${id}/schedules`, { token })).body
      expect(schedules.map((schedule: any) => schedule.text)).toEqual(["water the plants"])

      // Declined with a reason: the model reads it, and the call never runs.
      world.upstream.script({ toolCalls: [{ id: "call_s2", name: "schedule", arguments: { ...args, text: "again" } }] })
      const second = yield* prompt(api, token, id, { text: "and again", from: { id: "u1" } })
      const [next] = second.outcome.result.inputs
      world.upstream.script({ text: "Understood, not scheduled." })
      const declined = yield* answer(api, token, id, next.id, {
        action: "decline",
        content: { reason: "one is enough" },
        from: { id: "u1" }
      })
      expect(declined.body.input.state).toBe("declined")
      const after = yield* Http.settled(api, token, id, declined.body.request.id)
      expect(after.outcome.result.toolCalls).toEqual([
        { tool: "schedule", toolCallId: "call_s2", ok: false, code: "declined" }
      ])
      expect(lastToolResults(world.upstream).at(-1).content).toContain("one is enough")
      expect((yield* api.get(`/v1/agents/${id}/schedules`, { token })).body).toHaveLength(1)
    }))

  it.scoped("a batch mixing accept, decline and cancel settles all at once and resumes once", () =>
    Effect.gen(function*() {
      const { agent, api, define, token, world } = yield* setup("inputs-batch")
      const definition = yield* define({
        name: "batch",
        builtins: ["ask_user", "schedule"],
        humanInput: { approvals: [{ tool: "schedule" }] }
      })
      const { id } = yield* agent({ definition, model: undefined })
      world.upstream.script({
        toolCalls: [
          askUser("call_a", [{ question: "Name?" }]),
          askUser("call_b", [{ question: "Age?" }]),
          { id: "call_c", name: "schedule", arguments: { action: "list" } }
        ]
      })
      const stopped = yield* prompt(api, token, id, { text: "go", actor: "u9" })
      const inputs = stopped.outcome.result.inputs as Array<any>
      expect(inputs.map((input) => [input.toolCallId, input.kind])).toEqual([
        ["call_a", "question"],
        ["call_b", "question"],
        ["call_c", "approval"]
      ])
      const byCall = (toolCallId: string) => inputs.find((input) => input.toolCallId === toolCallId).id
      // One bad answer refuses the whole batch: nothing is recorded.
      const refused = yield* api.post(`/v1/agents/${id}/answers`, {
        token,
        json: {
          answers: [
            { id: byCall("call_a"), action: "accept", content: { answers: { "Name?": "Ada" } }, from: { id: "u9" } },
            { id: byCall("call_b"), action: "decline", from: { id: "stranger" } }
          ]
        }
      })
      expect(refused.status, refused.text).toBe(403)
      expect((yield* api.get(`/v1/agents/${id}/inputs?state=pending`, { token })).body).toHaveLength(3)

      world.upstream.script({ text: "Noted." })
      const all = yield* api.post(`/v1/agents/${id}/answers`, {
        token,
        json: {
          answers: [
            { id: byCall("call_a"), action: "accept", content: { answers: { "Name?": "Ada" } }, from: { id: "u9" } },
            { id: byCall("call_b"), action: "decline", from: { id: "u9" } },
            { id: byCall("call_c"), action: "cancel" }
          ]
        }
      })
      expect(all.status, all.text).toBe(200)
      expect(all.body.inputs.map((input: any) => input.state)).toEqual(["answered", "declined", "cancelled"])
      expect(all.body.requests).toHaveLength(1)
      const done = yield* Http.settled(api, token, id, all.body.requests[0].id)
      expect(done.outcome.result.reply).toBe("Noted.")
      const results = lastToolResults(world.upstream)
      expect(results.map((result) => result.tool_call_id)).toEqual(["call_a", "call_b", "call_c"])
      expect(results[0].content).toContain("Ada")
      expect(results[1].content).toContain("declined")
      expect(results[2].content).toContain("cancelled")
      // An answer without `from` is the account's own, recorded as such.
      const inputsNow = (yield* api.get(`/v1/agents/${id}/inputs`, { token })).body as Array<any>
      expect(inputsNow.find((input) => input.toolCallId === "call_c").answer.by).toMatchObject({ via: "token" })
    }))

  it.scoped("expired: no answer within the definition's lifetime settles the input expired and resumes", () =>
    Effect.gen(function*() {
      const { agent, api, define, token, world } = yield* setup("inputs-expiry")
      const definition = yield* define({ name: "quick", builtins: ["ask_user"], humanInput: { expiresInSeconds: 5 } })
      const { id } = yield* agent({ definition, model: undefined })
      world.upstream.script({ toolCalls: [askUser("call_e", [{ question: "Still there?" }])] })
      const stopped = yield* prompt(api, token, id, { text: "hello" })
      const [pending] = stopped.outcome.result.inputs
      expect(pending.expiresAt - pending.createdAt).toBe(5)
      world.upstream.script({ text: "No answer; moving on." })
      yield* Http.waitFor(
        () =>
          Effect.map(
            api.get(`/v1/agents/${id}/requests/resume_${stopped.id}`, { token }),
            (response) => response.status === 200 && response.body.state === "completed"
          ),
        "the expiry to resume the run",
        20_000
      )
      const inputs = (yield* api.get(`/v1/agents/${id}/inputs`, { token })).body
      expect(inputs[0].state).toBe("expired")
      const late = yield* answer(api, token, id, pending.id, {
        action: "accept",
        content: { answers: { "Still there?": "yes" } }
      })
      expect(late.status, late.text).toBe(409)
      const [result] = lastToolResults(world.upstream)
      expect(result.content).toContain("expired")
    }))

  it.scoped("superseded: a new prompt while inputs wait settles them superseded and its turn goes on; no resume", () =>
    Effect.gen(function*() {
      const { agent, api, token, world } = yield* setup("inputs-supersede")
      const { id } = yield* agent({ builtins: ["ask_user"] })
      world.upstream.script({ toolCalls: [askUser("call_x", [{ question: "Which one?" }])] })
      const stopped = yield* prompt(api, token, id, { text: "pick one", from: { id: "u1" } })
      const [pending] = stopped.outcome.result.inputs
      world.upstream.script({ text: "Fine, the second." })
      const next = yield* prompt(api, token, id, { text: "never mind, the second", from: { id: "u1" } })
      expect(next.outcome.result.reply).toBe("Fine, the second.")
      const body = world.upstream.requests().at(-1)!.body as any
      const roles = (body.messages as Array<any>).filter((message) => message.role !== "system").map((message) =>
        message.role
      )
      expect(roles).toEqual(["user", "assistant", "tool", "user"])
      expect(lastToolResults(world.upstream)[0].content).toContain("new message")
      const [input] = (yield* api.get(`/v1/agents/${id}/inputs`, { token })).body
      expect(input).toMatchObject({ id: pending.id, state: "superseded" })
      const late = yield* answer(api, token, id, pending.id, {
        action: "accept",
        content: { answers: { "Which one?": "first" } },
        from: { id: "u1" }
      })
      expect(late.status, late.text).toBe(409)
      expect((yield* api.get(`/v1/agents/${id}/requests/resume_${stopped.id}`, { token })).status).toBe(404)
    }))

  it.scoped("abort while a question waits: its inputs are cancelled, told and sent as webhooks; no answer resumes it", () =>
    Effect.gen(function*() {
      const { agent, api, token, world } = yield* setup("inputs-abort")
      const receiver = yield* WebhookReceiver.start
      const hook = yield* api.post("/v1/webhooks", {
        token,
        json: { url: `${receiver.url}/inputs`, events: ["input.requested", "input.resolved"] }
      })
      expect(hook.status, hook.text).toBe(201)
      const { id } = yield* agent({ builtins: ["ask_user"] })
      world.upstream.script({
        toolCalls: [askUser("call_a", [{ question: "Which one?" }]), askUser("call_b", [{ question: "Why?" }])]
      })
      const stopped = yield* prompt(api, token, id, { text: "ask me twice", from: { id: "u1" } })
      const asked = stopped.outcome.result.inputs as Array<{ id: string }>
      expect(asked).toHaveLength(2)

      const abort = yield* api.post(`/v1/agents/${id}/abort`, { token, json: {} })
      expect(abort.status, abort.text).toBe(200)
      expect(abort.body.outcome.result).toEqual({
        cancelled: [],
        aborted: null,
        inputs: asked.map((input) => input.id).sort()
      })
      const listed = (yield* api.get(`/v1/agents/${id}/inputs`, { token })).body as Array<any>
      expect(listed.map((input) => input.state)).toEqual(["cancelled", "cancelled"])
      const resolved = (yield* events(api, token, id)).filter((event) => event.type === "input_resolved")
      expect(resolved.map((event) => [event.inputId, event.state]).sort()).toEqual(
        asked.map((input) => [input.id, "cancelled"]).sort()
      )

      // An answer after the abort resumes nothing.
      const late = yield* answer(api, token, id, asked[0]!.id, {
        action: "accept",
        content: { answers: { "Which one?": "first" } },
        from: { id: "u1" }
      })
      expect(late.status, late.text).toBe(409)
      expect(late.body.error).toContain("already cancelled")
      expect((yield* api.get(`/v1/agents/${id}/requests/resume_${stopped.id}`, { token })).status).toBe(404)

      // The webhooks say so, once per input.
      const deliveries = yield* receiver.waitFor(
        "/inputs",
        (received) => received.filter((delivery) => delivery.event.type === "input.resolved").length >= 2
      )
      expect(
        deliveries.filter((delivery) => delivery.event.type === "input.resolved").map((delivery) => delivery.event.data)
          .sort((a: any, b: any) => a.inputId.localeCompare(b.inputId))
      ).toEqual(
        asked.map((input) => ({ agentId: id, requestId: stopped.id, inputId: input.id, state: "cancelled" }))
          .sort((a, b) => a.inputId.localeCompare(b.inputId))
      )

      // The next prompt's model reads that the calls were cancelled, and the agent goes on.
      world.upstream.script({ text: "Understood." })
      const next = yield* prompt(api, token, id, { text: "forget it", from: { id: "u1" } })
      expect(next.outcome.result.reply).toBe("Understood.")
      expect(lastToolResults(world.upstream).map((message) => message.content).join(" ")).toContain("cancelled")
    }))

  it.scoped("form and url from an application tool: the answer goes back to the tool, which is called again once", () =>
    Effect.gen(function*() {
      const { agent, api, token, world } = yield* setup("inputs-form")
      const made = yield* agent({})
      const calls: Array<any> = []
      const app = yield* BareApplication.connected({
        base: world.node.rest,
        agentId: made.id,
        token: made.token,
        tools: [
          { name: "book", description: "books a room", inputSchema: { type: "object", properties: {} } },
          { name: "login", description: "signs in", inputSchema: { type: "object", properties: {} } }
        ],
        answer: (message) => {
          calls.push(message)
          const answered = message.params._meta["agent-runtime/answer"]
          if (message.params.name === "book") {
            return answered === undefined
              ? BareApplication.rpcError(-32042, "input required", {
                elicitations: [{
                  mode: "form",
                  message: "How many guests?",
                  requestedSchema: {
                    type: "object",
                    properties: { guests: { type: "integer", minimum: 1 } },
                    required: ["guests"]
                  }
                }]
              })
              : { content: [{ type: "text", text: `booked for ${answered.content.guests}` }] }
          }
          return answered === undefined
            ? BareApplication.rpcError(-32042, "input required", {
              elicitations: [{ mode: "url", message: "Sign in first", url: "https://login.example.com/start?x=1" }]
            })
            : { content: [{ type: "text", text: "signed in" }] }
        }
      })
      yield* Http.waitFor(
        () =>
          Effect.map(
            api.get(`/v1/agents/${made.id}`, { token }),
            (detail) => detail.body.connected === true && detail.body.tools.length === 2
          ),
        "the application's tools to be listed"
      )
      world.upstream.script({
        toolCalls: [{ id: "call_f", name: "book", arguments: {} }, { id: "call_u", name: "login", arguments: {} }]
      })
      const stopped = yield* prompt(api, token, made.id, { text: "book it", from: { id: "u1" } })
      expect(stopped.stopped, JSON.stringify(stopped)).toBe("input_required")
      const [form, url] = stopped.outcome.result.inputs
      expect(form).toMatchObject({
        kind: "form",
        message: "How many guests?",
        detail: { requestedSchema: { required: ["guests"] } }
      })
      expect(url).toMatchObject({
        kind: "url",
        detail: { url: "https://login.example.com/start?x=1", origin: "https://login.example.com" }
      })
      // The form's answer is checked against its schema.
      const bad = yield* answer(api, token, made.id, form.id, { action: "accept", content: { guests: 0 } })
      expect(bad.status, bad.text).toBe(400)
      const first = yield* answer(api, token, made.id, form.id, { action: "accept", content: { guests: 3 } })
      expect(first.body.request).toBeNull()
      world.upstream.script({ text: "Booked and signed in." })
      const second = yield* answer(api, token, made.id, url.id, { action: "accept" })
      const done = yield* Http.settled(api, token, made.id, second.body.request.id)
      expect(done.outcome.result.reply).toBe("Booked and signed in.")
      // Each tool was called twice: first it asked, then it got its answer; never a third time.
      // (The two run in parallel, so each pair may come in either order.)
      expect(calls.slice(0, 2).map((call) => call.params.name).sort()).toEqual(["book", "login"])
      expect(calls.slice(2).map((call) => call.params.name).sort()).toEqual(["book", "login"])
      const retried = calls.slice(2).find((call) => call.params.name === "book")
      expect(retried.params._meta["agent-runtime/answer"]).toEqual({
        inputId: form.id,
        action: "accept",
        content: { guests: 3 }
      })
      expect(retried.params._meta["agent-runtime/toolCallId"]).toBe("call_f")
      const results = lastToolResults(world.upstream)
      expect(results.map((result) => result.content)).toEqual(["booked for 3", "signed in"])
      yield* app.close
    }))

  it.scoped("form from a remote MCP server: its -32042 error asks, the answer reaches it in the call made again", () =>
    Effect.gen(function*() {
      const { agent, api, define, token, world } = yield* setup("inputs-mcp-form")
      const server = yield* McpTestServer.start()
      const answers: Array<unknown> = []
      yield* server.addTool({
        name: "transfer",
        description: "moves money",
        inputSchema: { type: "object", properties: {} },
        run: async (_args, context) => {
          const answered = context.meta["agent-runtime/answer"] as { content?: { confirm?: string } } | undefined
          answers.push(answered)
          if (answered === undefined) {
            throw new McpError(-32042, "confirmation needed", {
              elicitations: [{
                mode: "form",
                message: "Type the amount to confirm",
                requestedSchema: { type: "object", properties: { confirm: { type: "string" } }, required: ["confirm"] }
              }]
            })
          }
          return { content: [{ type: "text", text: `transferred ${answered.content?.confirm}` }] }
        }
      })
      const definition = yield* define({
        name: "bank",
        toolSources: [{ kind: "mcp", name: "bank", url: server.url, tools: { include: ["transfer"] } }]
      })
      const { id } = yield* agent({ definition, model: undefined })
      world.upstream.script({ toolCalls: [{ id: "call_t", name: "transfer", arguments: {} }] })
      const stopped = yield* prompt(api, token, id, { text: "send 10", from: { id: "u1" } })
      expect(stopped.stopped, JSON.stringify(stopped)).toBe("input_required")
      const [form] = stopped.outcome.result.inputs
      expect(form).toMatchObject({ kind: "form", message: "Type the amount to confirm", toolCallId: "call_t" })
      world.upstream.script({ text: "Done." })
      const answered = yield* answer(api, token, id, form.id, {
        action: "accept",
        content: { confirm: "10" },
        from: { id: "u1" }
      })
      const done = yield* Http.settled(api, token, id, answered.body.request.id)
      expect(done.outcome.result.reply).toBe("Done.")
      expect(server.count("transfer")).toBe(2)
      expect(answers[1]).toEqual({ inputId: form.id, action: "accept", content: { confirm: "10" } })
      expect(lastToolResults(world.upstream).map((result) => result.content)).toEqual(["transferred 10"])
    }))

  it.scoped("the agent's own token answers on /clients; another tenant cannot see or answer the inputs", () =>
    Effect.gen(function*() {
      const { agent, api, token, world } = yield* setup("inputs-clients")
      const made = yield* agent({ builtins: ["ask_user"] })
      world.upstream.script({ toolCalls: [askUser("call_c", [{ question: "Ok?" }])] })
      const stopped = yield* prompt(api, token, made.id, { text: "ask me" })
      const [pending] = stopped.outcome.result.inputs
      const other = yield* TestWorld.tenantWithModel(world, "inputs-clients-other")
      expect((yield* api.get(`/v1/agents/${made.id}/inputs`, { token: other.token })).status).toBe(404)
      const foreign = yield* answer(api, other.token, made.id, pending.id, { action: "cancel" })
      expect(foreign.status).toBe(404)
      const listed = yield* api.get(`/clients/${made.id}/inputs`, { token: made.token })
      expect(listed.body.map((input: any) => input.id)).toEqual([pending.id])
      world.upstream.script({ text: "ok" })
      const answered = yield* api.post(`/clients/${made.id}/inputs/${pending.id}/answer`, {
        token: made.token,
        json: { action: "accept", content: { answers: { "Ok?": "yes" } } }
      })
      expect(answered.status, answered.text).toBe(200)
      expect(answered.body.input.answer.by).toEqual({ via: "agent" })
      yield* Http.settled(api, token, made.id, answered.body.request.id)
    }))
})

/** Sends until an answer other than 5xx comes, through any live node, as a client retrying a lost reply would. */
const retrying = (bases: ReadonlyArray<string>, path: string, token: string, json: unknown) =>
  Effect.gen(function*() {
    for (let attempt = 0; attempt < 120; attempt++) {
      const base = bases[attempt % bases.length]!
      const sent = yield* Effect.either(Http.attempt(base, "POST", path, { token, json }, 8_000))
      if (sent._tag === "Right" && sent.right.status < 500) return sent.right
      yield* Effect.sleep("250 millis")
    }
    return yield* Effect.die(new Error(`${path} got no answer`))
  })

it.scopedLive(
  "two answers at two nodes at the moment the owner is killed -9: every answer lands and the turn resumes once",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({ size: 3, databaseUrl, env: { ALLOW_PRIVATE_URLS: "true" } })
      const { api, token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "in-kill")
      const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", builtins: ["ask_user"] } }))
        .body.id as string
      upstream.script({
        toolCalls: [askUser("call_1", [{ question: "First?" }]), askUser("call_2", [{ question: "Second?" }])]
      })
      const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "ask twice", requestId: "p1", from: { id: "u1" } }
      })
      expect(accepted.status, accepted.text).toBe(202)
      const stopped = yield* Http.settled(api, token, agentId, "p1")
      const [first, second] = stopped.outcome.result.inputs as Array<any>
      upstream.script({ text: "both answered" })

      const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${agentId}'`)
      const owner = cluster.members.findIndex((member) => member.runnerAddress === row?.owner)
      expect(owner).toBeGreaterThanOrEqual(0)
      const others = [1, 2].map((step) => cluster.members[(owner + step) % 3]!.node.rest)
      const answerAt = (node: number, input: any, text: string) =>
        retrying([others[node]!, others[1 - node]!], `/v1/agents/${agentId}/inputs/${input.id}/answer`, token, {
          action: "accept",
          content: { answers: { [input.message]: text } },
          from: { id: "u1" }
        })
      const [a, b] = yield* Effect.all([
        answerAt(0, first, "one"),
        answerAt(1, second, "two"),
        Effect.zipRight(Effect.sleep("5 millis"), cluster.stop(owner, "SIGKILL"))
      ], { concurrency: "unbounded" })
      expect(a.status, a.text).toBe(200)
      expect(b.status, b.text).toBe(200)
      // Whichever settled the last input names the resume; the other may have come first (then null).
      const resumeId = `resume_${stopped.id}`
      expect([a.body.request?.id, b.body.request?.id]).toContain(resumeId)

      const survivor = Http.client(others[0]!)
      const done = yield* Http.settled(survivor, token, agentId, resumeId)
      expect(done).toMatchObject({ method: "resume", suspension: "p1", state: "completed" })
      expect(done.outcome.result.reply).toBe("both answered")
      const resumes = yield* TestDatabase.query(
        databaseUrl,
        `SELECT id FROM agent_requests WHERE agent_id = '${agentId}' AND method = 'resume'`
      )
      expect(resumes).toEqual([{ id: resumeId }])
      // The model was asked once to start and once to go on: the turn resumed exactly once.
      expect(upstream.requests()).toHaveLength(2)
      const results = ((upstream.requests().at(-1)!.body as any).messages as Array<any>).filter((message) =>
        message.role === "tool"
      )
      expect(results.map((result) => result.tool_call_id)).toEqual(["call_1", "call_2"])
      expect(results[0].content).toContain("one")
      expect(results[1].content).toContain("two")
      const inputs = (yield* survivor.get(`/v1/agents/${agentId}/inputs`, { token })).body as Array<any>
      expect(inputs.map((input) => input.state)).toEqual(["answered", "answered"])
      const history = (yield* survivor.get(`/v1/agents/${agentId}/history`, { token })).body.entries as Array<any>
      expect(history.map((entry) => entry.message.role)).toEqual([
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant"
      ])
    }),
  { timeout: 120_000 }
)
