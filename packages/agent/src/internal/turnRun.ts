/**
 * What one run of the turn loop holds while it runs: its input and hooks, the
 * model target resolved once, its tool set, and the tally its result reports
 * (calls made, errors, files written and presented, calls waiting on a
 * person). The turn's steps (`internal/toolCalls.ts`, `internal/modelStep.ts`,
 * `internal/compaction.ts`) take it as their first argument.
 */
import { Codemode } from "@agent-runtime/codemode"
import type { Input } from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import type { ModelError } from "@agent-runtime/models"
import { ModelClient } from "@agent-runtime/models"
import { PersistenceError } from "@agent-runtime/store"
import { NodeSpans } from "@agent-runtime/telemetry"
import { type Context, Effect, Either, Exit, Option } from "effect"
import type { AttachedFile } from "../Agent.ts"
import * as StructuredOutput from "../StructuredOutput.ts"
import * as Tools from "../Tools.ts"
import type { Steered, StoredMessage, ToolCallRecord, TurnHooks, TurnInput, Waiting } from "../Turn.ts"
import * as Workspace from "../Workspace.ts"
import { estimateTokens } from "./modelContext.ts"

/** What a run's result reports, gathered as it goes. */
export interface Tally {
  readonly toolCalls: Array<ToolCallRecord>
  readonly written: Map<string, NonNullable<Tools.ToolResult["written"]>>
  readonly presented: Array<NonNullable<Tools.ToolResult["presented"]>>
  toolErrors: number
  /** A call a lost node sent came back without a result: whether it took effect is unknown. */
  uncertain: boolean
  /** Calls of this run waiting on a person; the turn stops after their step. */
  readonly waiting: Array<Waiting>
  /** The inputs the turn waits on, once recorded. */
  inputs: ReadonlyArray<Input.Input> | undefined
}

type Models = Context.Tag.Service<typeof ModelClient.ModelClient>

/** A structured turn's output schema, and how forcing its tool has gone. */
export interface Structured {
  readonly schema: Record<string, unknown>
  /** Requests of the turn that forced the tool (at most `StructuredOutput.maxForced`). */
  forced: number
  /** The provider refused a forced tool: the rest of the turn asks without forcing. */
  forceRefused: boolean
  /** The model answered in prose once and was reminded. */
  reminded: boolean
}

export interface TurnRun {
  readonly input: TurnInput
  readonly hooks: TurnHooks
  readonly models: Models
  /** The model's provider and limits, resolved once for all the turn's calls (one unsealing per turn). */
  readonly target: ReturnType<Models["resolve"]>
  readonly volumes: Context.Tag.Service<typeof Volumes.Volumes>
  readonly toolSet: Tools.ToolSet
  readonly modelTools: ReadonlyArray<ModelClient.Tool>
  readonly systemPrompt: string
  /** The estimated tokens of the system prompt and tools, which every request of the run sends. */
  readonly fixedTokens: number
  /** Set for a turn whose prompt asks for structured output. */
  readonly structured: Structured | undefined
  readonly tally: Tally
  readonly needsApproval: (tool: Tools.Tool) => boolean
  /** Emits one display event of this run. */
  readonly event: (type: string, fields?: Record<string, unknown>) => Effect.Effect<void>
}

/**
 * The code-mode tool of each tool list seen lately, by its content, with its estimated tokens: every turn lists
 * its tools anew, and declaring them (each schema written out as a type) cost more than the turn's other tool
 * work; measuring the declaration again cost a turn about as much as looking it up.
 */
const codemodeTools = new Map<string, { readonly tool: ModelClient.Tool; readonly tokens: number }>()
const maxCodemodeTools = 500

const codemodeToolOf = (tools: ReadonlyArray<Tools.Tool>) => {
  const key = JSON.stringify(tools.map((tool) => [tool.name, tool.description, tool.parameters]))
  let known = codemodeTools.get(key)
  if (known === undefined) {
    if (codemodeTools.size >= maxCodemodeTools) codemodeTools.clear()
    const tool = codemodeTool(tools)
    known = { tool, tokens: estimateTokens(tool) }
    codemodeTools.set(key, known)
  }
  return known
}

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

/**
 * `effect`, run once and its outcome kept (failures too); an interrupted run is run again on the next call.
 * For a turn's callers, which ask one after another: `Effect.cached` serves concurrent callers through a
 * semaphore and reads the clock on every call, about 30 steps a call, twice or more a turn.
 */
export const keptOnceDone = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> => {
  let kept: Exit.Exit<A, E> | undefined
  return Effect.suspend(() =>
    kept ?? Effect.onExit(effect, (exit) =>
      Effect.sync(() => {
        if (!Exit.isInterrupted(exit)) kept = exit
      }))
  )
}

/** Sets a run up: resolves its model once, lists its tools, and starts an empty tally. */
export const make = (input: TurnInput, hooks: TurnHooks) =>
  starting(input, hooks).pipe(NodeSpans.withSpan("Turn.start"))

