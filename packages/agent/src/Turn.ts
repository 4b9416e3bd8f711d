/**
 * One run of the agent loop for a request: the user message, then model
 * rounds (a response and its tool calls) until the model stops asking for
 * tools or the round limit is reached. Every finished message is journaled
 * before the next step, so another node can continue from there.
 */
import { Codemode } from "@agent-runtime/codemode"
import type { Input } from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import type { ModelError } from "@agent-runtime/models"
import { ModelClient } from "@agent-runtime/models"
import { Storable } from "@agent-runtime/store"
import { Effect, Either, Option } from "effect"
import type { AttachedFile } from "./Agent.ts"
import type { AgentConfig } from "./AgentStore.ts"
import { argumentsHash } from "./Inputs.ts"
import * as Tools from "./Tools.ts"
import * as Workspace from "./Workspace.ts"

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
  /** The tools the agent's application serves, when it declared any. */
  readonly application?: Tools.Application | undefined
  /** Who acts (`act` of identity tokens); the sender's id when not given. */
  readonly actor?: string | undefined
  /** What started the run, for identity tokens: prompt, continue, resume, execute. */
  readonly origin?: string | undefined
  /** An execute request: runs this code with the agent's tools instead of asking the model. */
  readonly code?: string | undefined
  /** A resume request: the request whose turn waited on input; its calls are answered from their inputs first. */
  readonly suspension?: string | undefined
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
  ) => Effect.Effect<ReadonlyMap<string, Input.Input>>
}

/** A call waiting on a person: what it asks. */
export interface Waiting extends Tools.Ask {
  readonly toolCallId: string
}

