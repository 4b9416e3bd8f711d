/**
 * The agent actor: one cluster entity per agent id, with typed messages.
 * A prompt is durable once its request row is in the journal, which the
 * sender writes (see `requestOf`) before it hands the row to the owner: the
 * message itself is volatile, and a sender that got no answer sends it again
 * (the owner queues a row once). Abort and configure, which act at once, are
 * persisted messages keyed by their request id, so a redelivery after a move
 * runs nothing twice. Reads are volatile.
 */
import { type Agent as AgentSchemas, Application, CanonicalJson, Input, Run } from "@agent-runtime/domain"
import { ClusterSchema, Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Cause, Effect, Schedule, Schema } from "effect"
import * as Crypto from "node:crypto"
import {
  AnswerRefused,
  ApplicationConnected,
  CallEnded,
  ConnectionReplaced,
  ConnectionUnknown,
  Draining,
  ReplayGap
} from "./AgentError.ts"
import { type AgentConfig, ApplicationTool, type NewRequest, RequestRow } from "./AgentStore.ts"
import { parseTools } from "./internal/applicationWire.ts"

/** A file attached to a prompt, as the agent sees it: inline files are already saved in its workspace. */
export const AttachedFile = Schema.Struct({
  path: Schema.String,
  contentType: Schema.String,
  size: Schema.Number
})
export type AttachedFile = typeof AttachedFile.Type

/** A prompt as its sender asks for it; recorded as a request row (`requestOf`) before its owner is told. */
export const PromptRequest = Schema.Struct({
  requestId: Schema.String,
  /** continue runs a turn on the history as it is, without a new user message; execute runs `code`. */
  method: Schema.optional(Schema.Literal("prompt", "continue", "execute")),
  /** Hash of the request's input: the same request id with another input is a conflict. */
  fingerprint: Schema.String,
  text: Schema.String,
  code: Schema.optional(Schema.String),
  /** How long an execute request's code may run (default Codemode's wall time). */
  timeoutMs: Schema.optional(Schema.Number),
  actor: Schema.optional(Schema.String),
  from: Schema.optional(Input.Sender),
  whileRunning: Schema.optional(Run.WhileRunning),
  metadata: Schema.optional(Run.PromptMetadata),
  spendLimit: Schema.optional(Schema.Struct({ usd: Schema.Number })),
  /** Runs though the application is not connected: its calls fail at once as not connected, without waiting. */
  allowDisconnected: Schema.optional(Schema.Boolean),
  files: Schema.optional(Schema.Array(AttachedFile)),
  /** Structured output: the JSON Schema its answer must fit (see StructuredOutput). */
  output: Schema.optional(Schema.Struct({ schema: Schema.Record({ key: Schema.String, value: Schema.Unknown }) })),
  /** The caller's W3C trace context: the run's spans continue its trace (see TraceExport). */
  traceparent: Schema.optional(Schema.String)
})
export type PromptRequest = typeof PromptRequest.Type

/** The request row a prompt is recorded as. An execute request's input is its code: its record shows no prompt. */
export const requestOf = (agentId: string, prompt: PromptRequest): NewRequest => ({
  agentId,
  id: prompt.requestId,
  method: prompt.method ?? "prompt",
  fingerprint: prompt.fingerprint,
  input: {
    ...(prompt.code === undefined ? { text: prompt.text } : { code: prompt.code }),
    ...(prompt.timeoutMs === undefined ? {} : { timeoutMs: prompt.timeoutMs }),
    ...(prompt.actor === undefined ? {} : { actor: prompt.actor }),
    ...(prompt.from === undefined ? {} : { from: prompt.from }),
    ...(prompt.metadata === undefined ? {} : { metadata: prompt.metadata }),
    ...(prompt.spendLimit === undefined ? {} : { spendLimit: prompt.spendLimit }),
    ...(prompt.allowDisconnected === true ? { allowDisconnected: true } : {}),
    ...(prompt.files === undefined ? {} : { files: prompt.files }),
    ...(prompt.output === undefined ? {} : { output: prompt.output }),
    ...(prompt.traceparent === undefined ? {} : { traceparent: prompt.traceparent })
  }
})

/** A recorded request handed to the agent's owner to queue, or, steering, to join the running turn. */
export const PromptPayload = Schema.Struct({
  request: RequestRow,
  whileRunning: Schema.optional(Run.WhileRunning)
})

/**
 * A stable digest of a request body: the same key or request id with another body is a conflict. The
 * canonical encoding covers the whole body, nested objects too, whatever order its keys came in.
 */
export const fingerprint = (value: unknown) =>
  Crypto.createHash("sha256").update(CanonicalJson.encode(value)).digest("hex").slice(0, 32)

