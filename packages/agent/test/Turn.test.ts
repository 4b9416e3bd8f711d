/**
 * A turn through its hooks: `Turn.run` with a scripted model and in-memory
 * hooks that record every append and event. The tools are the runtime's own
 * (`web_fetch` through the egress layer) against a local page server, so a
 * call really goes out, once, and its timing is real.
 */
import { ModelError } from "@agent-runtime/models"
import { NodeSpans } from "@agent-runtime/telemetry"
import { AgentFixtures, ToolServer } from "@agent-runtime/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Schedule, Tracer } from "effect"
import * as Tools from "../src/Tools.ts"
import * as Turn from "../src/Turn.ts"

const { ScriptedModel, recordingHooks } = AgentFixtures

/** The model and the runtime's tools; private URLs allowed, so `web_fetch` reaches the local page server. */
const TurnLive = Layer.mergeAll(AgentFixtures.layer(), AgentFixtures.layerToolsLive)

const input = (fields: Partial<Turn.TurnInput> = {}): Turn.TurnInput => ({
  tenantId: "tn_turn",
  agentId: "client_turn",
  requestId: "req_1",
  text: "hi",
  config: { model: "fake/m1", builtins: ["web_fetch"] },
  ...fields
})

const user = (requestId: string, text: string): Turn.StoredMessage => ({
  role: "user",
  content: text,
  timestamp: 1,
  requestId
})

const assistant = (
  text: string,
  toolCalls: ReadonlyArray<AgentFixtures.ScriptedToolCall> = []
): Turn.StoredMessage => AgentFixtures.messageOf({ text, toolCalls }, "fake/m1")

const toolResult = (toolCallId: string, text: string): Turn.StoredMessage => ({
  role: "toolResult",
  toolCallId,
  toolName: "web_fetch",
  content: [{ type: "text", text }],
  isError: false,
  timestamp: 1
})

/** What each appended message is, compactly: `index role` plus its text or tool call id. */
const appendedSummary = (recording: AgentFixtures.Recording) =>
  recording.appended.map(({ index, message }) => {
    switch (message.role) {
      case "user":
        return `${index} user ${message.requestId} ${String(message.content)}`
      case "assistant":
        return `${index} assistant ${
          message.content.map((part) =>
            part.type === "text" ? part.text : part.type === "toolCall" ? `call:${part.id}` : part.type
          ).join(" ")
        }`
      case "toolResult":
        return `${index} toolResult ${message.toolCallId}${message.isError ? " error" : ""}`
      default:
        return `${index} ${message.role}`
    }
  })

/** The roles of the messages the model was given on each call. */
const contextRoles = (
  calls: ReadonlyArray<{ readonly context: { readonly messages: ReadonlyArray<{ role: string }> } }>
) => calls.map((call) => call.context.messages.map((message) => message.role).join(","))

