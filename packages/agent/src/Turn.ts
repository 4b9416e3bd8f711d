/**
 * One run of the agent loop for a request: the user message, then model
 * rounds (a response and its tool calls) until the model stops asking for
 * tools or the round limit is reached. Every finished message is journaled
 * before the next step, so another node can continue from there.
 */
import type { Codemode } from "@agent-runtime/codemode"
import type { Input } from "@agent-runtime/domain"
import type { ModelClient } from "@agent-runtime/models"
import { NodeSpans } from "@agent-runtime/telemetry"
import { Duration, Effect, Either } from "effect"
import type { AttachedFile } from "./Agent.ts"
import type { AgentConfig } from "./AgentStore.ts"
import { compactIfNeeded } from "./internal/compaction.ts"
import { respond } from "./internal/modelStep.ts"
import { answerEarlier, runCalls, runCode, unansweredCalls } from "./internal/toolCalls.ts"
import * as TurnRun from "./internal/turnRun.ts"
import * as StructuredOutput from "./StructuredOutput.ts"
import type * as Tools from "./Tools.ts"

export { estimateTokens, modelContext, toModelMessage } from "./internal/modelContext.ts"

/** Stands in for every message before it: what compaction (or initialMessages) left of them. */
export interface CompactionSummary {
  readonly role: "compactionSummary"
  readonly summary: string
  readonly tokensBefore?: number
  readonly timestamp: number
}

/** A history entry: a protocol message plus what the runtime keeps beside it (hidden from the model). */
export type StoredMessage = (ModelClient.Message | CompactionSummary) & {
  readonly requestId?: string
  readonly metadata?: Record<string, string>
  readonly from?: { readonly id: string; readonly name?: string | undefined; readonly username?: string | undefined }
}

/** A user prompt as a run takes it; also a steered prompt, taken by the running turn after its current step. */
export interface Steered {
  readonly requestId: string
  readonly text: string
  readonly metadata?: Record<string, string> | undefined
  readonly from?: StoredMessage["from"] | undefined
  /** Files attached to it, in the agent's mounts: named in the message, images shown to the model. */
  readonly files?: ReadonlyArray<AttachedFile> | undefined
}

export interface TurnInput extends Steered {
  readonly tenantId: string
  readonly agentId: string
  readonly config: AgentConfig
  /** Runs on the history as it is, without a new user message. */
  readonly continue?: boolean
  /**
   * Continues a turn another node began (history from `began` is journaled):
   * a step whose tool calls are unanswered is finished first, and a turn whose
   * last response was final is not asked again. `unjournaled` are its prompts
   * (its own, or steered into it) whose user message the lost node never wrote.
   */
  readonly resume?: { readonly began: number; readonly unjournaled: ReadonlyArray<Steered> } | undefined
  /** When the turn began (Unix seconds; on the node before, for a resumed one): runLimits.maxSeconds counts from it. */
  readonly beganAt?: number | undefined
  /** The tools the agent's application serves, when it declared any. */
  readonly application?: Tools.Application | undefined
  /** Who acts (`act` of identity tokens); the sender's id when not given. */
  readonly actor?: string | undefined
  /** What started the run, for identity tokens: prompt, continue, resume, execute. */
  readonly origin?: string | undefined
  /** An execute request: runs this code with the agent's tools instead of asking the model. */
  readonly code?: string | undefined
  /** How long an execute request's code may run, awaiting tools included (default Codemode's wall time). */
  readonly codeTimeoutMs?: number | undefined
  /** A resume request: the request whose turn waited on input; its calls are answered from their inputs first. */
  readonly suspension?: string | undefined
  /** The prompt asks for structured output: the model answers through final_output (see StructuredOutput). */
  readonly output?: { readonly schema: Record<string, unknown> } | undefined
}

/** A call a lost node sent (the journal's row): its tool, and its result when it came back. */
export interface SentCall {
  readonly tool: string
  readonly result?: unknown
}

