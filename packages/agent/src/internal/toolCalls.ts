/**
 * A turn's tool calls: each call answered from the journal when a lost node
 * already sent it, else run once (journaled before it is sent and when it is
 * back); calls waiting on a person answered from their settled inputs; code
 * mode's calls journaled like the model's, under the code's own numbering.
 */
import { Codemode } from "@agent-runtime/codemode"
import type { Input } from "@agent-runtime/domain"
import { ModelClient } from "@agent-runtime/models"
import { Storable } from "@agent-runtime/store"
import { NodeSpans, RunSpans } from "@agent-runtime/telemetry"
import { Effect } from "effect"
import * as StructuredOutput from "../StructuredOutput.ts"
import * as Tools from "../Tools.ts"
import type { Earlier, SentCall, StoredMessage } from "../Turn.ts"
import { recordCall, type ToolCall, toolCallsOf, type TurnRun } from "./turnRun.ts"

/** Whether a call a lost node sent without a result is run again: its tool continues the same work. */
const reattaches = (tool: Tools.Tool | undefined, sent: SentCall | undefined) =>
  tool?.reattaches === true && sent !== undefined && sent.result === undefined

/** What the model reads for a call whose input settled without running it again. */
const settledResult = (input: Input.Input): Tools.ToolResult => {
  const by = input.answer?.by as { readonly name?: string; readonly id?: string } | undefined
  const who = by?.name ?? by?.id ?? "the person"
  switch (input.state) {
    case "answered": {
      const answers = (input.answer?.content as { readonly answers?: Record<string, unknown> } | undefined)?.answers
      return Tools.text(
        `${who} answered:\n` +
          Object.entries(answers ?? {}).map(([question, answer]) =>
            `${question}\n→ ${Array.isArray(answer) ? answer.join(", ") : String(answer)}`
          ).join("\n\n")
      )
    }
    case "declined": {
      const reason = (input.answer?.content as { readonly reason?: string } | undefined)?.reason
      return Tools.text(
        input.kind === "approval"
          ? `${who} did not approve this call; it was not run.${reason === undefined ? "" : ` Reason: ${reason}`}`
          : `${who} declined to answer.`,
        true,
        "declined"
      )
    }
    case "cancelled":
      return Tools.text(`${who} cancelled the request; the call was not run.`, true, "cancelled")
    case "expired":
      return Tools.text("No one answered in time and the request expired; the call was not run.", true, "expired")
    case "superseded":
      return Tools.text(
        "The person sent a new message instead of answering; the call was not run.",
        true,
        "superseded"
      )
    case "pending":
      return Tools.text("The request for input is still open; the call was not run.", true, "unavailable")
  }
}

/**
 * Why a call's arguments cannot be given to a tool, if they cannot: the model must send one JSON object
 * (unreadable JSON reaches here as whatever part of it could be read), nested at most
 * `ModelClient.maxArgumentDepth` levels.
 */
const argumentsProblem = (args: unknown): string | undefined =>
  args === null || typeof args !== "object" || Array.isArray(args)
    ? "the arguments must be one JSON object; send the call again with an object of the tool's parameters"
    : ModelClient.depthOf(args) > ModelClient.maxArgumentDepth
    ? `the arguments nest deeper than ${ModelClient.maxArgumentDepth} levels; send them flatter`
    : undefined

/** A call of an earlier turn that was never answered and asked nobody. */
const neverAnswered = Tools.text("This call was never answered; whether it ran is unknown.", true, "unknown_outcome")

/** Inputs that settle a call by their answer alone; the others (an accepted approval, form or page) run it. */
const answersAlone = (input: Input.Input) => input.state !== "answered" || input.kind === "question"

/** Permits of a code run's calls: a parallel call takes one, a sequential one all of them. */
const lanesTotal = Codemode.defaultLimits.toolCalls

/** At most one tool_execution_update every 250 ms per call. */
const updateInterval = 250

/** A call a lost node sent is answered from the journal, or as unknown; it is never sent again. */
const answerSent = (run: TurnRun, sent: SentCall | undefined) => {
  const journaled = sent?.result as Tools.ToolResult | undefined
  if (journaled === undefined) run.tally.uncertain = true
  return journaled ?? Tools.unknownOutcome
}