/** One display event as the owner's log holds it. */
export const LoggedEvent = Schema.Struct({ id: Schema.Number, data: Schema.Unknown })

/**
 * How often a Watch stream carries a keep-alive (`id` -1, no data) when no
 * event flows, so a reader on another node can tell a quiet stream from one
 * whose owner went away.
 */
export const watchKeepAlive = "2 seconds"

export const Status = Schema.Struct({
  cursor: Schema.Number,
  running: Schema.Boolean,
  /** Whether an application connection serves the agent's tools. */
  connected: Schema.Boolean,
  activeRequest: Schema.NullOr(Schema.String),
  queued: Schema.Array(Schema.String)
})
export type Status = typeof Status.Type

export const AbortPayload = Schema.Struct({
  requestId: Schema.String,
  fingerprint: Schema.String
})

/** The application's tools as declared (`mcp.tools`), parsed, and the hash of what was declared. */
export const DeclaredTools = Schema.Struct({ tools: Schema.Array(ApplicationTool), hash: Schema.String })
export type DeclaredTools = typeof DeclaredTools.Type

/** Settings a configure request changes (absent fields stay, null removes), and tools it declares. */
export const ConfigurePayload = Schema.Struct({
  requestId: Schema.String,
  fingerprint: Schema.String,
  changes: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  tools: Schema.optional(DeclaredTools)
})

/** What `mcp.tools` declares, as the agent keeps it. */
export const declaredTools = (mcp: AgentSchemas.McpTools): DeclaredTools => ({
  tools: parseTools(mcp.tools),
  hash: Application.toolsHash(mcp.tools)
})

/** Answers to an agent's inputs (see Inputs.answer), and who gave them: the credential used. */
export const AnswerPayload = Schema.Struct({
  answers: Schema.Array(Schema.Struct({
    id: Schema.String,
    action: Input.InputAction,
    content: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    from: Schema.optional(Input.Sender),
    actor: Schema.optional(Schema.String)
  })),
  by: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})

/** The answered inputs as they stand, and the runs resuming turns whose last input settled. */
export const AnswerResult = Schema.Struct({
  inputs: Schema.Array(Input.Input),
  requests: Schema.Array(Run.RequestRecord)
})

/** A definition's settings as a configure applies them to an agent made from it (see `applyChanges`). */
export interface DefinitionSettings {
  readonly id: string
  readonly revision: number
  readonly model?: string | undefined
  readonly systemPrompt?: string | undefined
  readonly thinkingLevel?: string | undefined
  readonly fileTools?: boolean | undefined
  readonly builtins: ReadonlyArray<string>
  readonly delegate?: unknown
  readonly humanInput?: AgentConfig["humanInput"]
}

/** What a definition's revision (as stored or as resolved) supplies to its agents: never its secrets. */
export const definitionSettings = (
  definition: Omit<DefinitionSettings, "builtins"> & {
    readonly builtins: ReadonlyArray<string>
  }
): DefinitionSettings => ({
  id: definition.id,
  revision: definition.revision,
  ...(definition.model === undefined ? {} : { model: definition.model }),
  ...(definition.systemPrompt === undefined ? {} : { systemPrompt: definition.systemPrompt }),
  ...(definition.thinkingLevel === undefined ? {} : { thinkingLevel: definition.thinkingLevel }),
  ...(definition.fileTools === undefined ? {} : { fileTools: definition.fileTools }),
  builtins: definition.builtins,
  ...(definition.delegate === undefined ? {} : { delegate: definition.delegate }),
  ...(definition.humanInput === undefined ? {} : { humanInput: definition.humanInput })
})

/** Settings an agent made from a definition may set for itself, kept when the definition is re-applied. */
const ownable = ["model", "thinkingLevel", "fileTools"] as const

/**
 * The settings after a configure's changes: absent fields stay, null removes, and so does an empty
 * systemPromptAppend. A `definition` change (re-applying a definition) sets what the definition supplies,
 * except the fields the agent set itself (`own`); systemPromptAppend is never the definition's. On an agent
 * made from a definition, a model, thinkingLevel or fileTools configured is its own from then on. The entity
 * applies a configure with it; an upsert asks it whether there is anything to apply, so the two cannot
 * disagree.
 */
