/**
 * Agents: what creating (or upserting) one takes, what reading one shows,
 * their tools, forks and the agent's own credentials. The agent's own
 * credential cannot change keyScope, spendLimit or modelHeaders; only the
 * account may.
 */
import { Schema } from "effect"
import { StringMap, Timestamp } from "./Common.ts"
import { EventEntry } from "./Events.ts"
import { ModelHeaders } from "./Provider.ts"
import { PromptInput, RequestRecord, RunError, SpendLimitInput } from "./Run.ts"
import { jsonBytes, JsonObject, KiB, MiB } from "./Validation.ts"

export { SpendLimitInput } from "./Run.ts"

export const AgentId = Schema.String.pipe(Schema.pattern(/^client_[A-Za-z0-9]+$/)).annotations({
  description: "agent id: client_ and 40 lowercase hex digits (the first 12 its creation time)"
})
export type AgentId = typeof AgentId.Type

/** A caller-chosen key: upserting by it returns the same agent with the same history. */
export const AgentKey = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{1,80}$/, { message: () => "must be 1 to 80 characters of A-Z a-z 0-9 _ -" })
).annotations({ description: "1 to 80 characters of A-Z a-z 0-9 _ -" })
export type AgentKey = typeof AgentKey.Type

export const ThinkingLevel = Schema.Literal("off", "minimal", "low", "medium", "high", "xhigh", "max")
export type ThinkingLevel = typeof ThinkingLevel.Type

/** Built-in tools; `delegate` is configured by the agent's delegate settings. */
export const Builtin = Schema.Literal("web_fetch", "web_search", "schedule", "ask_user", "delegate")
export type Builtin = typeof Builtin.Type

export const Builtins = Schema.Array(Builtin).pipe(
  Schema.maxItems(8, { message: () => "at most 8 builtins" })
).annotations({ description: "at most 8" })
export type Builtins = typeof Builtins.Type

/** Settings of the delegate builtin. */
export class DelegateSettings extends Schema.Class<DelegateSettings>("DelegateSettings")({
  agents: Schema.Array(Schema.String).annotations({ description: "the agents it may delegate to" }),
  instructions: Schema.optional(Schema.String),
  maxDepth: Schema.optional(Schema.Int.pipe(Schema.positive())),
  maxParallel: Schema.optional(Schema.Int.pipe(Schema.positive()))
}) {}

export const MountMode = Schema.Literal("ro", "rw")
export type MountMode = typeof MountMode.Type

/** A volume mounted into the agent's file system. */
export class Mount extends Schema.Class<Mount>("Mount")({
  volumeId: Schema.String,
  path: Schema.String.annotations({ description: "where file tools see it" }),
  mode: MountMode,
  subpath: Schema.optional(Schema.String.annotations({ description: "mount only this directory" })),
  notify: Schema.optional(
    Schema.Boolean.annotations({ description: "prompt the agent when others change files under it" })
  )
}) {}

/** An agent's spend limit as read back: the limit and the spend since it was set. */
export class SpendLimit extends Schema.Class<SpendLimit>("SpendLimit")({
  usd: Schema.Number,
  spent: Schema.Number.annotations({ description: "USD spent since the limit was set" })
}) {}

/** ttlSeconds: 60 to 31622400, or null to live until deleted. */
export const AgentTtl = Schema.NullOr(
  Schema.Int.pipe(Schema.between(60, 31622400, { message: () => "must be an integer from 60 to 31622400, or null" }))
).annotations({ description: "60 to 31622400 seconds, or null to live until deleted" })
export type AgentTtl = typeof AgentTtl.Type

/** Lifetime of an agent made without a key, when none is given. */
export const defaultTtlSeconds = 86400

/** Claims for tool servers, carried as `ctx` in identity tokens; at most 4 KB of JSON. */
export const AgentContext = JsonObject.pipe(
  Schema.filter((context) => jsonBytes(context) <= 4 * KiB || "must be at most 4 KB of JSON")
).annotations({ description: "claims for tool servers, carried as ctx; at most 4 KB of JSON" })
export type AgentContext = typeof AgentContext.Type

