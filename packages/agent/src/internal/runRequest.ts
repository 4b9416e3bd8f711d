/**
 * The runner's work on one request: its turn begun (journaled with its first
 * message) or resumed from what a lost node journaled, run through its hooks,
 * and settled with its outcome, with the steered prompts it took. A turn the
 * database went away under is not failed: the runner stops and the agent's
 * work resumes from the journal; a turn stopped between steps for the next
 * owner is handed on under the same request id.
 */
import { DatabaseHealth } from "@agent-runtime/store"
import { NodeSpans, RunSpans, TraceParent } from "@agent-runtime/telemetry"
import { Cause, Duration, Effect, Exit, Fiber, Option } from "effect"
import type { RequestRow } from "../AgentStore.ts"
import * as ApplicationConnection from "../ApplicationConnection.ts"
import * as RunEvents from "../RunEvents.ts"
import * as Turn from "../Turn.ts"
import { frame, type Instance, reloadHistory, settle } from "./instance.ts"
import { hooksFor } from "./turnHooks.ts"

/** What a request's input holds for its turn. */
type RequestInput =
  & { readonly text?: string; readonly actor?: string; readonly suspension?: string; readonly code?: string }
  & { readonly timeoutMs?: number }
  & { readonly allowDisconnected?: boolean; readonly traceparent?: string }
  & Pick<Turn.TurnInput, "metadata" | "from" | "files" | "output">

/**
 * A turn another node began: the journal says so (turn_resumed, or turn_recovered when this runner began it
 * before a restart), and the prompts whose user message the lost node never wrote are returned.
 */
const resumeHere = (instance: Instance, row: RequestRow, began: number) =>
  Effect.gen(function*() {
    const { agent, agentId, history, journal, runnerAddress, store } = instance
    // The turn's prompts (its own, and those steered into it) whose user message the lost node had not
    // written yet: a turn cut right after it began, or right after it took a steered prompt.
    const inHistory = new Set(
      history.slice(began).flatMap((message) =>
        message.role === "user" && message.requestId !== undefined ? [message.requestId] : []
      )
    )
    const prompts = [
      ...(row.method === "continue" || row.method === "execute" || row.method === "resume" ? [] : [row]),
      ...yield* journal.retrying(store.steeredInto(agentId, row.id))
    ]
    const unjournaled: Array<Turn.Steered> = prompts.flatMap((prompt) =>
      inHistory.has(prompt.id) ? [] : [{ requestId: prompt.id, ...(prompt.input as any) }]
    )
    yield* journal.write(store.markResumed(agentId, row.id, RunEvents.started(agent.tenantId, row)))
    const { ownership } = journal.term()
    const recovered = ownership.previousOwner === runnerAddress
    yield* Effect.logInfo(recovered ? "turn recovered here" : "turn resumed here").pipe(Effect.annotateLogs({
      agentId,
      requestId: row.id,
      from: ownership.previousOwner ?? "a runner that let it go",
      why: row.handoff ?? "its runner was lost"
    }))
    yield* frame(instance, row.id)({
      type: recovered ? "turn_recovered" : "turn_resumed",
      index: history.length,
      ...(row.handoff === null ? {} : { handoff: row.handoff })
    })
    return unjournaled
  })

/** The turn's input for `row`: its prompt, its application's tools, and where a resumed turn began. */
const turnInput = (
  instance: Instance,
  row: RequestRow,
  resume: Turn.TurnInput["resume"]
): Turn.TurnInput => {
  const { agent, agentId, application } = instance
  const input = row.input as RequestInput
  const declared = agent.applicationTools ?? []
  return {
    tenantId: agent.tenantId,
    agentId,
    config: agent.config,
    requestId: row.id,
    beganAt: row.beganAt ?? undefined,
    // A resume goes on from the answers, without a new user message.
    continue: row.method === "continue" || row.method === "resume",
    suspension: input.suspension,
    resume,
    text: input.text ?? "",
    code: input.code,
    codeTimeoutMs: input.timeoutMs,
    metadata: input.metadata,
    from: input.from,
    files: input.files,
    output: input.output,
    actor: input.actor,
    origin: row.method,
    application: declared.length === 0 ? undefined : {
      tools: application.tools(declared, {
        requestId: row.id,
        actor: input.actor ?? input.from?.id,
        origin: row.method,
        waitForConnection: input.allowDisconnected !== true
      }),
      connected: application.connected()
    }
  }
}