describe("Turn", () => {
  it.scopedLive("a one-step reply: the prompt and the reply are appended, with the events of one step", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ text: "Hello there" })
      const recording = recordingHooks()
      const outcome = yield* Turn.run(
        input({
          config: {
            model: "fake/m1",
            builtins: ["web_fetch"],
            systemPrompt: "Be brief.",
            systemPromptAppend: "Say hi."
          }
        }),
        recording.hooks
      )

      expect(outcome).toEqual({
        result: { reply: "Hello there", replyIndex: 1, messages: 2, error: null, toolErrors: 0, toolCalls: [] }
      })
      expect(appendedSummary(recording)).toEqual(["0 user req_1 hi", "1 assistant Hello there"])
      expect(recording.eventTypes()).toEqual([
        "turn_opened",
        "agent_start",
        "message_start",
        "message_end",
        "turn_start",
        "message_start",
        "message_update",
        "message_update",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end"
      ])
      // The streamed deltas carry their text and not the partial message (watchers rebuild it).
      expect(
        recording.events.filter((event) => event.type === "message_update").map((event) => event.assistantMessageEvent)
      )
        .toEqual([
          { type: "text_start", contentIndex: 0 },
          { type: "text_delta", contentIndex: 0, delta: "Hello there" },
          { type: "text_end", contentIndex: 0, content: "Hello there" }
        ])
      const [call] = model.calls()
      expect(call).toMatchObject({
        tenantId: "tn_turn",
        model: "fake/m1",
        usage: { kind: "response", agentId: "client_turn", requestId: "req_1" },
        context: { systemPrompt: "Be brief.\n\nSay hi.", messages: [{ role: "user", content: "hi" }] }
      })
      // The user message the model sees carries none of the runtime's notes.
      expect(call!.context.messages[0]).not.toHaveProperty("requestId")
      // web_fetch is exposed both ways (the default up to 10 tools): directly, and to code through codemode.
      expect(call!.context.tools?.map((tool) => tool.name)).toEqual(["web_fetch", "codemode"])
      expect(call!.context.tools?.[1]?.description).toContain("web_fetch(args: {")
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a tool call then a reply: results join in call order, with toolCalls and toolErrors", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const pages = yield* ToolServer.start
      model.script(
        {
          toolCalls: [
            // The first call is the slowest: its result still comes first.
            { id: "c1", name: "web_fetch", arguments: { url: `${pages.url}/slow?delay=300` } },
            { id: "c2", name: "web_fetch", arguments: { url: `${pages.url}/fast` } },
            { id: "c3", name: "no_such_tool", arguments: {} }
          ]
        },
        { text: "Both pages say 42." }
      )
      const recording = recordingHooks()
      const outcome = yield* Turn.run(input(), recording.hooks)

      expect(outcome).toEqual({
        result: {
          reply: "Both pages say 42.",
          replyIndex: 5,
          messages: 6,
          error: null,
          toolErrors: 1,
          toolCalls: [
            { tool: "web_fetch", toolCallId: "c1", ok: true },
            { tool: "web_fetch", toolCallId: "c2", ok: true },
            { tool: "no_such_tool", toolCallId: "c3", ok: false, code: "unavailable" }
          ]
        }
      })
      expect(appendedSummary(recording)).toEqual([
        "0 user req_1 hi",
        "1 assistant call:c1 call:c2 call:c3",
        "2 toolResult c1",
        "3 toolResult c2",
        "4 toolResult c3 error",
        "5 assistant Both pages say 42."
      ])
      // Both parallel calls were sent at once, each once; the unknown tool was never started.
      expect(pages.count("/slow")).toBe(1)
      expect(pages.count("/fast")).toBe(1)
      const [slow, fast] = [
        pages.calls.find((call) => call.path === "/slow")!,
        pages.calls.find((call) => call.path === "/fast")!
      ]
      expect(fast.startedAt).toBeLessThan(slow.endedAt!)
      expect(fast.endedAt!).toBeLessThan(slow.endedAt!)
      expect(recording.toolsStarted.map((call) => call.toolCallId).sort()).toEqual(["c1", "c2"])
      expect(recording.toolsFinished.map((call) => call.toolCallId).sort()).toEqual(["c1", "c2"])
      expect(recording.appended[2]!.message).toMatchObject({
        content: [{ type: "text", text: expect.stringContaining("The answer for /slow is 42.") }]
      })
      expect(recording.appended[4]!.message).toMatchObject({
        content: [{ type: "text", text: "tool no_such_tool is not available" }]
      })
      // The second request carries the calls and their results, in order.
      expect(contextRoles(model.calls())).toEqual([
        "user",
        "user,assistant,toolResult,toolResult,toolResult"
      ])
      const ends = recording.events.filter((event) => event.type === "tool_execution_end")
      expect(ends.map((event) => [event.toolCallId, event.isError])).toContainEqual(["c3", true])
      expect(recording.eventTypes().filter((type) => type === "turn_start")).toHaveLength(2)
      // What was appended is made durable before each model request and before the calls run; the last answer
      // goes with the request's completion (in the runtime, not here).
      expect(recording.durableAt).toEqual([1, 2, 5])
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a steered prompt sent while the model answers joins after that step, and the turn goes on", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ text: "First answer", hold: true }, { text: "Second answer" })
      const recording = recordingHooks()
      const fiber = yield* Effect.fork(Turn.run(input(), recording.hooks))
      const held = yield* model.held
      recording.steer({
        requestId: "req_2",
        text: "and one more thing",
        metadata: { ticket: "T-2" },
        from: { id: "u_7", name: "Ann", username: "ann" }
      })
      yield* held.release
      const outcome = yield* Fiber.join(fiber)

      expect(outcome.result).toMatchObject({ reply: "Second answer", replyIndex: 3, messages: 4, error: null })
      expect(appendedSummary(recording)).toEqual([
        "0 user req_1 hi",
        "1 assistant First answer",
        "2 user req_2 and one more thing",
        "3 assistant Second answer"
      ])
      // The steered message keeps its metadata and sender in history...
      expect(recording.appended[2]!.message).toMatchObject({
        metadata: { ticket: "T-2" },
        from: { id: "u_7", name: "Ann", username: "ann" }
      })
      // ...and the model sees who sent it, in the runtime's own marker, but not the metadata.
      const second = model.calls()[1]!.context.messages
      expect(second.map((message) => message.role)).toEqual(["user", "assistant", "user"])
      expect(second[2]).toMatchObject({
        content: "\u27E8runtime\u27E9 message from Ann @ann (id u_7)\nand one more thing"
      })
      expect(second[2]).not.toHaveProperty("metadata")
      // One turn: opened once, two steps.
      expect(recording.eventTypes().filter((type) => type === "turn_opened")).toHaveLength(1)
      expect(recording.eventTypes().filter((type) => type === "turn_start")).toHaveLength(2)
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive(
    "a resumed turn answers the last step's open calls: from the journal, as unknown when sent without a result, else by running them",
    () =>
      Effect.gen(function*() {
        const model = yield* ScriptedModel
        const pages = yield* ToolServer.start
        model.script({ text: "Done after the restart." })
        const calls = ["c1", "c2", "c3", "c4"].map((id) => ({
          id,
          name: "web_fetch",
          arguments: { url: `${pages.url}/${id}` }
        }))
        const journaled: Tools.ToolResult = {
          content: [{ type: "text", text: "HTTP 200\n\nc2 from the journal" }],
          isError: false
        }
        const recording = recordingHooks({
          history: [
            user("req_0", "earlier"),
            assistant("earlier answer"),
            user("req_1", "fetch four pages"),
            assistant("", calls),
            // c1 was answered before the node was lost.
            toolResult("c1", "HTTP 200\n\nc1")
          ],
          // c2 came back, c3 was sent and its node lost before the result; c4 was never sent.
          sentToolCalls: new Map<string, Turn.SentCall>([
            ["c1", { tool: "web_fetch", result: journaled }],
            ["c2", { tool: "web_fetch", result: journaled }],
            ["c3", { tool: "web_fetch" }]
          ])
        })
        const outcome = yield* Turn.run(input({ resume: { began: 2, unjournaled: [] } }), recording.hooks)

        expect(outcome).toEqual({
          result: {
            reply: "Done after the restart.",
            replyIndex: 8,
            messages: 9,
            error: null,
            toolErrors: 1,
            toolCalls: [
              { tool: "web_fetch", toolCallId: "c2", ok: true },
              { tool: "web_fetch", toolCallId: "c3", ok: false, code: "unknown_outcome" },
              { tool: "web_fetch", toolCallId: "c4", ok: true }
            ]
          },
          uncertain: true
        })
        expect(appendedSummary(recording)).toEqual([
          "5 toolResult c2",
          "6 toolResult c3 error",
          "7 toolResult c4",
          "8 assistant Done after the restart."
        ])
        expect(recording.appended[1]!.message).toMatchObject({ content: Tools.unknownOutcome.content })
        expect(recording.appended[0]!.message).toMatchObject({ content: journaled.content })
        // Only the call never sent goes out; nothing is sent twice.
        expect(pages.calls.map((call) => call.path)).toEqual(["/c4"])
        expect(recording.toolsStarted).toEqual([{ toolCallId: "c4", tool: "web_fetch" }])
        // A resumed turn is not opened again (the entity says turn_resumed); it ends as any turn does.
        expect(recording.eventTypes()).not.toContain("turn_opened")
        expect(recording.eventTypes()).not.toContain("agent_start")
        expect(recording.eventTypes().at(-1)).toBe("agent_end")
        expect(contextRoles(model.calls())).toEqual([
          "user,assistant,user,assistant,toolResult,toolResult,toolResult,toolResult"
        ])
      }).pipe(Effect.provide(TurnLive))
  )

  it.scopedLive("a resumed turn whose last response was final is not asked again", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const recording = recordingHooks({ history: [user("req_1", "hi"), assistant("The final word")] })
      const outcome = yield* Turn.run(input({ resume: { began: 0, unjournaled: [] } }), recording.hooks)

      // Nothing is in doubt (no call was open), so no `uncertain`.
      expect(outcome).toEqual({
        result: { reply: "The final word", replyIndex: 1, messages: 2, error: null, toolErrors: 0, toolCalls: [] }
      })
      expect(model.calls()).toEqual([])
      expect(recording.appended).toEqual([])
      expect(recording.eventTypes()).toEqual(["agent_end"])
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a resumed structured turn whose answer the lost node accepted ends with it, not asking again", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const output = { schema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }
      const accepted: Turn.StoredMessage = {
        role: "toolResult",
        toolCallId: "call_out",
        toolName: "final_output",
        content: [{ type: "text", text: "Answer recorded." }],
        isError: false,
        timestamp: 1
      }
      const recording = recordingHooks({
        history: [
          user("req_1", "count"),
          assistant("Here.", [{ id: "call_out", name: "final_output", arguments: { n: 3 } }]),
          accepted
        ]
      })
      const outcome = yield* Turn.run(input({ output, resume: { began: 0, unjournaled: [] } }), recording.hooks)
      expect(outcome.result).toMatchObject({ output: { n: 3 }, reply: "Here.", error: null })
      expect(model.calls()).toEqual([])
      expect(recording.appended).toEqual([])
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a resumed structured turn cut after its prose is reminded once, forced, then answers", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ toolCalls: [{ id: "call_out", name: "final_output", arguments: { n: 4 } }] })
      const output = { schema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }
      const recording = recordingHooks({ history: [user("req_1", "count"), assistant("Four.")] })
      const outcome = yield* Turn.run(
        input({ config: { model: "fake/m1" }, output, resume: { began: 0, unjournaled: [] } }),
        recording.hooks
      )
      expect(outcome.result).toMatchObject({ output: { n: 4 }, error: null })
      // The reminder joined history, and the one request after it forced final_output (its only tool).
      expect(appendedSummary(recording)).toEqual([
        expect.stringMatching(/^2 user req_1 Your answer was not recorded/),
        "3 assistant call:call_out",
        "4 toolResult call_out"
      ])
      expect(model.calls().map((call) => call.forceTool)).toEqual(["final_output"])
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a resumed turn whose prompts never reached history adds them before the model is asked", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ text: "Now I have both." })
      const recording = recordingHooks({ history: [user("req_0", "earlier"), assistant("earlier answer")] })
      const outcome = yield* Turn.run(
        input({
          resume: {
            began: 2,
            unjournaled: [{ requestId: "req_1", text: "hi" }, { requestId: "req_2", text: "steered in" }]
          }
        }),
        recording.hooks
      )

      expect(outcome.result).toMatchObject({ reply: "Now I have both.", replyIndex: 4, messages: 5, error: null })
      expect(appendedSummary(recording)).toEqual([
        "2 user req_1 hi",
        "3 user req_2 steered in",
        "4 assistant Now I have both."
      ])
      const [call] = model.calls()
      expect(call!.context.messages.map((message) => message.role)).toEqual(["user", "assistant", "user", "user"])
      expect(call!.context.messages.slice(2).map((message) => message.content)).toEqual(["hi", "steered in"])
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("an abort mid-response keeps what was said, marked aborted, and ends the turn", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ text: "Partial answer, cut", hold: true })
      const recording = recordingHooks()
      const fiber = yield* Effect.fork(Turn.run(input(), recording.hooks))
      yield* model.held
      recording.abort()
      const exit = yield* Fiber.interrupt(fiber)

      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(appendedSummary(recording)).toEqual(["0 user req_1 hi", "1 assistant Partial an"])
      expect(recording.appended[1]!.message).toMatchObject({ role: "assistant", stopReason: "aborted" })
      expect(recording.eventTypes().slice(-4)).toEqual(["message_update", "message_end", "turn_end", "agent_end"])
      expect(recording.events.find((event) => event.type === "turn_end")).toEqual({ type: "turn_end", aborted: true })
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a node stopping mid-response keeps nothing of it: the next owner asks again", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ text: "Never kept", hold: true })
      const recording = recordingHooks()
      const fiber = yield* Effect.fork(Turn.run(input(), recording.hooks))
      yield* model.held
      yield* Fiber.interrupt(fiber)

      expect(appendedSummary(recording)).toEqual(["0 user req_1 hi"])
      expect(recording.eventTypes()).not.toContain("agent_end")
    }).pipe(Effect.provide(TurnLive)))

  /** A response with a quick call and one that hangs, aborted once the quick one has finished. */
  const abortWhileToolsRun = Effect.gen(function*() {
    const model = yield* ScriptedModel
    const pages = yield* ToolServer.start
    model.script({
      toolCalls: [
        { id: "c1", name: "web_fetch", arguments: { url: `${pages.url}/quick` } },
        { id: "c2", name: "web_fetch", arguments: { url: `${pages.url}/stuck?delay=10000` } }
      ]
    })
    const recording = recordingHooks()
    const fiber = yield* Effect.fork(Turn.run(input(), recording.hooks))
    yield* Effect.sync(() => recording.toolsFinished.length).pipe(
      Effect.repeat({ until: (finished) => finished === 1, schedule: Schedule.spaced("10 millis") })
    )
    recording.abort()
    yield* Fiber.interrupt(fiber)
    return recording
  })

  it.scopedLive("an abort while tools run answers every open call, so the history stays valid for the model", () =>
    Effect.gen(function*() {
      const recording = yield* abortWhileToolsRun
      expect(recording.toolsFinished).toEqual([{ toolCallId: "c1", isError: false }])
      expect(appendedSummary(recording).slice(0, 2)).toEqual(["0 user req_1 hi", "1 assistant call:c1 call:c2"])
      // Every call of the step has its result, in call order; the hanging one says it was aborted.
      expect(recording.appended.slice(2).map(({ message }) => message.role === "toolResult" && message.toolCallId))
        .toEqual(["c1", "c2"])
      expect(recording.appended[3]!.message).toMatchObject({
        isError: true,
        content: [{ type: "text", text: "aborted before this tool call finished" }]
      })
      expect(recording.eventTypes()).not.toContain("agent_end")
    }).pipe(Effect.provide(TurnLive)))

  /**
   * DEFECT (Turn.ts, `runCalls`' interrupt handler): results join history only
   * once every call of the step is done, so an abort meanwhile answers all of
   * them "aborted before this tool call finished", including a call that did
   * finish (its result is journaled by toolFinished). The model is told a
   * call with effects did not complete, and may make it again.
   */
  it.scopedLive.fails("an abort while tools run keeps the result of a call that had finished", () =>
    Effect.gen(function*() {
      const recording = yield* abortWhileToolsRun
      expect(recording.appended[2]!.message).toMatchObject({
        toolCallId: "c1",
        isError: false,
        content: [{ type: "text", text: expect.stringContaining("The answer for /quick is 42.") }]
      })
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("handing off between steps stops after the step with handoff, the request left open", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script(
        { text: "Looking it up", toolCalls: [{ id: "c1", name: "no_such_tool" }], hold: true },
        { text: "never asked" }
      )
      const recording = recordingHooks()
      const fiber = yield* Effect.fork(Turn.run(input(), recording.hooks))
      const held = yield* model.held
      // The node starts draining while the model answers: this step finishes, its calls answered.
      recording.handOff()
      yield* held.release
      const outcome = yield* Fiber.join(fiber)

      expect(outcome).toEqual({
        result: {
          messages: 3,
          error: null,
          toolErrors: 1,
          toolCalls: [{ tool: "no_such_tool", toolCallId: "c1", ok: false, code: "unavailable" }]
        },
        handoff: true
      })
      expect(appendedSummary(recording)).toEqual([
        "0 user req_1 hi",
        "1 assistant Looking it up call:c1",
        "2 toolResult c1 error"
      ])
      expect(model.calls()).toHaveLength(1)
      // Not ended: the next owner continues the same turn.
      expect(recording.eventTypes()).not.toContain("agent_end")
      expect(recording.eventTypes().at(-1)).toBe("turn_end")
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("the turn limit stops a model that keeps calling tools", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script(
        { toolCalls: [{ id: "c1", name: "no_such_tool" }] },
        { toolCalls: [{ id: "c2", name: "no_such_tool" }] },
        { text: "never asked" }
      )
      const recording = recordingHooks()
      const outcome = yield* Turn.run(
        input({ config: { model: "fake/m1", runLimits: { maxResponses: 2 } } }),
        recording.hooks
      )

      expect(outcome.result).toMatchObject({ stopped: "turn_limit", messages: 5, error: null, toolErrors: 2 })
      expect(outcome.result).not.toHaveProperty("reply")
      expect(model.calls()).toHaveLength(2)
      expect(recording.eventTypes().at(-1)).toBe("agent_end")
    }).pipe(Effect.provide(TurnLive)))

  /**
   * A resumed turn counts the steps its lost node took toward the limit: here the lost node had taken both of
   * the turn's two steps, so answering the second step's open call ends the turn with turn_limit.
   */
  it.scopedLive("a resumed turn counts the steps its lost node took toward the turn limit", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script(
        { toolCalls: [{ id: "c3", name: "no_such_tool" }] },
        { toolCalls: [{ id: "c4", name: "no_such_tool" }] }
      )
      const recording = recordingHooks({
        history: [
          user("req_1", "hi"),
          assistant("", [{ id: "c1", name: "no_such_tool" }]),
          toolResult("c1", "tool no_such_tool is not available"),
          assistant("", [{ id: "c2", name: "no_such_tool" }])
        ]
      })
      const outcome = yield* Turn.run(
        input({ config: { model: "fake/m1", runLimits: { maxResponses: 2 } }, resume: { began: 0, unjournaled: [] } }),
        recording.hooks
      )

      expect(outcome.result).toHaveProperty("stopped", "turn_limit")
      expect(model.calls()).toHaveLength(0)
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a spent budget stops the turn before the model is asked", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const recording = recordingHooks()
      recording.exhaustBudget()
      const outcome = yield* Turn.run(input(), recording.hooks)

      expect(outcome.result).toMatchObject({ stopped: "spend_limit", messages: 1, error: null })
      expect(model.calls()).toEqual([])
      expect(recording.eventTypes()).toContain("spend_limit_reached")
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a model call that fails ends the turn with its error and run code", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.script({ fail: new ModelError.ModelKeyMissing({ provider: "fake" }) })
      const recording = recordingHooks()
      const outcome = yield* Turn.run(input(), recording.hooks)

      expect(outcome).toEqual({
        result: { messages: 1, error: "no key for provider fake", toolErrors: 0, toolCalls: [] },
        code: "model_key_missing"
      })
      expect(recording.events.find((event) => event.type === "turn_end")).toEqual({
        type: "turn_end",
        error: "no key for provider fake"
      })
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("the turn's own spans are made while the node exports them, and none otherwise", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const native = yield* Effect.tracer
      const made: Array<string> = []
      const recorded = Tracer.make({
        span: (name, ...rest) => {
          made.push(name)
          return native.span(name, ...rest)
        },
        context: native.context
      })
      const turnWith = (exporting: boolean) => {
        model.script({ text: "Hello there" })
        return Turn.run(input(), recordingHooks().hooks).pipe(
          Effect.provideService(NodeSpans.Exporting, exporting),
          Effect.withTracer(recorded)
        )
      }

      const quiet = yield* turnWith(false)
      expect(quiet.result).toMatchObject({ reply: "Hello there" })
      expect(made.filter((name) => name.startsWith("Turn."))).toEqual([])

      const traced = yield* turnWith(true)
      expect(traced.result).toMatchObject({ reply: "Hello there" })
      expect(made).toEqual(expect.arrayContaining(["Turn.run", "Turn.start", "Turn.modelCall"]))
    }).pipe(Effect.provide(TurnLive)))
})