export const InitialMessageRole = Schema.Literal("user", "assistant", "toolResult", "compactionSummary")
export type InitialMessageRole = typeof InitialMessageRole.Type

/** A starting history message; a compactionSummary stands in for all before it. */
export const InitialMessage = Schema.Struct({ role: InitialMessageRole }, JsonObject).annotations({
  identifier: "InitialMessage"
})
export type InitialMessage = typeof InitialMessage.Type

export const InitialMessages = Schema.Array(InitialMessage).pipe(
  Schema.filter((messages) => jsonBytes(messages) <= 16 * MiB || "must be at most 16 MB of JSON")
).annotations({ description: "starting history; only at creation; at most 16 MB of JSON" })
export type InitialMessages = typeof InitialMessages.Type

/**
 * A tool the application serves, declared as MCP's tools/list names it (name, description, inputSchema,
 * `_meta`, and whatever else MCP adds). Kept as sent, key order included: the ready frame's `toolsHash` is
 * computed from it (see Application.toolsHash).
 */
export const McpTool = JsonObject.pipe(
  Schema.filter((tool) => {
    if (typeof tool.name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(tool.name)) {
      return { path: ["name"], message: "must be 1 to 64 of A-Z a-z 0-9 _ -" }
    }
    if (tool.description !== undefined && typeof tool.description !== "string") {
      return { path: ["description"], message: "must be a string" }
    }
    const schema = tool.inputSchema
    if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
      return { path: ["inputSchema"], message: "must be a JSON Schema object" }
    }
    return true
  })
).annotations({ identifier: "McpTool", description: "an MCP tool: name, description, inputSchema, _meta" })

/** The application's tools, declared before it connects (the camelRun client's `mcp.tools`). */
export const McpTools = Schema.Struct({
  tools: Schema.Array(McpTool).pipe(
    Schema.maxItems(256, { message: () => "must be at most 256 tools" }),
    Schema.filter((tools) =>
      new Set(tools.map((tool) => tool.name)).size === tools.length || "must name each tool once"
    ),
    Schema.filter((tools) => jsonBytes(tools) <= MiB || "must be at most 1 MB of JSON")
  )
}).annotations({
  identifier: "McpTools",
  description: "the application's tools as its tools/list would answer; an application that connects and " +
    "lists its tools replaces them"
})
export type McpTools = typeof McpTools.Type

/** Bounds of each turn; the turn ends with stopped turn_limit at the first step boundary past one. */
export const RunLimits = Schema.Struct({
  maxResponses: Schema.optional(
    Schema.Int.pipe(Schema.between(1, 1000)).annotations({
      description: "model responses a turn may take, 1 to 1000 (default 25)"
    })
  ),
  maxSeconds: Schema.optional(
    Schema.Int.pipe(Schema.between(1, 86400)).annotations({
      description: "seconds a turn may run, counted from when it began, 1 to 86400"
    })
  )
}).annotations({ identifier: "RunLimits", parseOptions: { onExcessProperty: "error" } })
export type RunLimits = typeof RunLimits.Type

const systemPromptText = Schema.String.pipe(
  Schema.maxLength(32000, { message: () => "must be at most 32000 characters" })
)

/** Body of POST /v1/agents (and of the upsert by key). */
/**
 * What may not be given beside a definition, which supplies it: a systemPrompt (systemPromptAppend adds to
 * the definition's) and builtins. True when nothing conflicts; `what` names what is made (an agent, a run).
 */
export const definitionConflict = (
  input: {
    readonly definition?: string | undefined
    readonly systemPrompt?: string | undefined
    readonly builtins?: ReadonlyArray<string> | undefined
  },
  what: string
) => {
  if (input.definition === undefined) return true
  if (input.systemPrompt !== undefined) {
    return {
      path: ["systemPrompt"],
      message: "systemPrompt cannot be combined with a definition; use systemPromptAppend"
    }
  }
  if (input.builtins !== undefined) {
    return { path: ["builtins"], message: `builtins are only for ${what} without a definition` }
  }
  return true
}