/** What a request's outcome records for how its turn ended. */
const outcomeOf = (instance: Instance, resumed: boolean, exit: Exit.Exit<Turn.TurnOutcome>) =>
  Exit.match(exit, {
    onSuccess: (outcome): Record<string, unknown> => ({
      // A resumed turn says whether a tool call's effect is unknown; otherwise nothing was lost.
      result: resumed ? { ...outcome.result, resumed: true } : outcome.result,
      ...(resumed || outcome.uncertain === true ? { uncertain: outcome.uncertain === true } : {}),
      ...(outcome.code === undefined ? {} : { code: outcome.code, error: outcome.result.error })
    }),
    onFailure: (cause) =>
      instance.turn.aborting && Cause.isInterruptedOnly(cause)
        ? { result: { messages: instance.history.length, error: "aborted" }, error: "aborted", code: "aborted" }
        : { error: `the runtime could not run the turn: ${Cause.pretty(cause).split("\n")[0]}` }
  })

/**
 * The request's trace, when its tenant exports and it is sampled: under its caller's span, or (a resume)
 * under the run that asked, in that run's trace.
 */
const traceOf = (instance: Instance, row: RequestRow) =>
  Effect.gen(function*() {
    const { agentId, journal, store } = instance
    const input = row.input as RequestInput
    if (row.method !== "resume" || input.suspension === undefined) {
      return yield* instance.traces.begin({
        tenantId: instance.agent.tenantId,
        agentId,
        requestId: row.id,
        traceparent: input.traceparent
      })
    }
    const suspension = yield* journal.retrying(store.getRequest(agentId, input.suspension))
    const asked = Option.map(suspension, (asking) =>
      TraceParent.forRequest(
        agentId,
        asking.id,
        TraceParent.parse((asking.input as RequestInput).traceparent)
      ))
    return yield* instance.traces.begin({
      tenantId: instance.agent.tenantId,
      agentId,
      requestId: row.id,
      traceparent: Option.getOrUndefined(Option.map(asked, (context) =>
        TraceParent.format(context.traceId, context.spanId, context.sampledByCaller ?? true))),
      // The run that asked was sampled by the tenant's rate (same trace id, same answer) unless its caller chose.
      sampledByRate: Option.match(asked, {
        onNone: () =>
          true,
        onSome: (context) =>
          context.sampledByCaller === undefined
      })
    })
  })

/** A resumed run's waits for a person, each a span under it, known now that their inputs settled. */
const waits = (instance: Instance, suspension: string) =>
  instance.inputStore.forRequest(instance.agentId, suspension).pipe(
    Effect.flatMap((inputs) =>
      Effect.forEach(inputs, (input) =>
        RunSpans.record(
          "await_human_input",
          "internal",
          input.createdAt * 1000,
          (input.answer?.at ?? Date.now() / 1000) * 1000,
          {
            "agent_runtime.input.id": input.id,
            "agent_runtime.input.kind": input.kind,
            "agent_runtime.input.state": input.state,
            "gen_ai.tool.call.id": input.toolCallId
          },
          { "agent_runtime.input.message": input.message }
        ), { discard: true })
    ),
    // Spans are best effort: a read that fails leaves them out, not the run.
    Effect.ignore
  )

