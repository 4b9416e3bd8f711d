/**
 * An application tool asking a person the way camelRun's client does, over
 * real HTTP: its tools/call answers with a result `{resultType:
 * "input_required", inputRequests, requestState?}` (never an error), and once
 * the person answered it is called again, the same name and arguments, with
 * `inputResponses` keyed as it asked and its `requestState` echoed; an
 * approval it asks for (or declares with `agent-runtime/needsApproval`) is
 * named in the identity claims of the call made after it. Each answer makes
 * exactly one call, also when its POST is retried.
 */
import { BareApplication, Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

type Api = ReturnType<typeof Http.client>

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    world.upstream.reset()
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    const made = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body as {
      id: string
      token: string
    }
    return { world, api, token, made }
  })

/** Connects a camelRun-style application serving `tools`, each call answered by `answer`; waits until served. */
const application = (
  api: Api,
  token: string,
  world: TestWorld.World,
  made: { id: string; token: string },
  tools: ReadonlyArray<Record<string, unknown>>,
  answer: (message: any) => unknown
) =>
  Effect.gen(function*() {
    const calls: Array<any> = []
    const app = yield* BareApplication.connected({
      base: world.node.rest,
      agentId: made.id,
      token: made.token,
      tools,
      answer: (message) => {
        calls.push(message)
        return answer(message)
      }
    })
    yield* Http.waitFor(
      () =>
        Effect.map(api.get(`/v1/agents/${made.id}`, { token }), (detail) =>
          detail.body.connected === true && detail.body.tools.length === tools.length),
      "the application's tools to be listed"
    )
    return { app, calls }
  })

const tool = (name: string, meta?: Record<string, unknown>) => ({
  name,
  description: name,
  inputSchema: { type: "object", properties: { what: { type: "string" } } },
  ...(meta === undefined ? {} : { _meta: meta })
})

const form = (message: string, requestedSchema: Record<string, unknown>) => ({
  method: "elicitation/create",
  params: { mode: "form", message, requestedSchema }
})

const done = (text: string) => ({ content: [{ type: "text", text }] })

const answerInput = (api: Api, token: string, agentId: string, inputId: string, json: Record<string, unknown>) =>
  api.post(`/v1/agents/${agentId}/inputs/${inputId}/answer`, { token, json })

/** The tool results the model read in its latest request. */
const lastToolResults = (world: TestWorld.World) =>
  ((world.upstream.requests().at(-1)!.body as any).messages as Array<any>).filter((message) => message.role === "tool")

const guests = {
  type: "object",
  properties: { guests: { type: "integer", minimum: 1 } },
  required: ["guests"]
}