export class AgentInput extends Schema.Class<AgentInput>("AgentInput")(
  Schema.Struct({
    definition: Schema.optional(
      Schema.String.annotations({
        description: "definition id; supplies model, system prompt, thinking level, fileTools, tool sources"
      })
    ),
    name: Schema.optional(
      Schema.String.annotations({ description: "the id when none given; an upsert applies it (left out: the id)" })
    ),
    type: Schema.optional(
      Schema.String.annotations({ description: "an upsert applies it (left out: none, shown as agent)" })
    ),
    model: Schema.optional(
      Schema.String.annotations({ description: "id from GET /v1/models; the runtime default if omitted" })
    ),
    systemPrompt: Schema.optional(
      systemPromptText.annotations({ description: "at most 32000 characters; not with a definition" })
    ),
    systemPromptAppend: Schema.optional(
      systemPromptText.annotations({ description: "text after the system prompt; at most 32000 characters" })
    ),
    thinkingLevel: Schema.optional(ThinkingLevel),
    initialMessages: Schema.optional(InitialMessages),
    fileTools: Schema.optional(
      Schema.Boolean.annotations({ description: "false: only present_file among the file tools" })
    ),
    ttlSeconds: Schema.optional(
      AgentTtl.annotations({
        description: "60 to 31622400 seconds, or null to live until deleted; an upsert counts it again from now " +
          "(left out: until deleted)"
      })
    ),
    mounts: Schema.optional(
      Schema.Array(Mount).annotations({
        description: "default a new workspace volume at /workspace; an upsert replaces the agent's mounts with " +
          "these, checked as at creation (left out: the mounts stay)"
      })
    ),
    subject: Schema.optional(
      Schema.String.annotations({ description: "who the agent acts for; `sub` of identity tokens; only at creation" })
    ),
    context: Schema.optional(
      AgentContext.annotations({
        description: "claims for tool servers, carried as ctx; at most 4 KB of JSON; only at creation"
      })
    ),
    builtins: Schema.optional(Builtins),
    delegate: Schema.optional(DelegateSettings),
    keyScope: Schema.optional(
      Schema.String.annotations({ description: "key scope whose keys model calls use first" })
    ),
    spendLimit: Schema.optional(SpendLimitInput),
    modelHeaders: Schema.optional(ModelHeaders),
    mcp: Schema.optional(McpTools),
    runLimits: Schema.optional(RunLimits),
    prompt: Schema.optional(PromptInput)
  }).pipe(Schema.filter((input) => definitionConflict(input, "an agent")))
) {}

/** Loads of unfinished work that failed or found no room, and when the next attempt may happen. */
export class AgentResume extends Schema.Class<AgentResume>("AgentResume")({
  failures: Schema.Number,
  after: Timestamp
}) {}

export class AgentSummary extends Schema.Class<AgentSummary>("AgentSummary")({
  id: AgentId,
  key: Schema.NullOr(Schema.String).annotations({
    description: "the key it was made with: an upsert key or the Idempotency-Key of POST /v1/agents"
  }),
  name: Schema.String.annotations({ description: "the id when none given" }),
  type: Schema.String,
  model: Schema.String,
  connected: Schema.Boolean,
  running: Schema.Boolean,
  expiresAt: Schema.NullOr(Timestamp),
  resume: Schema.NullOr(AgentResume)
}) {}

/** The first prompt was refused (spend limit, capacity, model); the agent is made regardless. */
export class PromptRefused extends Schema.Class<PromptRefused>("PromptRefused")({
  error: RunError
}) {}

/** Response of POST /v1/agents; further properties may be present. */
export class AgentCreated extends Schema.Class<AgentCreated>("AgentCreated")({
  id: AgentId,
  token: Schema.String.annotations({ description: "the agent's scoped credential for /clients routes" }),
  expiresAt: Schema.NullOr(Timestamp),
  reconfigured: Schema.optional(
    Schema.Struct({ id: Schema.String }).annotations({
      description: "present when a keyed agent's settings changed: the configure request that changed them"
    })
  ),
  prompt: Schema.optional(
    Schema.Union(RequestRecord, PromptRefused).annotations({
      description: "the first prompt's request when accepted, or {error} when refused"
    })
  )
}) {}