export interface ToolCallRecord {
  readonly tool: string
  /** The model's call; a call made by code has the codemode call's id (none under execute) and its own innerCallId. */
  readonly toolCallId?: string
  readonly innerCallId?: string
  readonly ok: boolean
  readonly code?: string
  /** A delegate call's sub-agent. */
  readonly agentId?: string
}

export interface TurnHooks {
  /** Steered prompts waiting for this turn's next step; taking them clears them. */
  readonly takeSteered: Effect.Effect<ReadonlyArray<Steered>>
  /** Whether the agent's or this run's spend limit is reached: checked before each model request. */
  readonly overBudget: Effect.Effect<boolean>
  /** Emits one display event of this run. */
  readonly emit: (event: Record<string, unknown>) => Effect.Effect<void>
  /** Journals the message at `index` (with the next write, or at `durable`) and keeps it in memory. */
  readonly append: (index: number, message: StoredMessage) => Effect.Effect<void>
  /** Makes every message appended so far durable: before anything leaves the node (a model request, a tool call). */
  readonly durable: Effect.Effect<void>
  readonly historySize: () => number
  readonly history: () => ReadonlyArray<StoredMessage>
  /** Journals that a call is about to be sent, and its result once it is back. */
  readonly toolStarted: (toolCallId: string, tool: string) => Effect.Effect<void>
  readonly toolFinished: (toolCallId: string, result: Tools.ToolResult) => Effect.Effect<void>
  /** The calls of this request that were sent, with results where they came back (for a resumed turn). */
  readonly sentToolCalls: Effect.Effect<ReadonlyMap<string, SentCall>>
  /** Whether an abort request stopped the turn (rather than its node stopping). */
  readonly aborting: () => boolean
  /** Whether the node is handing its agents on: the turn stops after its current step. */
  readonly handingOff: () => boolean
  /** Records the inputs this run's waiting calls ask and tells watchers; answers them as the API shows them. */
  readonly askInputs: (asks: ReadonlyArray<Waiting>) => Effect.Effect<ReadonlyArray<Input.Input>>
  /**
   * The inputs of earlier calls left waiting, by call; with `supersede` (a new prompt came instead of the
   * answers) those still pending are superseded first.
   */
  readonly inputsFor: (
    toolCallIds: ReadonlyArray<string>,
    supersede: boolean
  ) => Effect.Effect<ReadonlyMap<string, Earlier>>
}

/** A call waiting on a person: what it asks. */
export interface Waiting extends Tools.Ask {
  readonly toolCallId: string
}

/** An earlier call's latest input, and what its tool gave with the ask to have handed back (`Tools.Ask.resume`). */
export interface Earlier {
  readonly input: Input.Input
  readonly resume?: unknown
}

export interface RunResult {
  readonly reply?: string
  /** A structured turn's answer: the arguments of its accepted final_output call. */
  readonly output?: unknown
  readonly replyIndex?: number
  readonly messages: number
  readonly error: string | null
  readonly stopped?: "turn_limit" | "spend_limit" | "input_required"
  /** The inputs the turn waits on, when it stopped for them. */
  readonly inputs?: ReadonlyArray<Input.Input>
  /** Calls that failed (the tool's own error, unavailable, unknown outcome, aborted). */
  readonly toolErrors: number
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  /** Files its tools wrote (at most 100, each at the version written last) and presented (at most 20). */
  readonly files?: ReadonlyArray<NonNullable<Tools.ToolResult["written"]>>
  readonly presented?: ReadonlyArray<NonNullable<Tools.ToolResult["presented"]>>
  /** Tool sources whose tools the model did not have: they could not be listed. */
  readonly sourceErrors?: ReadonlyArray<{ readonly source: string; readonly error: string }>
}

/** The result of an execute request: what the code returned or threw, and the calls it made. */
export interface ExecuteResult {
  readonly ok: boolean
  /** The JSON value the code returned. */
  readonly value?: unknown
  readonly logs: ReadonlyArray<string>
  /** What the code threw, or the limit it hit; null when it returned. */
  readonly error: string | null
  readonly limit?: Codemode.LimitName
  readonly messages: number
  readonly toolErrors: number
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  readonly sourceErrors?: ReadonlyArray<{ readonly source: string; readonly error: string }>
}