/** What the run span says of how the run ended. */
const endAttributes = (
  instance: Instance,
  row: RequestRow,
  traced: RunSpans.Traced,
  exit: Exit.Exit<Turn.TurnOutcome>
): RunSpans.Attributes => {
  const { usage } = traced
  const counts: RunSpans.Attributes = {
    "gen_ai.usage.input_tokens": usage.inputTokens,
    "gen_ai.usage.output_tokens": usage.outputTokens,
    "gen_ai.usage.cache_read.input_tokens": usage.cacheReadTokens,
    "gen_ai.usage.cache_creation.input_tokens": usage.cacheWriteTokens,
    "agent_runtime.cost.usd": usage.costUsd,
    "agent_runtime.run.model_responses": usage.responses,
    // The row as read before this node took the turn over (markResumed counts it then).
    "agent_runtime.run.resumes": row.resumes + (row.state === "running" ? 1 : 0)
  }
  if (Exit.isFailure(exit)) {
    const aborted = instance.turn.aborting && Cause.isInterruptedOnly(exit.cause)
    return {
      ...counts,
      "agent_runtime.run.status": "failed",
      "agent_runtime.error.code": aborted ? "aborted" : "internal"
    }
  }
  const { result } = exit.value
  const stopped = "stopped" in result ? result.stopped : undefined
  const status = stopped === "input_required" ? "input_required" : result.error === null ? "completed" : "failed"
  return {
    ...counts,
    "agent_runtime.run.status": status,
    "agent_runtime.run.tool_calls": result.toolCalls.length,
    "agent_runtime.run.uncertain": exit.value.uncertain === true,
    ...(stopped === undefined ? {} : { "agent_runtime.run.stopped": stopped }),
    ...(exit.value.code === undefined ? {} : { "agent_runtime.error.code": exit.value.code }),
    ...("inputs" in result && result.inputs !== undefined ? { "agent_runtime.run.inputs": result.inputs.length } : {})
  }
}

/**
 * The turn inside the run's span, when traced. The span is recorded where the run ends: not when the turn is
 * handed on or cut with its node (the next owner records it, with the same id).
 */
const traced = (
  instance: Instance,
  row: RequestRow,
  input: Turn.TurnInput,
  trace: Option.Option<RunSpans.Traced>
) =>
<R>(turn: Effect.Effect<Turn.TurnOutcome, never, R>): Effect.Effect<Turn.TurnOutcome, never, R> => {
  if (Option.isNone(trace)) return turn
  const run = trace.value
  const { agent, agentId } = instance
  const executes = row.method === "execute"
  const operation = executes ? "execute_code" : "invoke_agent"
  const suspension = (row.input as RequestInput).suspension
  const waited = row.method === "resume" && suspension !== undefined ? waits(instance, suspension) : Effect.void
  return Effect.zipRight(waited, turn).pipe(
    Effect.onExit((exit) =>
      Effect.zipRight(
        RunSpans.annotate(endAttributes(instance, row, run, exit)),
        RunSpans.content(() => ({
          "gen_ai.input.messages": input.code === undefined ? input.text : undefined,
          "agent_runtime.code": input.code,
          "gen_ai.output.messages": Exit.isSuccess(exit) && "reply" in exit.value.result
            ? exit.value.result.reply
            : undefined,
          "agent_runtime.output": Exit.isSuccess(exit) && "output" in exit.value.result
            ? exit.value.result.output
            : undefined
        }))
      )
    ),
    RunSpans.run(run, `${operation} ${agent.name || agentId}`, {
      "gen_ai.operation.name": operation,
      "gen_ai.agent.id": agentId,
      "gen_ai.agent.name": agent.name || agentId,
      "gen_ai.conversation.id": agentId,
      "gen_ai.request.model": agent.config.model,
      "agent_runtime.run.method": row.method,
      ...(input.actor === undefined ? {} : { "agent_runtime.actor": input.actor })
    }, {
      // When this node began it; a resumed run from when it was accepted (to the second: what the row keeps).
      startMs: row.state === "running" ? row.startedAt * 1000 : Date.now(),
      ends: (exit) =>
        Exit.isSuccess(exit)
          ? exit.value.handoff !== true
          : !DatabaseHealth.isUnreachable(exit.cause) &&
            (instance.turn.aborting || !Cause.isInterruptedOnly(exit.cause))
    })
  )
}