export interface RunResult {
  readonly reply?: string
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

/** Images the providers' protocols take in a user message. */
const imageTypes = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"])

/** The sender, in a block only the runtime writes: the same marker in user text is neutralised. */
const senderMarker = "\u27E8runtime\u27E9"
const neutralise = (text: string) => text.split(senderMarker).join("\u27E8runtime-quoted\u27E9")

/** What the model sees of a history entry: the protocol message, without the runtime's notes. */
export const toModelMessage = (message: StoredMessage): ModelClient.Message => {
  if (message.role === "compactionSummary") {
    return {
      role: "user",
      content: `${senderMarker} summary of the conversation so far:\n${message.summary}`,
      timestamp: message.timestamp
    }
  }
  if (message.role !== "user") {
    const { from: _from, metadata: _metadata, requestId: _requestId, ...rest } = message as any
    return rest
  }
  const text = typeof message.content === "string"
    ? message.content
    : message.content.map((part) => part.type === "text" ? part.text : "").join("")
  const images = typeof message.content === "string" ? [] : message.content.filter((part) => part.type === "image")
  const sender = message.from === undefined ?
    "" :
    `${senderMarker} message from ${
      [message.from.name, message.from.username === undefined ? undefined : `@${message.from.username}`]
        .filter((part) => part !== undefined).join(" ")
    } (id ${message.from.id})\n`
  const content = sender + neutralise(text)
  return {
    role: "user",
    content: images.length === 0 ? content : [{ type: "text", text: content }, ...images],
    timestamp: message.timestamp
  }
}

/**
 * Each history entry as the model sees it and its size, worked out once: an entry is never changed once
 * appended, and every step of every turn sends the whole history again.
 */
const seen = new WeakMap<StoredMessage, { readonly message: ModelClient.Message; readonly tokens: number }>()
const seenOf = (message: StoredMessage) => {
  let found = seen.get(message)
  if (found === undefined) {
    const modelMessage = toModelMessage(message)
    found = { message: modelMessage, tokens: estimateTokens(modelMessage) }
    seen.set(message, found)
  }
  return found
}

/** The history the model sees: from the last compaction summary on, which stands in for all before it. */
const sinceCompaction = (history: ReadonlyArray<StoredMessage>) => {
  const start = history.findLastIndex((message) => message.role === "compactionSummary")
  return start === -1 ? history : history.slice(start)
}

/** The messages the model sees. */
export const modelContext = (history: ReadonlyArray<StoredMessage>) =>
  sinceCompaction(history).map((message) => seenOf(message).message)

/** A rough token count (4 characters a token), enough to decide when to compact. */
export const estimateTokens = (value: unknown) => Math.ceil(JSON.stringify(value).length / 4)

/** The estimate of what the model sees of the history, each entry's counted once. */
const contextTokens = (history: ReadonlyArray<StoredMessage>) =>
  sinceCompaction(history).reduce((sum, message) => sum + seenOf(message).tokens, 0)

const compactionPrompt =
  "Summarize the conversation above for your own later use: the user's goals, decisions made, facts learned, " +
  "open questions and work in progress. Be complete but brief; the summary replaces the conversation."

/** Who a response's usage is counted for: the agent, the run, and who acts in it. */
const usageOf = (input: TurnInput) => ({
  agentId: input.agentId,
  requestId: input.requestId,
  subject: input.config.subject,
  actor: input.actor ?? input.from?.id,
  context: input.config.context
})

const runErrorCode = (error: ModelError.ModelError) =>
  error._tag === "ModelKeyMissing"
    ? "model_key_missing"
    : error._tag === "ModelKeyInvalid"
    ? "model_key_invalid"
    : undefined

const textOf = (message: ModelClient.AssistantMessage) =>
  message.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("")

const toolCallsOf = (message: StoredMessage) =>
  message.role === "assistant" ? message.content.flatMap((part) => part.type === "toolCall" ? [part] : []) : []

type ToolCall = ReturnType<typeof toolCallsOf>[number]

/** The model's tool for code mode: its description declares the tools code can call. */
const codemodeTool = (tools: ReadonlyArray<Tools.Tool>): ModelClient.Tool => ({
  name: Tools.codemodeName,
  description: "Runs JavaScript (the body of an async function: use await, and return a JSON value) in a sandbox " +
    "without network, files, timers or modules, and answers with the value returned, console output and any " +
    "error. Use it to call the tools below, several at once with Promise.all or many in a loop, and to work " +
    "on their results before answering. Limits: 30 s in all, 2 s of computing, 16 MiB, 100,000 characters of " +
    `output, 256 tool calls.\n\n${Codemode.describe(tools)}`,
  parameters: {
    type: "object",
    properties: { code: { type: "string", description: "JavaScript, run as the body of an async function" } },
    required: ["code"],
    additionalProperties: false
  } as any
})

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

/**
 * How much of a tool call's arguments is told to watchers as they stream; the rest comes whole with the
 * call's end. A provider sends a few characters a delta, so a megabyte of arguments would be hundreds of
 * thousands of events, each costing the node and every watcher far more than its few characters.
 */
const toldArgumentsLimit = 64 * 1024

/** At most one tool_execution_update every 250 ms per call. */
const updateInterval = 250

export const run = (input: TurnInput, hooks: TurnHooks) =>
  Effect.gen(function*() {
    const models = yield* ModelClient.ModelClient
    // Resolved once for all the turn's calls (one provider read and unsealing per turn, not per call).
    const target = yield* Effect.cached(models.resolve({
      tenantId: input.tenantId,
      keyScope: Option.fromNullable(input.config.keyScope),
      model: input.config.model
    }))
    const volumes = yield* Volumes.Volumes
    const toolSet = yield* (yield* Tools.Tools).forAgent(
      {
        tenantId: input.tenantId,
        agentId: input.agentId,
        config: input.config,
        origin: input.origin ?? (input.continue ? "continue" : "prompt"),
        actor: input.actor ?? input.from?.id,
        requestId: input.requestId
      },
      input.application
    )
    const modelTools: Array<ModelClient.Tool> = [...toolSet.direct.values()].map((tool) => ({
      name: tool.name,
      description: tool.description,
      parameters: tool.parameters as any
    }))
    if (toolSet.code.length > 0) modelTools.push(codemodeTool(toolSet.code))
    const toolCalls: Array<ToolCallRecord> = []
    const written = new Map<string, NonNullable<Tools.ToolResult["written"]>>()
    const presented: Array<NonNullable<Tools.ToolResult["presented"]>> = []
    let toolErrors = 0
    let uncertain = false
    /** Calls of this run waiting on a person; the turn stops after their step. */
    const waiting: Array<Waiting> = []
    let inputs: ReadonlyArray<Input.Input> | undefined
    const approvals = input.config.humanInput?.approvals ?? []
    const needsApproval = (tool: Tools.Tool) =>
      approvals.some((approval) =>
        approval.tool === tool.name && (approval.source === undefined || approval.source === tool.source)
      )
    const event = (type: string, fields: Record<string, unknown> = {}) => hooks.emit({ type, ...fields })

    const recordCall = (entry: ToolCallRecord, result: Tools.ToolResult) => {
      if (result.isError) toolErrors++
      if (result.written !== undefined && (written.size < 100 || written.has(result.written.path))) {
        written.set(result.written.path, result.written)
      }
      if (result.presented !== undefined && presented.length < 20) presented.push(result.presented)
      if (toolCalls.length < 100) {
        toolCalls.push({
          ...entry,
          ...(result.code === undefined ? {} : { code: result.code }),
          ...(result.agentId === undefined ? {} : { agentId: result.agentId })
        })
      }
    }

    /** A call a lost node sent is answered from the journal, or as unknown; it is never sent again. */
    const answerSent = (sent: SentCall | undefined) => {
      const journaled = sent?.result as Tools.ToolResult | undefined
      if (journaled === undefined) uncertain = true
      return journaled ?? Tools.unknownOutcome
    }

    /**
     * Code against the code-mode tools (the codemode tool, or an execute request). Each call the code makes
     * is journaled like a model's call under `<prefix>:<n>`, n counting the code's calls in order: run again
     * after a lost node, the same code's calls that were sent are answered from the journal and not sent
     * again. A sequential tool runs alone, a parallel one beside others.
     */
    const runCode = (code: string, prefix: string, sent: ReadonlyMap<string, SentCall>, toolCallId?: string) =>
      Effect.gen(function*() {
        const lanes = yield* Effect.makeSemaphore(lanesTotal)
        const innerCall = (tool: Tools.Tool, args: unknown, n: number) =>
          Effect.gen(function*() {
            const innerCallId = `${prefix}:${n}`
            const ids = { ...(toolCallId === undefined ? {} : { toolCallId }), innerCallId }
            yield* event("codemode", { stage: "call_start", ...ids, toolName: tool.name, args })
            const journaled = sent.get(innerCallId)
            let result: Tools.ToolResult
            if (journaled !== undefined && !(journaled.tool === tool.name && reattaches(tool, journaled))) {
              // The code took another path after the restart: what was sent under this number is unknown.
              result = journaled.tool === tool.name ? answerSent(journaled) : answerSent(undefined)
            } else if (typeof args !== "object" || args === null || Array.isArray(args)) {
              result = Tools.text("arguments must be an object", true, "invalid_arguments")
            } else if (needsApproval(tool)) {
              result = Tools.text(
                `${tool.name} needs a person's approval first: call it directly, not from code`,
                true,
                "unavailable"
              )
            } else {
              const update = (partialResult: unknown) =>
                event("codemode", { stage: "call_update", ...ids, toolName: tool.name, partialResult })
              result = yield* lanes.withPermits(tool.executionMode === "sequential" ? lanesTotal : 1)(
                Effect.gen(function*() {
                  yield* hooks.toolStarted(innerCallId, tool.name)
                  const done = yield* tool.execute(args as Record<string, unknown>, {
                    toolCallId: innerCallId,
                    update,
                    emit: hooks.emit,
                    aborting: hooks.aborting
                  })
                  yield* hooks.toolFinished(innerCallId, done)
                  return done.ask === undefined ? done : Tools.text(
                    `${tool.name} asks a person for input (${done.ask.kind}): call it directly, not from code`,
                    true,
                    "unavailable"
                  )
                })
              )
            }
            yield* event("codemode", { stage: "call_end", ...ids, toolName: tool.name, isError: result.isError })
            recordCall({ tool: tool.name, ...ids, ok: !result.isError }, result)
            return {
              text: result.content.map((part) => part.text).join(""),
              isError: result.isError
            } satisfies Codemode.ToolOutput
          })
        const hostTools = toolSet.code.map((tool): Codemode.HostTool => ({
          name: tool.name,
          description: tool.description,
          parameters: tool.parameters,
          call: (args, n) => innerCall(tool, args, n)
        }))
        return yield* Codemode.run(code, hostTools)
      })

    /** The prompt's text naming its files, then the images among them for the model to see. */
    const withAttachments = (text: string, files: ReadonlyArray<AttachedFile>) =>
      Effect.gen(function*() {
        const named = files.map((file) => `- ${file.path} (${file.contentType}, ${file.size} bytes)`).join("\n")
        const images: Array<{ type: "image"; data: string; mimeType: string }> = []
        for (const file of files) {
          const mimeType = file.contentType.split(";")[0]!.trim()
          if (!imageTypes.has(mimeType)) continue
          const resolved = Workspace.resolve(input.config.mounts ?? [], file.path)
          if (Either.isLeft(resolved)) continue
          // A file gone since the prompt was accepted is still named; the model is told it in the text only.
          const read = yield* Effect.option(volumes.read(input.tenantId, resolved.right.volumeId, resolved.right.path))
          if (Option.isSome(read)) {
            images.push({ type: "image", data: Buffer.from(read.value.bytes).toString("base64"), mimeType })
          }
        }
        return [{ type: "text" as const, text: `${text}\n\nAttached files:\n${named}` }, ...images]
      })

    const addUser = (prompt: Steered) =>
      Effect.gen(function*() {
        const index = hooks.historySize()
        const user: StoredMessage = {
          role: "user",
          content: prompt.files === undefined || prompt.files.length === 0
            ? prompt.text
            : yield* withAttachments(prompt.text, prompt.files),
          timestamp: Date.now(),
          requestId: prompt.requestId,
          ...(prompt.metadata === undefined ? {} : { metadata: prompt.metadata }),
          ...(prompt.from === undefined ? {} : { from: prompt.from })
        }
        yield* event("message_start", { index, message: user })
        yield* hooks.append(index, user)
        yield* event("message_end", { index, message: user })
      })

    const systemPrompt = [input.config.systemPrompt, input.config.systemPromptAppend]
      .filter((part) => part !== undefined && part !== "").join("\n\n")

    /**
     * Keeps requests within the model's context window: when the history and
     * the new message would not leave room for a full response, everything so
     * far is summarized into one compactionSummary message.
     */
    const compactIfNeeded = (incoming: string) =>
      Effect.gen(function*() {
        const resolved = yield* Effect.either(target)
        if (resolved._tag === "Left") return
        const limits = resolved.right.model
        const tokens = contextTokens(hooks.history()) + estimateTokens(systemPrompt) + estimateTokens(incoming) +
          estimateTokens(modelTools)
        if (hooks.historySize() === 0 || tokens <= limits.contextWindow - limits.maxTokens) return
        const context = modelContext(hooks.history())
        yield* event("compaction_start", { tokens })
        yield* hooks.durable
        const summary = yield* models.complete({
          target: resolved.right,
          tenantId: input.tenantId,
          keyScope: Option.fromNullable(input.config.keyScope),
          model: input.config.model,
          context: {
            ...(systemPrompt === "" ? {} : { systemPrompt }),
            messages: [...context, { role: "user", content: compactionPrompt, timestamp: Date.now() }]
          },
          modelHeaders: input.config.modelHeaders,
          usage: { kind: "compaction", ...usageOf(input) }
        }).pipe(Effect.either)
        if (summary._tag === "Left") {
          yield* event("compaction_end", { skipped: summary.left.message })
          return
        }
        const index = hooks.historySize()
        const message: StoredMessage = {
          role: "compactionSummary",
          summary: textOf(summary.right),
          tokensBefore: tokens,
          timestamp: Date.now()
        }
        yield* hooks.append(index, message)
        yield* event("compaction_end", { index, message })
      })

    /**
     * One call: answered from the journal when a lost node already sent it, else run once. A call of an
     * earlier step left waiting (`earlier`) is answered from its settled input: an accepted approval runs
     * it, an accepted form or page runs it again with the answer (journaled apart from its first run), any
     * other state is told to the model; one that asked nobody is not run.
     */
    const runCall = (
      call: ToolCall,
      sent: ReadonlyMap<string, SentCall>,
      earlier?: ReadonlyMap<string, Input.Input>
    ) =>
      Effect.gen(function*() {
        yield* event("tool_execution_start", { toolCallId: call.id, toolName: call.name, args: call.arguments })
        const settled = earlier?.get(call.id)
        const journalId = settled === undefined || settled.kind === "approval" ? call.id : `${call.id}:${settled.id}`
        let result: Tools.ToolResult
        if (earlier !== undefined && settled === undefined) {
          result = neverAnswered
        } else if (settled !== undefined && answersAlone(settled)) {
          result = settledResult(settled)
        } else if (sent.has(journalId) && !reattaches(toolSet.direct.get(call.name), sent.get(journalId))) {
          result = answerSent(sent.get(journalId))
        } else if (argumentsProblem(call.arguments) !== undefined) {
          result = Tools.text(argumentsProblem(call.arguments)!, true, "invalid_arguments")
        } else if (call.name === Tools.codemodeName && toolSet.code.length > 0) {
          const code = call.arguments.code
          result = typeof code !== "string"
            ? Tools.text("codemode needs code: a string of JavaScript", true, "invalid_arguments")
            : yield* Effect.map(
              runCode(code, call.id, sent, call.id),
              (ran) => Tools.text(Codemode.format(ran), !ran.ok, ran.ok ? undefined : "failed")
            )
        } else {
          const tool = toolSet.direct.get(call.name)
          if (tool === undefined) {
            const name = call.name.length > 64 ? `${call.name.slice(0, 64)}…` : call.name
            result = Tools.text(`tool ${name} is not available`, true, "unavailable")
          } else if (settled === undefined && needsApproval(tool)) {
            result = {
              ...Tools.text("waiting for a person's approval"),
              ask: {
                kind: "approval",
                message: `Approve ${tool.name}?`,
                detail: {
                  tool: tool.name,
                  source: tool.source ?? "builtins",
                  arguments: call.arguments,
                  argumentsHash: argumentsHash(call.arguments)
                }
              }
            }
          } else {
            let lastUpdate = 0
            const update = (partialResult: unknown) =>
              Effect.suspend(() => {
                const now = Date.now()
                if (now - lastUpdate < updateInterval) return Effect.void
                lastUpdate = now
                return event("tool_execution_update", { toolCallId: call.id, toolName: call.name, partialResult })
              })
            yield* hooks.toolStarted(journalId, call.name)
            result = yield* tool.execute(call.arguments, {
              toolCallId: call.id,
              update,
              emit: hooks.emit,
              aborting: hooks.aborting,
              ...(settled === undefined || settled.kind === "approval" ? {} : {
                answer: {
                  inputId: settled.id,
                  action: settled.answer?.action ?? "accept",
                  ...(settled.answer?.content === undefined ? {} : { content: settled.answer.content })
                }
              })
            })
            yield* hooks.toolFinished(journalId, result)
          }
        }
        // What a tool, an application or a tool server answered is kept as the journal can keep it.
        result = Storable.value(result)
        if (result.ask === undefined) {
          yield* event("tool_execution_end", {
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
    const runCalls = (
      calls: ReadonlyArray<ToolCall>,
      sent: ReadonlyMap<string, SentCall>,
      options: { readonly earlier?: ReadonlyMap<string, Input.Input>; readonly mayAsk?: boolean } = {}
    ) => {
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
          yield* event("message_start", { index, message })
          yield* hooks.append(index, message)
          yield* event("message_end", { index, message })
          done.add(call.id)
          recordCall({ tool: call.name, toolCallId: call.id, ok: !result.isError }, result)
        })
      return Effect.zipRight(
        hooks.durable,
        Tools.executeAll(
          calls,
          (call) =>
            call.name === Tools.codemodeName
              ? "sequential"
              : toolSet.direct.get(call.name)?.executionMode ?? "parallel",
          (call) => runCall(call, sent, options.earlier)
        ).pipe(
          Effect.flatMap((results) =>
            Effect.forEach(calls, (call, i) => {
              const result = results[i]!
              if (result.ask === undefined) return appendResult(call, result)
              if (options.mayAsk !== false) {
                return Effect.sync(() => {
                  waiting.push({ toolCallId: call.id, ...result.ask! })
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

    /** Records what the waiting calls ask; the turn then stops until the inputs settle. */
    const suspend = Effect.gen(function*() {
      inputs = yield* hooks.askInputs(waiting)
    })

    /**
     * Calls of the last step before this run that were left unanswered: waiting on a person (a resume answers
     * them; a new prompt supersedes the pending ones) or cut off. Answered here before anything else.
     */
    const answerEarlier = (began: number) =>
      Effect.gen(function*() {
        const history = hooks.history()
        const last = history.findLastIndex((message) => message.role === "assistant")
        if (last === -1 || last >= began) return
        const answered = new Set(
          history.slice(last + 1).flatMap((entry) => entry.role === "toolResult" ? [entry.toolCallId] : [])
        )
        const calls = toolCallsOf(history[last]!).filter((call) => !answered.has(call.id))
        if (calls.length === 0) return
        const resuming = input.suspension !== undefined
        const earlier = yield* hooks.inputsFor(calls.map((call) => call.id), !resuming)
        const sent = input.resume === undefined ? new Map<string, SentCall>() : yield* hooks.sentToolCalls
        yield* runCalls(calls, sent, { earlier, mayAsk: resuming })
      })

    if (input.code !== undefined) {
      yield* event("codemode", { stage: "start", code: input.code })
      const ran = yield* runCode(
        input.code,
        input.requestId,
        input.resume === undefined ? new Map() : yield* hooks.sentToolCalls
      )
      yield* event("codemode", { stage: "end", ok: ran.ok, ...(ran.limit === undefined ? {} : { limit: ran.limit }) })
      const executed: ExecuteResult = {
        ok: ran.ok,
        ...(ran.result === undefined ? {} : { value: ran.result }),
        logs: ran.logs,
        error: ran.error === undefined ? null : `${ran.error.name}: ${ran.error.message}`,
        ...(ran.limit === undefined ? {} : { limit: ran.limit }),
        messages: hooks.historySize(),
        toolErrors,
        toolCalls,
        ...(toolSet.sourceErrors.length === 0 ? {} : { sourceErrors: toolSet.sourceErrors })
      }
      return { result: executed, ...(uncertain ? { uncertain } : {}) } satisfies TurnOutcome
    }

    let reply: { text: string; index: number } | undefined
    let error: string | null = null
    let code: string | undefined
    let stopped: "turn_limit" | "spend_limit" | "input_required" | undefined
    let handoff = false
    let finished: boolean
    const maxRounds = input.config.maxTurns ?? defaultMaxRounds

    /** After a step: steered prompts join, and a node handing on stops here. Whether the turn goes on. */
    const afterStep = (calls: number) =>
      Effect.gen(function*() {
        const steered = yield* hooks.takeSteered
        for (const prompt of steered) yield* addUser(prompt)
        if (calls === 0 && steered.length === 0) return false
        if (hooks.handingOff()) {
          handoff = true
          return false
        }
        return true
      })

    /** Calls answered before the turn goes on may ask a person again: then the turn waits once more. */
    const suspendIfWaiting = Effect.gen(function*() {
      if (waiting.length === 0) return false
      yield* suspend
      stopped = "input_required"
      return true
    })

    if (input.resume === undefined) {
      const began = hooks.historySize()
      yield* answerEarlier(began)
      yield* compactIfNeeded(input.text)
      yield* event("turn_opened", { index: began })
      yield* event("agent_start")
      finished = yield* suspendIfWaiting
      if (!input.continue && !finished) yield* addUser(input)
    } else {
      yield* answerEarlier(input.resume.began)
      finished = yield* suspendIfWaiting
      for (const prompt of input.resume.unjournaled) yield* addUser(prompt)
      // The step the lost node was in: a final response ends the turn; unanswered calls are answered first.
      const history = hooks.history()
      const last = history.findLastIndex((message) => message.role === "assistant")
      if (last >= input.resume.began) {
        const message = history[last] as ModelClient.AssistantMessage
        const answered = new Set(
          history.slice(last + 1).flatMap((entry) => entry.role === "toolResult" ? [entry.toolCallId] : [])
        )
        const calls = toolCallsOf(message).filter((call) => !answered.has(call.id))
        const text = textOf(message)
        if (text !== "") reply = { text, index: last }
        if (finished) {
          // Waiting on a person again.
        } else if (toolCallsOf(message).length === 0 && last === history.length - 1) {
          finished = !(yield* afterStep(0)) && !handoff
        } else if (calls.length > 0) {
          yield* runCalls(calls, yield* hooks.sentToolCalls)
          finished = (yield* suspendIfWaiting) || (!(yield* afterStep(calls.length)) && !handoff)
        }
      }
    }

    for (let round = 0; round < maxRounds && !finished && !handoff; round++) {
      if (yield* hooks.overBudget) {
        stopped = "spend_limit"
        yield* event("spend_limit_reached")
        break
      }
      yield* event("turn_start")
      yield* hooks.durable
      const index = hooks.historySize()
      let started = false
      let partial: ModelClient.AssistantMessage | undefined
      /** How much of each call's arguments was told as deltas (see `toldArgumentsLimit`). */
      const argumentsTold = new Map<number, number>()
      const context: ModelClient.Context = {
        ...(systemPrompt === "" ? {} : { systemPrompt }),
        messages: modelContext(hooks.history()),
        ...(modelTools.length === 0 ? {} : { tools: modelTools })
      }
      const onEvent = (modelEvent: ModelClient.ResponseEvent): Effect.Effect<void> => {
        switch (modelEvent.type) {
          case "start":
            started = true
            return event("message_start", { index, message: { role: "assistant", content: [] } })
          case "auto_retry_start":
            // What the failed attempt streamed is taken back before the retry.
            return Effect.zipRight(
              started ? event("message_retracted", { index }) : Effect.void,
              Effect.suspend(() => {
                started = false
                argumentsTold.clear()
                const { type: _type, ...fields } = modelEvent
                return event("auto_retry_start", fields)
              })
            )
          case "auto_retry_end": {
            const { type: _type, ...fields } = modelEvent
            return event("auto_retry_end", fields)
          }
          default: {
            const { partial: latest, ...delta } = modelEvent
            partial = latest
            if (delta.type === "toolcall_delta") {
              const told = (argumentsTold.get(delta.contentIndex) ?? 0) + delta.delta.length
              argumentsTold.set(delta.contentIndex, told)
              if (told > toldArgumentsLimit) return Effect.void
            }
            return event("message_update", { index, assistantMessageEvent: delta })
          }
        }
      }
      const response = yield* Effect.flatMap(target, (resolved) =>
        models.respond({
          target: resolved,
          tenantId: input.tenantId,
          keyScope: Option.fromNullable(input.config.keyScope),
          model: input.config.model,
          context,
          reasoning: input.config.thinkingLevel === undefined || input.config.thinkingLevel === "off"
            ? undefined
            : input.config.thinkingLevel as ModelClient.ThinkingLevel,
          modelHeaders: input.config.modelHeaders,
          usage: { kind: "response", ...usageOf(input) }
        }, onEvent)).pipe(
          Effect.either,
          // Aborted mid-response: what was said so far stays in history. A node stopping keeps nothing:
          // the next owner asks again.
          Effect.onInterrupt(() =>
            !hooks.aborting() || partial === undefined || partial.content.length === 0
              ? Effect.void
              : Effect.gen(function*() {
                const kept = { ...partial!, stopReason: "aborted" as const }
                yield* hooks.append(index, kept)
                yield* event("message_end", { index, message: kept })
                yield* event("turn_end", { aborted: true })
                yield* event("agent_end")
              })
          )
        )
      if (response._tag === "Left") {
        const failure = response.left
        if (started) yield* event("message_retracted", { index })
        error = failure.message
        code = runErrorCode(failure)
        yield* event("turn_end", { error })
        break
      }
      const message = response.right
      yield* hooks.append(index, message)
      yield* event("message_end", { index, message })
      const text = textOf(message)
      if (text !== "") reply = { text, index }

      const calls = toolCallsOf(message)
      if (calls.length > 0) yield* runCalls(calls, new Map())
      if (yield* suspendIfWaiting) {
        yield* event("turn_end")
        break
      }
      yield* event("turn_end")
      if (!(yield* afterStep(calls.length))) break
      if (round === maxRounds - 1) stopped = "turn_limit"
    }
    if (handoff) {
      const handedOn: TurnOutcome = {
        result: { messages: hooks.historySize(), error: null, toolErrors, toolCalls },
        handoff
      }
      return handedOn
    }
    yield* event("agent_end")
    const result: RunResult = {
      ...(reply === undefined ? {} : { reply: reply.text, replyIndex: reply.index }),
      messages: hooks.historySize(),
      error,
      ...(stopped === undefined ? {} : { stopped }),
      ...(inputs === undefined ? {} : { inputs }),
      toolErrors,
      toolCalls,
      ...(written.size === 0 ? {} : { files: [...written.values()] }),
      ...(presented.length === 0 ? {} : { presented }),
      ...(toolSet.sourceErrors.length === 0 ? {} : { sourceErrors: toolSet.sourceErrors })
    }
    const outcome: TurnOutcome = {
      result,
      ...(code === undefined ? {} : { code }),
      ...(uncertain ? { uncertain } : {})
    }
    return outcome
  })