/** One call code makes: journaled as `<prefix>:<n>`, refused when it needs a person. */
const runInnerCall = (
  run: TurnRun,
  lanes: Effect.Semaphore,
  call: { readonly tool: Tools.Tool; readonly args: unknown; readonly innerCallId: string },
  sent: ReadonlyMap<string, SentCall>,
  toolCallId: string | undefined
) =>
  Effect.gen(function*() {
    const { args, innerCallId, tool } = call
    const ids = { ...(toolCallId === undefined ? {} : { toolCallId }), innerCallId }
    yield* run.event("codemode", { stage: "call_start", ...ids, toolName: tool.name, args })
    const journaled = sent.get(innerCallId)
    let result: Tools.ToolResult
    if (journaled !== undefined && !(journaled.tool === tool.name && reattaches(tool, journaled))) {
      // The code took another path after the restart: what was sent under this number is unknown.
      result = journaled.tool === tool.name ? answerSent(run, journaled) : answerSent(run, undefined)
    } else if (typeof args !== "object" || args === null || Array.isArray(args)) {
      result = Tools.text("arguments must be an object", true, "invalid_arguments")
    } else if (run.needsApproval(tool)) {
      result = Tools.text(
        `${tool.name} needs a person's approval first: call it directly, not from code`,
        true,
        "unavailable"
      )
    } else {
      const update = (partialResult: unknown) =>
        run.event("codemode", { stage: "call_update", ...ids, toolName: tool.name, partialResult })
      result = yield* lanes.withPermits(tool.executionMode === "sequential" ? lanesTotal : 1)(
        Effect.gen(function*() {
          yield* run.hooks.toolStarted(innerCallId, tool.name)
          const done = yield* tool.execute(args as Record<string, unknown>, {
            toolCallId: innerCallId,
            update,
            emit: run.hooks.emit,
            aborting: run.hooks.aborting
          })
          yield* run.hooks.toolFinished(innerCallId, done)
          return done.ask === undefined ? done : Tools.text(
            `${tool.name} asks a person for input (${done.ask.kind}): call it directly, not from code`,
            true,
            "unavailable"
          )
        })
      )
    }
    yield* run.event("codemode", { stage: "call_end", ...ids, toolName: tool.name, isError: result.isError })
    recordCall(run, { tool: tool.name, ...ids, ok: !result.isError }, result)
    yield* spanResult(args, result)
    return {
      text: result.content.map((part) => part.text).join(""),
      isError: result.isError
    } satisfies Codemode.ToolOutput
  }).pipe(RunSpans.span(`execute_tool ${call.tool.name}`, "internal", {
    ...toolAttributes(call.tool.name, toolCallId ?? call.innerCallId, call.tool.source),
    "agent_runtime.tool.inner_call.id": call.innerCallId
  }))

/** A traced tool call's span: its tool, and where the tool comes from. */
const toolAttributes = (name: string, toolCallId: string, source: string | undefined): RunSpans.Attributes => ({
  "gen_ai.operation.name": "execute_tool",
  "gen_ai.tool.name": name,
  "gen_ai.tool.call.id": toolCallId,
  "gen_ai.tool.type": "function",
  "agent_runtime.tool.source": source ?? "runtime"
})

/** What a traced tool call's span says of its result. */
const spanResult = (args: unknown, result: Tools.ToolResult) =>
  Effect.zipRight(
    result.isError
      ? RunSpans.fail(result.code ?? "tool_error", result.content.map((part) => part.text).join(""))
      : result.ask === undefined
      ? Effect.void
      : RunSpans.annotate({ "agent_runtime.tool.input_required": true }),
    RunSpans.content(() => ({
      "gen_ai.tool.call.arguments": args,
      "gen_ai.tool.call.result": result.content.map((part) => part.text).join("")
    }))
  )

/**
 * Code against the code-mode tools (the codemode tool, or an execute request). Each call the code makes
 * is journaled like a model's call under `<prefix>:<n>`, n counting the code's calls in order: run again
 * after a lost node, the same code's calls that were sent are answered from the journal and not sent
 * again. A sequential tool runs alone, a parallel one beside others.
 */
export const runCode = (
  run: TurnRun,
  code: string,
  prefix: string,
  sent: ReadonlyMap<string, SentCall>,
  toolCallId?: string,
  limits?: Partial<Codemode.Limits>
) =>
  Effect.gen(function*() {
    const lanes = yield* Effect.makeSemaphore(lanesTotal)
    const hostTools = run.toolSet.code.map((tool): Codemode.HostTool => ({
      name: tool.name,
      description: tool.description,
      parameters: tool.parameters,
      call: (args, n) => runInnerCall(run, lanes, { tool, args, innerCallId: `${prefix}:${n}` }, sent, toolCallId)
    }))
    return yield* Codemode.run(code, hostTools, limits)
  }).pipe(NodeSpans.withSpan("Turn.runCode"))