/** Application tools answering in process, each call recorded: what code mode calls in the tests below. */
const countingTools = () => {
  const calls: Array<{ readonly tool: string; readonly args: Record<string, unknown> }> = []
  const tool = (
    name: string,
    answer: (args: Record<string, unknown>) => unknown,
    executionMode: "parallel" | "sequential" = "parallel"
  ) => ({
    name,
    description: `the ${name} tool`,
    parameters: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
    exposure: "codemode" as const,
    executionMode,
    execute: (args: Record<string, unknown>) =>
      Effect.sync(() => {
        calls.push({ tool: name, args })
        return Tools.text(JSON.stringify(answer(args)))
      })
  })
  const application: Tools.Application = {
    connected: true,
    tools: [
      tool("double", ({ n }) => ({ value: Number(n) * 2 })),
      tool("square", ({ n }) => ({ value: Number(n) ** 2 })),
      tool("record", ({ n }) => ({ saved: n }), "sequential")
    ]
  }
  return { calls, application }
}

const loopCode = `
  let total = 0
  for (let n = 1; n <= 3; n++) {
    const doubled = await tools.double({ n })
    const squared = await tools.square({ n: doubled.value })
    await tools.record({ n: squared.value })
    total += squared.value
  }
  console.log("total", total)
  return { total }
`