const starting = Effect.fnUntraced(function*(input: TurnInput, hooks: TurnHooks) {
  const models = yield* ModelClient.ModelClient
  const target = keptOnceDone(models.resolve({
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
  // The estimate of what every request sends besides the history, worked out part by part.
  let toolTokens = estimateTokens(modelTools)
  if (toolSet.code.length > 0) {
    const codemode = codemodeToolOf(toolSet.code)
    modelTools.push(codemode.tool)
    toolTokens += codemode.tokens
  }
  // A tool of the agent's own by that name keeps it; the turn then ends output_invalid (see Turn.run).
  if (input.output !== undefined && !toolSet.direct.has(StructuredOutput.toolName)) {
    const structuredTool = StructuredOutput.tool(input.output.schema)
    modelTools.push(structuredTool)
    toolTokens += estimateTokens(structuredTool)
  }
  const approvals = input.config.humanInput?.approvals ?? []
  const systemPrompt = [
    input.config.systemPrompt,
    input.config.systemPromptAppend,
    input.output === undefined ? undefined : StructuredOutput.instruction
  ].filter((part) => part !== undefined && part !== "").join("\n\n")
  const run: TurnRun = {
    input,
    hooks,
    models,
    target,
    volumes,
    toolSet,
    modelTools,
    systemPrompt,
    // Once a run, not before each of its requests: the tools' schemas written out are most of it.
    fixedTokens: estimateTokens(systemPrompt) + toolTokens,
    structured: input.output === undefined
      ? undefined
      : { schema: input.output.schema, forced: 0, forceRefused: false, reminded: false },
    tally: {
      toolCalls: [],
      written: new Map(),
      presented: [],
      toolErrors: 0,
      uncertain: false,
      waiting: [],
      inputs: undefined
    },
    needsApproval: (tool) =>
      tool.needsApproval === true ||
      approvals.some((approval) =>
        approval.tool === tool.name && (approval.source === undefined || approval.source === tool.source)
      ),
    event: (type, fields = {}) => hooks.emit({ type, ...fields })
  }
  return run
})

/**
 * A database fault under the model client (a key lookup, a usage record) is not the model's failure: the turn
 * stops with it as a defect, its runner stops, and the agent's work resumes from the journal once the
 * database is back (see runRequest).
 */
export const stopOnDatabaseFault = PersistenceError.orDie

/** Counts a finished call: its error, the file it wrote or presented, and the call (the first 100 are listed). */
export const recordCall = (run: TurnRun, entry: ToolCallRecord, result: Tools.ToolResult) => {
  const { tally } = run
  if (result.isError) tally.toolErrors++
  if (result.written !== undefined && (tally.written.size < 100 || tally.written.has(result.written.path))) {
    tally.written.set(result.written.path, result.written)
  }
  if (result.presented !== undefined && tally.presented.length < 20) tally.presented.push(result.presented)
  if (tally.toolCalls.length < 100) {
    tally.toolCalls.push({
      ...entry,
      ...(result.code === undefined ? {} : { code: result.code }),
      ...(result.agentId === undefined ? {} : { agentId: result.agentId })
    })
  }
}

/** Who a response's usage is counted for: the agent, the run, and who acts in it. */
export const usageOf = (input: TurnInput) => ({
  agentId: input.agentId,
  requestId: input.requestId,
  subject: input.config.subject,
  actor: input.actor ?? input.from?.id,
  context: input.config.context
})

export const runErrorCode = (error: ModelError.ModelError) =>
  error._tag === "ModelKeyMissing"
    ? "model_key_missing"
    : error._tag === "ModelKeyInvalid"
    ? "model_key_invalid"
    : undefined

export const textOf = (message: ModelClient.AssistantMessage) =>
  message.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("")

export const toolCallsOf = (message: StoredMessage) =>
  message.role === "assistant" ? message.content.flatMap((part) => part.type === "toolCall" ? [part] : []) : []

export type ToolCall = ReturnType<typeof toolCallsOf>[number]

/** Images the providers' protocols take in a user message. */
const imageTypes = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"])

/** The prompt's text naming its files, then the images among them for the model to see. */
const withAttachments = (run: TurnRun, text: string, files: ReadonlyArray<AttachedFile>) =>
  Effect.gen(function*() {
    const named = files.map((file) => `- ${file.path} (${file.contentType}, ${file.size} bytes)`).join("\n")
    const images: Array<{ type: "image"; data: string; mimeType: string }> = []
    for (const file of files) {
      const mimeType = file.contentType.split(";")[0]!.trim()
      if (!imageTypes.has(mimeType)) continue
      const resolved = Workspace.resolve(run.input.config.mounts ?? [], file.path)
      if (Either.isLeft(resolved)) continue
      // A file gone since the prompt was accepted is still named; the model is told it in the text only.
      const read = yield* Effect.option(
        stopOnDatabaseFault(run.volumes.read(run.input.tenantId, resolved.right.volumeId, resolved.right.path))
      )
      if (Option.isSome(read)) {
        images.push({ type: "image", data: Buffer.from(read.value.bytes).toString("base64"), mimeType })
      }
    }
    return [{ type: "text" as const, text: `${text}\n\nAttached files:\n${named}` }, ...images]
  })

/** Appends a prompt as the user's message, its files named and its images shown. */
export const addUser = (run: TurnRun, prompt: Steered) =>
  Effect.gen(function*() {
    const index = run.hooks.historySize()
    const user: StoredMessage = {
      role: "user",
      content: prompt.files === undefined || prompt.files.length === 0
        ? prompt.text
        : yield* withAttachments(run, prompt.text, prompt.files),
      timestamp: Date.now(),
      requestId: prompt.requestId,
      ...(prompt.metadata === undefined ? {} : { metadata: prompt.metadata }),
      ...(prompt.from === undefined ? {} : { from: prompt.from })
    }
    yield* run.event("message_start", { index, message: user })
    yield* run.hooks.append(index, user)
    yield* run.event("message_end", { index, message: user })
  })