/** Runs `row`'s turn to its end (or hands it on) and settles it. */
export const runRequest = (instance: Instance, row: RequestRow) =>
  Effect.gen(function*() {
    const { agentId, history, journal, requests, store } = instance
    const meter = { since: performance.now() }
    requests.active = row.id
    // Cleared before anything here waits: an abort from now on is this turn's (see AgentRuntime's abort).
    instance.turn.aborting = false
    const resumed = row.state === "running"
    const began = row.beganIndex ?? history.length
    const unjournaled = resumed ? yield* resumeHere(instance, row, began) : []
    if (!resumed) {
      // Journaled with the user message, before the model is called (see Journal.holdStart).
      journal.holdStart(
        store.markRunning(agentId, row.id, history.length, RunEvents.started(instance.agent.tenantId, row))
      )
    }
    requests.activeBegan = began
    const input = turnInput(instance, row, resumed ? { began, unjournaled } : undefined)
    const trace = yield* traceOf(instance, row)
    const fiber = yield* Effect.fork(
      Turn.run(input, hooksFor(instance, row, input.actor ?? input.from?.id, meter)).pipe(
        traced(instance, row, input, trace)
      )
    )
    instance.turn.fiber = fiber
    // Aborted while it was being set up (its trace begun, a resumed turn's journal read): it stops now.
    if (instance.turn.aborting) yield* Fiber.interrupt(fiber)
    const exit = yield* Fiber.await(fiber)
    if (Exit.isFailure(exit) && DatabaseHealth.isUnreachable(exit.cause)) {
      // The database went away under the turn (a key lookup, a usage record): the turn is not failed for
      // it. The runner stops, and the agent's work resumes from the journal once the database is back.
      return yield* Effect.orDie(Effect.failCause(exit.cause))
    }
    if (Exit.isSuccess(exit) && exit.value.handoff === true) {
      // Stopped between steps for the next owner, which continues it under the same request id.
      yield* journal.write(store.markHandoff(agentId, row.id, "drain"))
      requests.taken = []
      yield* Effect.logInfo("turn handed on").pipe(Effect.annotateLogs({ agentId, requestId: row.id }))
      return
    }
    const stored = outcomeOf(instance, resumed, exit)
    // Begun here, the turn's start was journaled with its place in history, at the latest with its end.
    yield* settle(
      instance,
      resumed ? row : { ...row, beganIndex: began },
      stored,
      undefined,
      performance.now() - meter.since
    )
    if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
      yield* Effect.logError("the turn failed", exit.cause).pipe(Effect.annotateLogs({ agentId, requestId: row.id }))
      // The turn failed midway (a write the journal refused, say): history goes on from what was kept.
      yield* reloadHistory(instance)
    }
    // Steered prompts the turn took (here or on a node before) end with it; those it did not reach run as
    // their own turns. Read back only when there can be any: taken here, or by the node that began a
    // resumed turn.
    const steeredHere = resumed || requests.taken.length > 0
      ? yield* journal.retrying(store.steeredInto(agentId, row.id))
      : []
    for (const steered of steeredHere) yield* settle(instance, steered, stored, row.id)
    requests.endTurn()
  }).pipe(
    Effect.ensuring(Effect.sync(() => {
      instance.requests.active = null
      instance.turn.fiber = undefined
    })),
    NodeSpans.withSpan("AgentRuntime.runRequest", () => ({ "agent.id": instance.agentId, "request.id": row.id }))
  )

/**
 * Before a turn starts: an application connection still in its handshake (initialize, tools/list) is
 * waited for, up to ApplicationConnection.initializingWait, so the turn gets the tools it lists; after
 * that the turn runs with the tools listed before, and the log says why.
 */
export const awaitApplication = (instance: Instance, row: RequestRow) =>
  Effect.gen(function*() {
    if (yield* instance.application.awaitInitialized(ApplicationConnection.initializingWait)) return
    yield* Effect.logWarning(
      "the application's connection did not finish its handshake in time; the turn runs with the tools it " +
        "listed before"
    ).pipe(Effect.annotateLogs({
      agentId: instance.agentId,
      requestId: row.id,
      waited: Duration.format(ApplicationConnection.initializingWait)
    }))
  })