describe("Turn code mode", () => {
  it.scopedLive("the model's code calls three tools in a loop; each call is journaled and listed with its innerCallId", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const { application, calls } = countingTools()
      model.script(
        { toolCalls: [{ id: "cm", name: "codemode", arguments: { code: loopCode } }] },
        { text: "The total is 56." }
      )
      const recording = recordingHooks()
      const outcome = yield* Turn.run(input({ config: { model: "fake/m1" }, application }), recording.hooks)

      // Codemode-only tools are not the model's own: it has codemode, whose description declares them.
      const tools = model.calls()[0]!.context.tools!
      expect(tools.map((tool) => tool.name)).toEqual(["codemode"])
      expect(tools[0]!.description).toContain("double(args: {")
      expect(calls.map((call) => `${call.tool}(${call.args.n})`)).toEqual([
        "double(1)",
        "square(2)",
        "record(4)",
        "double(2)",
        "square(4)",
        "record(16)",
        "double(3)",
        "square(6)",
        "record(36)"
      ])
      const inner = calls.map((call, n) => ({ tool: call.tool, toolCallId: "cm", innerCallId: `cm:${n}`, ok: true }))
      expect(outcome.result.toolCalls).toEqual([...inner, { tool: "codemode", toolCallId: "cm", ok: true }])
      expect(recording.toolsStarted).toEqual(inner.map(({ innerCallId, tool }) => ({ toolCallId: innerCallId, tool })))
      expect(recording.toolsFinished.map((finished) => finished.toolCallId)).toEqual(inner.map((c) => c.innerCallId))
      const answer = recording.appended.find(({ message }) => message.role === "toolResult")!.message
      expect(answer).toMatchObject({ toolCallId: "cm", isError: false })
      const answerText = (answer as { content: Array<{ text: string }> }).content[0]!.text
      expect(answerText).toContain(`"total": 56`)
      expect(answerText).toContain("total 56")
      expect(answerText).toContain("Tool calls: 9")
      const stages = recording.events.filter((event) => event.type === "codemode").map((event) => event.stage)
      expect(stages.filter((stage) => stage === "call_start")).toHaveLength(9)
      expect(stages.filter((stage) => stage === "call_end")).toHaveLength(9)
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a resumed codemode call runs the code again: calls already sent are answered from the journal, never sent twice", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const { application, calls } = countingTools()
      model.script({ text: "Done after the restart." })
      const call = { id: "cm", name: "codemode", arguments: { code: loopCode } }
      const recording = recordingHooks({
        history: [user("req_1", "add them up"), assistant("", [call])],
        // The lost node had sent double(1) and had its answer, then sent square(2) and was lost.
        sentToolCalls: new Map<string, Turn.SentCall>([
          ["cm:0", { tool: "double", result: Tools.text(JSON.stringify({ value: 2 })) }],
          ["cm:1", { tool: "square" }]
        ])
      })
      const outcome = yield* Turn.run(
        input({ config: { model: "fake/m1" }, application, resume: { began: 0, unjournaled: [] } }),
        recording.hooks
      )

      // The code ran again; double(1) came from the journal, square(2) is unknown, so the code's
      // await rejected and it stopped there: nothing was sent.
      expect(calls).toEqual([])
      expect(outcome.uncertain).toBe(true)
      expect(outcome.result.toolCalls).toEqual([
        { tool: "double", toolCallId: "cm", innerCallId: "cm:0", ok: true },
        { tool: "square", toolCallId: "cm", innerCallId: "cm:1", ok: false, code: "unknown_outcome" },
        { tool: "codemode", toolCallId: "cm", ok: false, code: "failed" }
      ])
      const answer = recording.appended.find(({ message }) => message.role === "toolResult")!.message
      expect((answer as { content: Array<{ text: string }> }).content[0]!.text).toContain("whether it took effect")
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("a sequential tool called from code runs alone; parallel ones overlap", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const running = { now: 0, max: 0, maxBesideSequential: 0, sequential: false }
      const slow = (name: string, executionMode: "parallel" | "sequential") => ({
        name,
        description: name,
        parameters: { type: "object" },
        exposure: "codemode" as const,
        executionMode,
        execute: () =>
          Effect.gen(function*() {
            running.now++
            if (executionMode === "sequential") running.sequential = true
            running.max = Math.max(running.max, running.now)
            if (running.sequential) running.maxBesideSequential = Math.max(running.maxBesideSequential, running.now)
            yield* Effect.sleep("50 millis")
            if (executionMode === "sequential") running.sequential = false
            running.now--
            return Tools.text("{}")
          })
      })
      const application: Tools.Application = {
        connected: true,
        tools: [slow("read", "parallel"), slow("write", "sequential")]
      }
      const code = `await Promise.all([tools.read(), tools.read(), tools.write(), tools.read(), tools.read()])`
      model.script({ toolCalls: [{ id: "cm", name: "codemode", arguments: { code } }] }, { text: "ok" })
      const outcome = yield* Turn.run(
        input({ config: { model: "fake/m1" }, application }),
        recordingHooks().hooks
      )
      expect(outcome.result.toolCalls).toHaveLength(6)
      expect(running.max).toBeGreaterThanOrEqual(2)
      expect(running.maxBesideSequential).toBe(1)
    }).pipe(Effect.provide(TurnLive)))

  it.scopedLive("execute: code runs with the agent's tools and no model; history is untouched", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const { application, calls } = countingTools()
      const recording = recordingHooks({ history: [user("req_0", "earlier")] })
      const outcome = yield* Turn.run(
        input({ config: { model: "fake/m1" }, application, code: loopCode, text: "" }),
        recording.hooks
      )
      expect(model.calls()).toEqual([])
      expect(calls).toHaveLength(9)
      expect(recording.appended).toEqual([])
      expect(outcome.result).toMatchObject({
        ok: true,
        value: { total: 56 },
        logs: ["total 56"],
        error: null,
        messages: 1,
        toolErrors: 0
      })
      expect(outcome.result.toolCalls[0]).toEqual({ tool: "double", innerCallId: "req_1:0", ok: true })
      expect(recording.eventTypes()).toEqual(["codemode", ...Array(18).fill("codemode"), "codemode"])

      const failed = yield* Turn.run(
        input({ config: { model: "fake/m1" }, application, code: "while (true) {}", text: "" }),
        recordingHooks().hooks
      )
      expect(failed.result).toMatchObject({ ok: false, limit: "cpu", error: expect.stringContaining("CPU time") })
    }).pipe(Effect.provide(TurnLive)))
})