/** A call that asks a person's approval before it runs. */
const askApproval = (tool: Tools.Tool, call: ToolCall): Tools.ToolResult => ({
  ...Tools.text("waiting for a person's approval"),
  ask: Tools.approvalAsk(tool.name, tool.source ?? "builtins", call.arguments)
})

/**
 * Runs a tool once, journaled as sent before and with its result after; its updates at most every 250 ms.
 * Made again after its input settled, it gets the answer (or the approval) and what its tool asked back.
 */
const execute = (run: TurnRun, tool: Tools.Tool, call: ToolCall, journalId: string, earlier: Earlier | undefined) =>
  Effect.gen(function*() {
    const settled = earlier?.input
    const answer = settled?.answer
    let lastUpdate = 0
    const update = (partialResult: unknown) =>
      Effect.suspend(() => {
        const now = Date.now()
        if (now - lastUpdate < updateInterval) return Effect.void
        lastUpdate = now
        return run.event("tool_execution_update", { toolCallId: call.id, toolName: call.name, partialResult })
      })
    yield* run.hooks.toolStarted(journalId, call.name)
    const result = yield* tool.execute(call.arguments, {
      toolCallId: call.id,
      update,
      emit: run.hooks.emit,
      aborting: run.hooks.aborting,
      ...(settled === undefined ? {} : settled.kind === "approval"
        ? { approval: { inputId: settled.id, by: answer?.by, at: answer?.at ?? Math.floor(Date.now() / 1000) } }
        : {
          answer: {
            inputId: settled.id,
            action: answer?.action ?? "accept",
            ...(answer?.content === undefined ? {} : { content: answer.content })
          }
        }),
      ...(earlier?.resume === undefined ? {} : { resume: earlier.resume })
    })
    yield* run.hooks.toolFinished(journalId, result)
    return result
  })

/**
 * One call: answered from the journal when a lost node already sent it, else run once. A call of an
 * earlier step left waiting (`earlier`) is answered from its settled input: an accepted approval runs
 * it, an accepted form or page runs it again with the answer (journaled apart from what ran before, as
 * the tool itself may have asked the approval), any other state is told to the model; one that asked
 * nobody is not run.
 */
const runCall = (
  run: TurnRun,
  call: ToolCall,
  sent: ReadonlyMap<string, SentCall>,
  earlier?: ReadonlyMap<string, Earlier>
) => callRunning(run, call, sent, earlier).pipe(NodeSpans.withSpan("Turn.toolCall"))

const callRunning = Effect.fnUntraced(function*(
  run: TurnRun,
  call: ToolCall,
  sent: ReadonlyMap<string, SentCall>,
  earlier?: ReadonlyMap<string, Earlier>
) {
  return yield* callOnce(run, call, sent, earlier).pipe(
    RunSpans.span(
      `execute_tool ${call.name}`,
      "internal",
      toolAttributes(call.name, call.id, run.toolSet.direct.get(call.name)?.source)
    )
  )
})