export interface TurnOutcome {
  readonly result: RunResult | ExecuteResult
  /** A run failure code (model_key_missing, model_key_invalid) when the run could not go on. */
  readonly code?: string
  /** A tool call was cut short by a lost node: whether it took effect is unknown. */
  readonly uncertain?: boolean
  /** The turn stopped between steps for another node to continue it; the request stays open. */
  readonly handoff?: boolean
}

const defaultMaxRounds = 25

/** An execute request: the code runs with the agent's code-mode tools instead of the model. */
const execute = (run: TurnRun.TurnRun, code: string) =>
  Effect.gen(function*() {
    const { hooks, input, tally } = run
    yield* run.event("codemode", { stage: "start", code })
    const ran = yield* runCode(
      run,
      code,
      input.requestId,
      input.resume === undefined ? new Map() : yield* hooks.sentToolCalls,
      undefined,
      input.codeTimeoutMs === undefined ? undefined : { wallTime: Duration.millis(input.codeTimeoutMs) }
    )
    yield* run.event("codemode", { stage: "end", ok: ran.ok, ...(ran.limit === undefined ? {} : { limit: ran.limit }) })
    const executed: ExecuteResult = {
      ok: ran.ok,
      ...(ran.result === undefined ? {} : { value: ran.result }),
      logs: ran.logs,
      error: ran.error === undefined ? null : `${ran.error.name}: ${ran.error.message}`,
      ...(ran.limit === undefined ? {} : { limit: ran.limit }),
      messages: hooks.historySize(),
      toolErrors: tally.toolErrors,
      toolCalls: tally.toolCalls,
      ...(run.toolSet.sourceErrors.length === 0 ? {} : { sourceErrors: run.toolSet.sourceErrors })
    }
    const outcome: TurnOutcome = { result: executed, ...(tally.uncertain ? { uncertain: true } : {}) }
    return outcome
  })

/** Where a run is between its steps: what it will answer with, and whether it goes on. */
interface Progress {
  /** Where the turn's messages start in history. */
  readonly began: number
  reply: { text: string; index: number } | undefined
  /** A structured turn's accepted answer. */
  output: Either.Either<unknown, void>
  error: string | null
  code: string | undefined
  stopped: "turn_limit" | "spend_limit" | "input_required" | undefined
  handoff: boolean
  finished: boolean
}

/** After a step: steered prompts join, and a node handing on stops here. Whether the turn goes on. */
const afterStep = (run: TurnRun.TurnRun, progress: Progress, calls: number) =>
  Effect.gen(function*() {
    const steered = yield* run.hooks.takeSteered
    for (const prompt of steered) yield* TurnRun.addUser(run, prompt)
    if (calls === 0 && steered.length === 0) return false
    if (run.hooks.handingOff()) {
      progress.handoff = true
      return false
    }
    return true
  })

/**
 * A structured turn after a step: an accepted answer ends it; a prose answer is reminded once (the turn goes
 * on as after a call), then ends it output_missing. Undefined for a plain turn, or a step of other calls.
 */
const structuredAfter = (run: TurnRun.TurnRun, progress: Progress, calls: number) =>
  Effect.gen(function*() {
    const structured = run.structured
    if (structured === undefined) return undefined
    progress.output = StructuredOutput.acceptedIn(run.hooks.history(), progress.began)
    if (Either.isRight(progress.output)) return false
    if (calls > 0) return undefined
    if (!structured.reminded) {
      structured.reminded = true
      yield* TurnRun.addUser(run, { requestId: run.input.requestId, text: StructuredOutput.reminder })
      return yield* afterStep(run, progress, 1)
    }
    progress.error = `the model answered without calling ${StructuredOutput.toolName}`
    progress.code = "output_missing"
    return false
  })