layer(TestWorld.layer(), { excludeTestServices: true, timeout: 120_000 })("camelRun's input_required result", (it) => {
  it.scoped("a form: answered (the POST retried), the tool is called once more with inputResponses", () =>
    Effect.gen(function*() {
      const { api, made, token, world } = yield* setup("camel-form")
      const { app, calls } = yield* application(api, token, world, made, [tool("book")], (message) => {
        const response = message.params.inputResponses?.input_1
        return response === undefined
          ? { resultType: "input_required", inputRequests: { input_1: form("How many guests?", guests) } }
          : done(`booked for ${response.content.guests}`)
      })
      world.upstream.script({ toolCalls: [{ id: "call_b", name: "book", arguments: { what: "room" } }] })
      const stopped = yield* Http.prompted(api, token, made.id, { text: "book it", from: { id: "u1" } })
      expect(stopped.stopped, JSON.stringify(stopped)).toBe("input_required")
      const [input] = stopped.outcome.result.inputs
      // What the runtime keeps for the tool is never shown.
      expect(input).toMatchObject({ kind: "form", message: "How many guests?", detail: { requestedSchema: guests } })
      expect(Object.keys(input.detail)).toEqual(["requestedSchema"])
      const events = (yield* api.get(`/v1/agents/${made.id}/events?poll=1`, {
        token,
        headers: { "last-event-id": "0" }
      })).body.events as Array<any>
      const asked = events.map((entry) => entry.data.event).find((event) => event?.type === "input_required")
      expect(asked.input.detail).toEqual({ requestedSchema: guests })

      world.upstream.script({ text: "Booked." })
      const answered = yield* answerInput(api, token, made.id, input.id, { action: "accept", content: { guests: 2 } })
      expect(answered.status, answered.text).toBe(200)
      // The same answer again (a retry whose answer was lost) is taken without effect.
      const again = yield* answerInput(api, token, made.id, input.id, { action: "accept", content: { guests: 2 } })
      expect(again.status, again.text).toBe(200)
      const settled = yield* Http.settled(api, token, made.id, answered.body.request.id)
      expect(settled.outcome.result.reply).toBe("Booked.")
      expect(lastToolResults(world).map((result) => result.content)).toEqual(["booked for 2"])
      yield* Effect.sleep("500 millis")
      expect(calls).toHaveLength(2)
      const second = calls[1].params
      expect(second.name).toBe("book")
      expect(second.arguments).toEqual({ what: "room" })
      expect(second.inputResponses).toEqual({ input_1: { action: "accept", content: { guests: 2 } } })
      expect(second).not.toHaveProperty("requestState")
      expect(second._meta).not.toHaveProperty("agent-runtime/answer")
      expect(second._meta["agent-runtime/toolCallId"]).toBe("call_b")
      yield* app.close
    }))

  it.scoped("two asks in one call: input_1, then input_2 with requestState, each answered once", () =>
    Effect.gen(function*() {
      const { api, made, token, world } = yield* setup("camel-two")
      const state = Buffer.from(JSON.stringify({ input_1: { action: "accept", content: { guests: 3 } } }))
        .toString("base64")
      const dates = { type: "object", properties: { date: { type: "string" } }, required: ["date"] }
      const { app, calls } = yield* application(api, token, world, made, [tool("plan")], (message) => {
        const { inputResponses, requestState } = message.params
        if (inputResponses === undefined) {
          return { resultType: "input_required", inputRequests: { input_1: form("How many guests?", guests) } }
        }
        if (inputResponses.input_1 !== undefined) {
          return {
            resultType: "input_required",
            inputRequests: { input_2: form("Which day?", dates) },
            requestState: state
          }
        }
        const earlier = JSON.parse(Buffer.from(requestState, "base64").toString())
        return done(`${earlier.input_1.content.guests} guests on ${inputResponses.input_2.content.date}`)
      })
      world.upstream.script({ toolCalls: [{ id: "call_p", name: "plan", arguments: { what: "dinner" } }] })
      const stopped = yield* Http.prompted(api, token, made.id, { text: "plan it", from: { id: "u1" } })
      const [first] = stopped.outcome.result.inputs
      expect(first).toMatchObject({ kind: "form", message: "How many guests?" })
      const answered = yield* answerInput(api, token, made.id, first.id, { action: "accept", content: { guests: 3 } })
      // Called again, the tool asks the next thing: a new input, and the run waits again.
      const waiting = yield* Http.settled(api, token, made.id, answered.body.request.id)
      expect(waiting.stopped, JSON.stringify(waiting)).toBe("input_required")
      const [second] = waiting.outcome.result.inputs
      expect(second).toMatchObject({ kind: "form", message: "Which day?", toolCallId: "call_p" })
      expect(second.id).not.toBe(first.id)
      world.upstream.script({ text: "Planned." })
      const last = yield* answerInput(api, token, made.id, second.id, { action: "accept", content: { date: "Friday" } })
      const settled = yield* Http.settled(api, token, made.id, last.body.request.id)
      expect(settled.outcome.result.reply).toBe("Planned.")
      expect(lastToolResults(world).map((result) => result.content)).toEqual(["3 guests on Friday"])
      expect(calls).toHaveLength(3)
      expect(calls[1].params).not.toHaveProperty("requestState")
      expect(calls[2].params.inputResponses).toEqual({ input_2: { action: "accept", content: { date: "Friday" } } })
      expect(calls[2].params.requestState).toBe(state)
      expect(calls.map((call) => call.params.arguments)).toEqual([{ what: "dinner" }, { what: "dinner" }, {
        what: "dinner"
      }])
      yield* app.close
    }))

  it.scoped("a url: opened, the tool is called again; a declined form is told to the model, not called again", () =>
    Effect.gen(function*() {
      const { api, made, token, world } = yield* setup("camel-url")
      const { app, calls } = yield* application(api, token, world, made, [tool("login"), tool("ask")], (message) => {
        if (message.params.inputResponses !== undefined) return done(`${message.params.name} went on`)
        return message.params.name === "login"
          ? {
            resultType: "input_required",
            inputRequests: {
              input_1: {
                method: "elicitation/create",
                params: {
                  mode: "url",
                  message: "Sign in first",
                  url: "https://login.example.com/start",
                  elicitationId: `${message.id}-1`
                }
              }
            }
          }
          : {
            resultType: "input_required",
            inputRequests: { input_1: form("Sure?", { type: "object", properties: {} }) }
          }
      })
      world.upstream.script({
        toolCalls: [{ id: "call_l", name: "login", arguments: {} }, { id: "call_a", name: "ask", arguments: {} }]
      })
      const stopped = yield* Http.prompted(api, token, made.id, { text: "go", from: { id: "u1" } })
      const [url, confirm] = stopped.outcome.result.inputs
      expect(url).toMatchObject({
        kind: "url",
        message: "Sign in first",
        detail: { url: "https://login.example.com/start", origin: "https://login.example.com" }
      })
      expect(confirm).toMatchObject({ kind: "form", detail: { requestedSchema: { type: "object", properties: {} } } })
      yield* answerInput(api, token, made.id, url.id, { action: "accept" })
      world.upstream.script({ text: "Signed in; not confirmed." })
      const last = yield* answerInput(api, token, made.id, confirm.id, { action: "decline" })
      const settled = yield* Http.settled(api, token, made.id, last.body.request.id)
      expect(settled.outcome.result.reply).toBe("Signed in; not confirmed.")
      const results = lastToolResults(world).map((result) => result.content)
      expect(results[0]).toBe("login went on")
      expect(results[1]).toContain("declined")
      expect(calls.map((call) => call.params.name).sort()).toEqual(["ask", "login", "login"])
      const again = calls.find((call) => call.params.inputResponses !== undefined)
      expect(again.params.name).toBe("login")
      expect(again.params.inputResponses).toEqual({ input_1: { action: "accept" } })
      yield* app.close
    }))

  it.scoped("needsApproval: asked before the first call; approved, that call names the approval; declined, none", () =>
    Effect.gen(function*() {
      const { api, made, token, world } = yield* setup("camel-approval")
      const { app, calls } = yield* application(
        api,
        token,
        world,
        made,
        [tool("delete", { "agent-runtime/needsApproval": true, "agent-runtime/timeoutMs": 60_000 })],
        (message) => done(`deleted ${message.params.arguments.what}`)
      )
      world.upstream.script({ toolCalls: [{ id: "call_d1", name: "delete", arguments: { what: "a" } }] })
      const stopped = yield* Http.prompted(api, token, made.id, { text: "delete a", from: { id: "u1" } })
      const [approval] = stopped.outcome.result.inputs
      expect(approval).toMatchObject({
        kind: "approval",
        detail: { tool: "delete", source: "application", arguments: { what: "a" } }
      })
      expect(approval.detail.argumentsHash).toMatch(/^sha256:/)
      expect(calls).toHaveLength(0)
      world.upstream.script({ text: "Deleted a." })
      const answered = yield* answerInput(api, token, made.id, approval.id, {
        action: "accept",
        content: { argumentsHash: approval.detail.argumentsHash }
      })
      const settled = yield* Http.settled(api, token, made.id, answered.body.request.id)
      expect(settled.outcome.result.reply).toBe("Deleted a.")
      expect(calls).toHaveLength(1)
      const { _meta: meta, ...params } = calls[0].params
      expect(params).toEqual({ name: "delete", arguments: { what: "a" } })
      const identity = meta["agent-runtime/identity"]
      expect(identity).toMatchObject({ agent: made.id, origin: expect.any(String), token: expect.any(String) })
      expect(identity.approval).toMatchObject({ input: approval.id, at: expect.any(Number) })
      expect(identity.approval.by).toBeDefined()
      // The tool's own timeoutMs is its deadline.
      expect(meta["agent-runtime/deadline"] - Date.now()).toBeGreaterThan(30_000)

      world.upstream.script({ toolCalls: [{ id: "call_d2", name: "delete", arguments: { what: "b" } }] })
      const asked = yield* Http.prompted(api, token, made.id, { text: "delete b", from: { id: "u1" } })
      const [second] = asked.outcome.result.inputs
      world.upstream.script({ text: "Not deleted." })
      const declined = yield* answerInput(api, token, made.id, second.id, { action: "decline" })
      const ended = yield* Http.settled(api, token, made.id, declined.body.request.id)
      expect(ended.outcome.result.reply).toBe("Not deleted.")
      expect(lastToolResults(world).at(-1).content).toContain("did not approve")
      expect(calls).toHaveLength(1)
      yield* app.close
    }))

  it.scoped("an approval the tool asks for: approved, it is called again with the approval and inputResponses", () =>
    Effect.gen(function*() {
      const { api, made, token, world } = yield* setup("camel-asked-approval")
      const { app, calls } = yield* application(api, token, world, made, [tool("pay")], (message) => {
        const identity = message.params._meta["agent-runtime/identity"]
        return identity?.approval === undefined
          ? {
            resultType: "input_required",
            inputRequests: { approval: { method: "agent-runtime/approval" } },
            requestState: "c3RhdGU="
          }
          : done(`paid, approved in ${identity.approval.input}`)
      })
      world.upstream.script({ toolCalls: [{ id: "call_p", name: "pay", arguments: { what: "rent" } }] })
      const stopped = yield* Http.prompted(api, token, made.id, { text: "pay", from: { id: "u1" } })
      const [approval] = stopped.outcome.result.inputs
      expect(approval).toMatchObject({
        kind: "approval",
        message: "Approve pay?",
        detail: { tool: "pay", source: "application", arguments: { what: "rent" } }
      })
      world.upstream.script({ text: "Paid." })
      const answered = yield* answerInput(api, token, made.id, approval.id, { action: "accept" })
      const settled = yield* Http.settled(api, token, made.id, answered.body.request.id)
      expect(settled.outcome.result.reply).toBe("Paid.")
      expect(lastToolResults(world).map((result) => result.content)).toEqual([`paid, approved in ${approval.id}`])
      expect(calls).toHaveLength(2)
      expect(calls[1].params.inputResponses).toEqual({ approval: { action: "accept" } })
      expect(calls[1].params.requestState).toBe("c3RhdGU=")
      expect(calls[1].params.arguments).toEqual({ what: "rent" })
      yield* app.close
    }))
})