export const applyChanges = (config: AgentConfig, changes: Readonly<Record<string, unknown>>): AgentConfig => {
  const next: Record<string, unknown> = { ...config }
  const { definition, ...rest } = changes as { readonly definition?: DefinitionSettings | null }
  // null: the agent leaves its definition (an upsert without one), keeping the settings it has.
  if (definition === null) delete next.definition
  else if (definition !== undefined) {
    const own = new Set<string>(config.own ?? [])
    const supplied = (field: string, value: unknown) => {
      if (own.has(field)) return
      if (value === undefined) delete next[field]
      else next[field] = value
    }
    // A definition without a model leaves the model the agent has.
    if (definition.model !== undefined) supplied("model", definition.model)
    supplied("thinkingLevel", definition.thinkingLevel)
    supplied("fileTools", definition.fileTools)
    for (
      const [field, value] of Object.entries({
        systemPrompt: definition.systemPrompt,
        builtins: definition.builtins,
        delegate: definition.delegate,
        humanInput: definition.humanInput
      })
    ) {
      if (value === undefined) delete next[field]
      else next[field] = value
    }
    next.definition = { id: definition.id, revision: definition.revision }
  }
  const own = new Set<string>((next.own as ReadonlyArray<string> | undefined) ?? [])
  for (const [field, value] of Object.entries(rest)) {
    if (value === null || (field === "systemPromptAppend" && value === "")) delete next[field]
    else next[field] = value
    if (next.definition !== undefined && (ownable as ReadonlyArray<string>).includes(field)) {
      if (value === null) own.delete(field)
      else own.add(field)
    }
  }
  if (own.size > 0 && next.definition !== undefined) next.own = [...own].sort()
  else delete next.own
  return next as AgentConfig
}

/**
 * What the owner sends down an application connection's stream (Connect), to whichever node serves it
 * (see ApplicationConnection).
 */
export const Frame = Schema.Union(
  Schema.TaggedStruct("Ready", { connection: Schema.String, toolsHash: Schema.NullOr(Schema.String) }),
  Schema.TaggedStruct("Mcp", { message: Schema.Unknown }),
  /** The connection was taken over and its calls are done: the stream ends, with no reconnect. */
  Schema.TaggedStruct("Closed", { reason: Schema.Literal("replaced") }),
  /** Sent while nothing else is, so the serving node can tell a quiet owner from a lost one. */
  Schema.TaggedStruct("KeepAlive", {})
)
export type Frame = typeof Frame.Type

/** Where a watcher that missed events resumes: the running turn so far, at a cursor. */
export const Snapshot = Schema.Struct({
  cursor: Schema.Number,
  requestId: Schema.NullOr(Schema.String),
  turn: Schema.Array(Schema.Unknown)
})
export type Snapshot = typeof Snapshot.Type

export const Agent = Entity.make("Agent", [
  /** Queues a recorded request (once per request id); answers its record as it stands. */
  Rpc.make("Prompt", { payload: PromptPayload.fields, success: Run.RequestRecord }),
  /** Cancels queued runs and stops the running turn at once, keeping what was said. */
  Rpc.make("Abort", {
    payload: AbortPayload.fields,
    success: Run.RequestRecord,
    primaryKey: (payload) => payload.requestId
  }).annotate(ClusterSchema.Persisted, true),
  /** Changes settings at once, ahead of queued runs. */
  Rpc.make("Configure", {
    payload: ConfigurePayload.fields,
    success: Run.RequestRecord,
    primaryKey: (payload) => payload.requestId
  }).annotate(ClusterSchema.Persisted, true),
  /**
   * Records answers to the agent's inputs, all or none; the suspension whose last input they settle
   * resumes, once. Not persisted: an answer is idempotent, so a caller that got no reply sends it again.
   */
  Rpc.make("Answer", { payload: AnswerPayload.fields, success: AnswerResult, error: AnswerRefused }),
  /** Settles the agent's pending inputs whose time is up (sent by every node's expiry sweep). */
  Rpc.make("ExpireInputs"),
  /** Loads unfinished work from the journal; sent after restarts so accepted work goes on. */
  Rpc.make("Wake"),
  Rpc.make("Status", { success: Status }),
  Rpc.make("Snapshot", { success: Snapshot }),
  Rpc.make("Watch", {
    payload: { cursor: Schema.optional(Schema.Number) },
    success: LoggedEvent,
    error: ReplayGap,
    stream: true
  }),
  /** Attaches an application connection's stream (see ApplicationConnection). */
  Rpc.make("Connect", {
    payload: { connection: Schema.optional(Schema.String), takeover: Schema.Boolean },
    success: Frame,
    error: Schema.Union(ApplicationConnected, Draining),
    stream: true
  }),
  /** A message from the application on its connection. */
  Rpc.make("Mcp", {
    payload: { connection: Schema.String, message: Application.JsonRpcMessage },
    error: Schema.Union(ConnectionUnknown, ConnectionReplaced, CallEnded)
  }),
  /** The node serving a connection's stream still holds it. */
  Rpc.make("Heartbeat", { payload: { connection: Schema.String }, error: ConnectionUnknown }),
  /** Whether a connection serves the agent's tools, waiting up to `waitMillis` for one. */
  Rpc.make("AwaitConnected", { payload: { waitMillis: Schema.Number }, success: Schema.Boolean }),
  /**
   * Answers once the request settles here, or at once when it is not open here (settled, or never seen: the
   * caller reads the journal); false when the wait ended first or the agent moved.
   */
  Rpc.make("AwaitResponse", {
    payload: { requestId: Schema.String, waitMillis: Schema.Number },
    success: Schema.Boolean
  }),
  Rpc.make("Poll", {
    payload: { cursor: Schema.Number, waitMillis: Schema.Number },
    success: Schema.Struct({ cursor: Schema.Number, events: Schema.Array(LoggedEvent) }),
    error: ReplayGap
  })
])