/** Whether the turn goes on after a step of `calls` calls (see `structuredAfter` and `afterStep`). */
const goesOn = (run: TurnRun.TurnRun, progress: Progress, calls: number) =>
  // A plain turn (most of them) takes no extra step on its hot path.
  run.structured === undefined ? afterStep(run, progress, calls) : Effect.flatMap(
    structuredAfter(run, progress, calls),
    (decided) => decided === undefined ? afterStep(run, progress, calls) : Effect.succeed(decided)
  )

/** Calls answered before the turn goes on may ask a person: then the turn records their inputs and waits. */
const suspendIfWaiting = (run: TurnRun.TurnRun, progress: Progress) =>
  Effect.gen(function*() {
    if (run.tally.waiting.length === 0) return false
    run.tally.inputs = yield* run.hooks.askInputs(run.tally.waiting)
    progress.stopped = "input_required"
    return true
  })

/** A new turn: earlier calls answered, the history compacted if need be, then the user's message. */
const open = (run: TurnRun.TurnRun, progress: Progress) =>
  Effect.gen(function*() {
    const { hooks, input } = run
    const began = hooks.historySize()
    yield* answerEarlier(run, began)
    yield* compactIfNeeded(run, input.text)
    yield* run.event("turn_opened", { index: began })
    yield* run.event("agent_start")
    progress.finished = yield* suspendIfWaiting(run, progress)
    if (!input.continue && !progress.finished) yield* TurnRun.addUser(run, input)
  })

/**
 * A turn another node began: its earlier calls answered, the prompts it never wrote added, then the step
 * it was in finished (a final response ends the turn; unanswered calls are answered first).
 */
const resume = (run: TurnRun.TurnRun, progress: Progress, resumed: NonNullable<TurnInput["resume"]>) =>
  Effect.gen(function*() {
    const { hooks } = run
    yield* answerEarlier(run, resumed.began)
    progress.finished = yield* suspendIfWaiting(run, progress)
    for (const prompt of resumed.unjournaled) yield* TurnRun.addUser(run, prompt)
    const history = hooks.history()
    const last = history.findLastIndex((message) => message.role === "assistant")
    if (last < resumed.began) return
    const message = history[last] as ModelClient.AssistantMessage
    const calls = unansweredCalls(history, last)
    const text = TurnRun.textOf(message)
    if (text !== "") progress.reply = { text, index: last }
    if (progress.finished) return // waiting on a person again
    if (TurnRun.toolCallsOf(message).length === 0 && last === history.length - 1) {
      progress.finished = !(yield* goesOn(run, progress, 0)) && !progress.handoff
    } else if (calls.length > 0) {
      yield* runCalls(run, calls, yield* hooks.sentToolCalls)
      progress.finished = (yield* suspendIfWaiting(run, progress)) ||
        (!(yield* goesOn(run, progress, calls.length)) && !progress.handoff)
    } else if (run.structured !== undefined) {
      // Every call answered: the lost node may have accepted the answer already.
      progress.finished = !(yield* goesOn(run, progress, 1)) && !progress.handoff
    }
  })

/** One round: a response, its tool calls. Whether the loop goes on. */
const step = (run: TurnRun.TurnRun, progress: Progress) =>
  Effect.gen(function*() {
    const { hooks } = run
    if (yield* hooks.overBudget) {
      progress.stopped = "spend_limit"
      yield* run.event("spend_limit_reached")
      return false
    }
    yield* run.event("turn_start")
    yield* hooks.durable
    const index = hooks.historySize()
    const response = yield* respond(run, index)
    if (response._tag === "Left") {
      progress.error = response.left.message
      progress.code = TurnRun.runErrorCode(response.left)
      yield* run.event("turn_end", { error: progress.error })
      return false
    }
    const message = response.right
    yield* hooks.append(index, message)
    yield* run.event("message_end", { index, message })
    const text = TurnRun.textOf(message)
    if (text !== "") progress.reply = { text, index }
    const calls = TurnRun.toolCallsOf(message)
    if (calls.length > 0) yield* runCalls(run, calls, new Map())
    const waiting = yield* suspendIfWaiting(run, progress)
    yield* run.event("turn_end")
    return !waiting && (yield* goesOn(run, progress, calls.length))
  })