const callOnce = Effect.fnUntraced(function*(
  run: TurnRun,
  call: ToolCall,
  sent: ReadonlyMap<string, SentCall>,
  earlier?: ReadonlyMap<string, Earlier>
) {
  yield* Effect.annotateCurrentSpan({ "gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id })
  yield* run.event("tool_execution_start", { toolCallId: call.id, toolName: call.name, args: call.arguments })
  const { toolSet } = run
  const asked = earlier?.get(call.id)
  const settled = asked?.input
  const journalId = settled === undefined ? call.id : `${call.id}:${settled.id}`
  const problem = argumentsProblem(call.arguments)
  let result: Tools.ToolResult
  if (earlier !== undefined && settled === undefined) {
    result = neverAnswered
  } else if (settled !== undefined && answersAlone(settled)) {
    result = settledResult(settled)
  } else if (sent.has(journalId) && !reattaches(toolSet.direct.get(call.name), sent.get(journalId))) {
    result = answerSent(run, sent.get(journalId))
  } else if (problem !== undefined) {
    result = Tools.text(problem, true, "invalid_arguments")
  } else if (call.name === Tools.codemodeName && toolSet.code.length > 0) {
    const code = call.arguments.code
    result = typeof code !== "string"
      ? Tools.text("codemode needs code: a string of JavaScript", true, "invalid_arguments")
      : yield* Effect.map(
        runCode(run, code, call.id, sent, call.id),
        (ran) => Tools.text(Codemode.format(ran), !ran.ok, ran.ok ? undefined : "failed")
      )
  } else if (
    call.name === StructuredOutput.toolName && run.structured !== undefined && !toolSet.direct.has(call.name)
  ) {
    result = StructuredOutput.check(run.structured.schema, call.arguments)
  } else {
    const tool = toolSet.direct.get(call.name)
    if (tool === undefined) {
      const name = call.name.length > 64 ? `${call.name.slice(0, 64)}…` : call.name
      result = Tools.text(`tool ${name} is not available`, true, "unavailable")
    } else if (settled === undefined && run.needsApproval(tool)) {
      result = askApproval(tool, call)
    } else {
      result = yield* execute(run, tool, call, journalId, asked)
    }
  }
  // What a tool, an application or a tool server answered is kept as the journal can keep it.
  result = Storable.value(result)
  yield* spanResult(call.arguments, result)
  if (result.ask === undefined) {
    yield* run.event("tool_execution_end", {
      toolCallId: call.id,
      toolName: call.name,
      result: result.content,
      isError: result.isError
    })
  }
  return result
})

/**
 * A response's tool calls, by their execution modes; the results join history in call order. A call that
 * asks a person waits (unless `mayAsk` is false: a new prompt came first, and the model is told).
 */
export const runCalls = (
  run: TurnRun,
  calls: ReadonlyArray<ToolCall>,
  sent: ReadonlyMap<string, SentCall>,
  options: { readonly earlier?: ReadonlyMap<string, Earlier>; readonly mayAsk?: boolean } = {}
) => {
  const { hooks } = run
  const done = new Set<string>()
  const appendResult = (call: ToolCall, result: Tools.ToolResult) =>
    Effect.gen(function*() {
      const index = hooks.historySize()
      const message: StoredMessage = {
        role: "toolResult",
        toolCallId: call.id,
        toolName: call.name,
        content: [...result.content],
        isError: result.isError,
        timestamp: Date.now()
      }
      yield* run.event("message_start", { index, message })
      yield* hooks.append(index, message)
      yield* run.event("message_end", { index, message })
      done.add(call.id)
      recordCall(run, { tool: call.name, toolCallId: call.id, ok: !result.isError }, result)
    })
  return Effect.zipRight(
    hooks.durable,
    Tools.executeAll(
      calls,
      (call) =>
        call.name === Tools.codemodeName
          ? "sequential"
          : run.toolSet.direct.get(call.name)?.executionMode ?? "parallel",
      (call) => runCall(run, call, sent, options.earlier)
    ).pipe(
      Effect.flatMap((results) =>
        Effect.forEach(calls, (call, i) => {
          const result = results[i]!
          if (result.ask === undefined) return appendResult(call, result)
          if (options.mayAsk !== false) {
            return Effect.sync(() => {
              run.tally.waiting.push({ toolCallId: call.id, ...result.ask! })
            })
          }
          return appendResult(
            call,
            Tools.text("The tool asked a person for input, but a new message came first.", true, "superseded")
          )
        }, { discard: true })
      ),
      // Aborted while tools ran: every call still gets an answer, so the history stays valid for the model.
      // A node stopping answers nothing: the next owner finds which calls were sent.
      Effect.onInterrupt(() =>
        !hooks.aborting() ? Effect.void : Effect.forEach(
          calls.filter((call) => !done.has(call.id)),
          (call) => appendResult(call, Tools.text("aborted before this tool call finished", true, "aborted")),
          { discard: true }
        )
      )
    )
  )
}

/** The calls of the assistant message at `last` that have no result after it in history. */
export const unansweredCalls = (history: ReadonlyArray<StoredMessage>, last: number) => {
  const answered = new Set(
    history.slice(last + 1).flatMap((entry) => entry.role === "toolResult" ? [entry.toolCallId] : [])
  )
  return toolCallsOf(history[last]!).filter((call) => !answered.has(call.id))
}

/**
 * Calls of the last step before this run that were left unanswered: waiting on a person (a resume answers
 * them; a new prompt supersedes the pending ones) or cut off. Answered here before anything else.
 */
export const answerEarlier = (run: TurnRun, began: number) =>
  Effect.gen(function*() {
    const { hooks, input } = run
    const history = hooks.history()
    const last = history.findLastIndex((message) => message.role === "assistant")
    if (last === -1 || last >= began) return
    const calls = unansweredCalls(history, last)
    if (calls.length === 0) return
    const resuming = input.suspension !== undefined
    const earlier = yield* hooks.inputsFor(calls.map((call) => call.id), !resuming)
    const sent = input.resume === undefined ? new Map<string, SentCall>() : yield* hooks.sentToolCalls
    yield* runCalls(run, calls, sent, { earlier, mayAsk: resuming })
  })