/**
 * A stateless run's entity (see Runs): the agent's protocol and behaviour under another entity type, so its
 * runner lets it go soon after it goes idle instead of holding every ended run for minutes.
 */
export const StatelessRun = Entity.fromRpcGroup("StatelessRun", Agent.protocol)

/** Whether `id` names a stateless run rather than an agent. */
export const isRunId = (id: string) => id.startsWith("run_")

/** The entity client of an agent or a stateless run, by its id. */
export const entityClient = Effect.map(
  Effect.zip(Agent.client, StatelessRun.client),
  ([agent, run]) => (id: string) => isRunId(id) ? run(id) : agent(id)
)

/**
 * Sends a volatile message again when its handler was cut short because the agent moved to another runner
 * (a drain, a rebalance): the reply is then an interruption, and the next owner answers the next send. Only
 * for messages that are idempotent, such as a Prompt under its request id.
 */
export const sentUntilAnswered = <A, E, R>(send: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  send.pipe(
    Effect.sandbox,
    Effect.retry({
      while: (cause) => Cause.isInterruptedOnly(cause),
      schedule: Schedule.spaced("200 millis"),
      times: 50
    }),
    Effect.unsandbox
  )

/**
 * A stored request as the API shows it. Built from our own rows, it skips the constructor's validation (a
 * walk over every value, the outcome's included, on each read): the API encodes it against its schema anyway.
 */
export const toRecord = (row: RequestRow): Run.RequestRecord => {
  const outcome = row.outcome as StoredOutcome | null
  const error = outcome === null ? undefined : errorOf(outcome)
  const input = row.input as { text?: string; metadata?: Record<string, string>; suspension?: string }
  return new Run.RequestRecord({
    id: row.id,
    method: row.method as Run.RequestMethod,
    state: row.state === "completed" ? "completed" : "running",
    fingerprint: row.fingerprint,
    startedAt: row.startedAt,
    ...(row.beganIndex === null ? {} : { began: row.beganIndex }),
    ...(row.endedAt === null ? {} : { endedAt: row.endedAt }),
    ...(input.text === undefined ? {} : { prompt: input.text }),
    ...(input.suspension === undefined ? {} : { suspension: input.suspension }),
    ...(input.metadata === undefined ? {} : { metadata: input.metadata }),
    ...(row.steeredInto === null ? {} : { steeredInto: row.steeredInto }),
    ...(outcome?.code === undefined ? {} : { code: outcome.code }),
    ...(outcome === null ? {} : { outcome: toOutcome(outcome) }),
    ...(error === undefined ? {} : { error }),
    ...(outcome?.result?.stopped === undefined ? {} : { stopped: outcome.result.stopped })
  }, { disableValidation: true })
}

/** A request's outcome as the journal stores it. */
export type StoredOutcome = {
  readonly result?: { readonly error?: string | null; readonly stopped?: Run.StoppedReason }
  readonly error?: string
  readonly uncertain?: boolean
  readonly code?: string
}

/** A stored outcome's error, its own or its result's: what a record's `error` says. */
export const errorOf = (outcome: StoredOutcome): string | undefined =>
  outcome.error ?? outcome.result?.error ?? undefined

/** A stored outcome as a record's `outcome` (see `toRecord`). */
export const toOutcome = (outcome: StoredOutcome): Run.RunOutcome =>
  new Run.RunOutcome({
    ...(outcome.result === undefined ? {} : { result: outcome.result }),
    ...(outcome.error === undefined ? {} : { error: outcome.error }),
    ...(outcome.uncertain === undefined ? {} : { uncertain: outcome.uncertain })
  }, { disableValidation: true })