export class DefinitionRef extends Schema.Class<DefinitionRef>("DefinitionRef")({
  id: Schema.String,
  revision: Schema.Number
}) {}

/** Default: both for an agent with up to 10 tools, codemode above that. */
export const ToolExposure = Schema.Literal("direct", "codemode", "both")
export type ToolExposure = typeof ToolExposure.Type

export const ToolExecutionMode = Schema.Literal("sequential", "parallel")
export type ToolExecutionMode = typeof ToolExecutionMode.Type

/** A tool the application declared. */
export class ToolDefinition extends Schema.Class<ToolDefinition>("ToolDefinition")({
  name: Schema.String,
  description: Schema.String,
  parameters: JsonObject.annotations({ description: "JSON Schema object of the arguments" }),
  exposure: Schema.optional(ToolExposure),
  executionMode: Schema.optional(ToolExecutionMode)
}) {}

export const ToolSourceKind = Schema.Literal("channel", "application", "files", "builtin", "mcp", "openapi")
export type ToolSourceKind = typeof ToolSourceKind.Type

/** unlisted = MCP server not yet listed on this node; error = listing failed, so the model has none of its tools. */
export const ToolSourceStatus = Schema.Literal("listed", "unlisted", "error")
export type ToolSourceStatus = typeof ToolSourceStatus.Type

export class ToolSourceTool extends Schema.Class<ToolSourceTool>("ToolSourceTool")({
  name: Schema.String,
  description: Schema.String,
  exposure: Schema.optional(ToolExposure),
  executionMode: Schema.optional(ToolExecutionMode),
  parameters: Schema.optional(JsonObject.annotations({ description: "when schemas=true" })),
  excluded: Schema.optional(Schema.String.annotations({ description: "why the model does not get it" }))
}) {}

export class ToolSource extends Schema.Class<ToolSource>("ToolSource")({
  kind: ToolSourceKind,
  name: Schema.String,
  status: ToolSourceStatus,
  tools: Schema.Array(ToolSourceTool),
  error: Schema.optional(Schema.String),
  listedAt: Schema.optional(Timestamp),
  connected: Schema.optional(Schema.Boolean.annotations({ description: "application sources only" })),
  url: Schema.optional(Schema.String),
  exposure: Schema.optional(ToolExposure)
}) {}

/** GET /v1/agents/{id}. */
export class AgentDetail extends Schema.Class<AgentDetail>("AgentDetail")({
  ...AgentSummary.fields,
  definition: Schema.optional(Schema.NullOr(DefinitionRef)),
  tools: Schema.Array(ToolDefinition).annotations({ description: "those the application declared" }),
  toolSources: Schema.Array(ToolSource).annotations({ description: "in order of precedence" }),
  mounts: Schema.Array(Mount),
  systemPrompt: Schema.String,
  systemPromptAppend: Schema.optional(Schema.String),
  fileTools: Schema.optional(
    Schema.Literal(false).annotations({ description: "only present, as false, when the model has only present_file" })
  ),
  keyScope: Schema.NullOr(Schema.String),
  modelHeaders: Schema.NullOr(StringMap),
  builtins: Schema.Array(Builtin),
  spendLimit: Schema.NullOr(SpendLimit),
  cursor: Schema.Number,
  events: Schema.Array(EventEntry),
  requests: Schema.Array(RequestRecord),
  busy: Schema.optional(Schema.Boolean),
  activeRun: Schema.optional(Schema.Unknown),
  queuedRuns: Schema.optional(Schema.Unknown)
}) {}