/** What the run answers: its reply, how it stopped, and its tally. */
const outcomeOf = (run: TurnRun.TurnRun, progress: Progress): TurnOutcome => {
  const { hooks, tally, toolSet } = run
  const result: RunResult = {
    ...(progress.reply === undefined ? {} : { reply: progress.reply.text, replyIndex: progress.reply.index }),
    ...(Either.isRight(progress.output) ? { output: progress.output.right } : {}),
    messages: hooks.historySize(),
    error: progress.error,
    ...(progress.stopped === undefined ? {} : { stopped: progress.stopped }),
    ...(tally.inputs === undefined ? {} : { inputs: tally.inputs }),
    toolErrors: tally.toolErrors,
    toolCalls: tally.toolCalls,
    ...(tally.written.size === 0 ? {} : { files: [...tally.written.values()] }),
    ...(tally.presented.length === 0 ? {} : { presented: tally.presented }),
    ...(toolSet.sourceErrors.length === 0 ? {} : { sourceErrors: toolSet.sourceErrors })
  }
  return {
    result,
    ...(progress.code === undefined ? {} : { code: progress.code }),
    ...(tally.uncertain ? { uncertain: true } : {})
  }
}

/**
 * Runs the turn for `input` through `hooks`: an execute request's code, or model rounds until the model
 * stops asking for tools, the round limit, the spend limit, a person's input, an error or a handoff.
 */
export const run = (input: TurnInput, hooks: TurnHooks) =>
  running(input, hooks).pipe(
    NodeSpans.withSpan("Turn.run", () => ({ "agent.id": input.agentId, "request.id": input.requestId }))
  )

const running = Effect.fnUntraced(function*(input: TurnInput, hooks: TurnHooks) {
  const turn = yield* TurnRun.make(input, hooks)
  if (input.code !== undefined) return yield* execute(turn, input.code)
  const began = input.resume?.began ?? hooks.historySize()
  const progress: Progress = {
    began,
    reply: undefined,
    output: Either.left(undefined),
    error: null,
    code: undefined,
    stopped: undefined,
    handoff: false,
    finished: false
  }
  if (turn.structured !== undefined) turn.structured.reminded = StructuredOutput.remindedIn(hooks.history(), began)
  if (input.resume === undefined) yield* open(turn, progress)
  else yield* resume(turn, progress, input.resume)
  if (turn.structured !== undefined && turn.toolSet.direct.has(StructuredOutput.toolName) && !progress.finished) {
    progress.error = `the agent has a tool of its own named ${StructuredOutput.toolName}; it cannot take an ` +
      "output schema"
    progress.code = "output_invalid"
    progress.finished = true
  }
  const limits = input.config.runLimits
  const maxRounds = limits?.maxResponses ?? defaultMaxRounds
  const deadline = limits?.maxSeconds === undefined ? undefined : (input.beganAt ?? Date.now() / 1000) +
    limits.maxSeconds
  // A resumed turn counts the responses the node before took, so crashes never stretch its limit.
  const taken = input.resume === undefined ?
    0 :
    hooks.history().slice(input.resume.began).filter((message) => message.role === "assistant").length
  for (let round = taken; !progress.finished && !progress.handoff; round++) {
    if (round >= maxRounds || (deadline !== undefined && Date.now() / 1000 >= deadline)) {
      progress.stopped = "turn_limit"
      break
    }
    if (!(yield* step(turn, progress))) break
  }
  if (progress.handoff) {
    const handedOn: TurnOutcome = {
      result: {
        messages: hooks.historySize(),
        error: null,
        toolErrors: turn.tally.toolErrors,
        toolCalls: turn.tally.toolCalls
      },
      handoff: true
    }
    return handedOn
  }
  yield* turn.event("agent_end")
  return outcomeOf(turn, progress)
})