/** An agent's credentials: GET /v1/agents/{keyOrId}/credentials. */
export class AgentCredentials extends Schema.Class<AgentCredentials>("AgentCredentials")({
  id: AgentId,
  token: Schema.String,
  expiresAt: Schema.NullOr(Timestamp)
}) {}

/** Body of POST /v1/agents/{id}/fork. */
export class ForkInput extends Schema.Class<ForkInput>("ForkInput")({
  key: Schema.optional(AgentKey.annotations({ description: "forking again with the same key returns the same fork" })),
  name: Schema.optional(Schema.String),
  atMessage: Schema.optional(
    Schema.Union(Schema.Int.pipe(Schema.nonNegative()), Schema.String).annotations({
      description: "history index or request id; default the last finished turn"
    })
  ),
  ttlSeconds: Schema.optional(AgentTtl),
  subject: Schema.optional(Schema.String),
  context: Schema.optional(AgentContext),
  systemPromptAppend: Schema.optional(systemPromptText),
  modelHeaders: Schema.optional(ModelHeaders)
}) {}

export class ForkedFrom extends Schema.Class<ForkedFrom>("ForkedFrom")({
  agentId: AgentId,
  atMessage: Schema.Number.annotations({ description: "the history index the copy ends at" })
}) {}

export class ForkCreated extends Schema.Class<ForkCreated>("ForkCreated")({
  ...AgentCredentials.fields,
  forkedFrom: ForkedFrom
}) {}

/** A configure request; no other fields are allowed. */
export class ConfigureInput extends Schema.Class<ConfigureInput>("ConfigureInput")(
  Schema.Struct({
    requestId: Schema.optional(Schema.String.pipe(Schema.minLength(1))),
    model: Schema.optional(Schema.String),
    systemPrompt: Schema.optional(
      Schema.String.pipe(
        Schema.minLength(1, { message: () => "must be at least 1 character" }),
        Schema.maxLength(32000, { message: () => "must be at most 32000 characters" })
      )
    ),
    systemPromptAppend: Schema.optional(systemPromptText.annotations({ description: "empty removes" })),
    thinkingLevel: Schema.optional(ThinkingLevel),
    keyScope: Schema.optional(Schema.NullOr(Schema.String).annotations({ description: "null = tenant keys" })),
    spendLimit: Schema.optional(
      Schema.NullOr(SpendLimitInput).annotations({ description: "a new budget from now; null removes" })
    ),
    modelHeaders: Schema.optional(
      Schema.NullOr(ModelHeaders).annotations({ description: "replaces; null or empty removes" })
    ),
    builtins: Schema.optional(
      Builtins.annotations({ description: "replaces; [] removes; not for an agent made from a definition" })
    ),
    mounts: Schema.optional(
      Schema.Array(Mount).annotations({
        description: "replaces the agent's mounts, checked as at creation; [] removes them all; a running turn " +
          "keeps the mounts it began with, the next one sees these; not over the agent's own token"
      })
    ),
    runLimits: Schema.optional(Schema.NullOr(RunLimits).annotations({ description: "replaces; null removes" })),
    mcp: Schema.optional(McpTools)
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** The agent's name and type, set over its own token (POST /clients/{id}/metadata); no other fields. */
export class AgentMetadataInput extends Schema.Class<AgentMetadataInput>("AgentMetadataInput")(
  Schema.Struct({
    name: Schema.optional(Schema.String.annotations({ description: "left out: unchanged" })),
    type: Schema.optional(Schema.String.annotations({ description: "left out: unchanged" }))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** The agent's name and type as they are now. */
export class AgentMetadata extends Schema.Class<AgentMetadata>("AgentMetadata")({
  id: AgentId,
  name: AgentSummary.fields.name,
  type: AgentSummary.fields.type
}) {}

/** The mounts of PUT /v1/agents/{id}/mounts: the agent's whole set, as ConfigureInput's `mounts`. */
export class MountsInput extends Schema.Class<MountsInput>("MountsInput")(
  Schema.Struct({
    mounts: Schema.Array(Mount).annotations({
      description: "replaces the agent's mounts, checked as at creation; [] removes them all"
    })
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}
