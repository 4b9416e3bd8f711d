/**
 * Definitions: reusable agent templates. Each change makes a new revision;
 * an agent made from a definition keeps the revision it was made from until
 * it is moved to a newer one. A definition supplies the model, the system
 * prompt, the thinking level, fileTools, builtins and the tool sources (remote
 * MCP servers and OpenAPI documents) its agents call.
 */
import { Schema } from "effect"
import { Builtins, DelegateSettings, ThinkingLevel, ToolExposure } from "./Agent.ts"
import { Timestamp } from "./Common.ts"
import { JsonObject } from "./Validation.ts"

export const DefinitionId = Schema.String.pipe(Schema.pattern(/^def_[A-Za-z0-9]+$/)).annotations({
  description: "definition id (def_...)"
})

const SourceName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/, { message: () => "1 to 64 characters of A-Z a-z 0-9 _ -" })
)

const Names = Schema.Array(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128))).pipe(Schema.maxItems(256))

/** Which of a source's tools the model gets: only those included (when given), never those excluded. */
export class ToolFilter extends Schema.Class<ToolFilter>("ToolFilter")({
  include: Schema.optional(Names),
  exclude: Schema.optional(Names)
}) {}

const Secret = Schema.String.pipe(
  Schema.minLength(1),
  Schema.maxLength(4096),
  Schema.pattern(/^\S+$/, { message: () => "must not contain whitespace" })
)

const HeaderName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$/, { message: () => "must be an HTTP header name" }),
  Schema.filter((name) =>
    !["host", "content-length", "transfer-encoding", "connection", "x-agent-runtime-identity"].includes(
      name.toLowerCase()
    ) || "may not be a transport header or x-agent-runtime-identity"
  )
)

/**
 * How the runtime authenticates to a tool source. bearer: the token as bearer
 * authorization (sealed at rest, never returned; left out on an update it
 * keeps the same-named source's token). runtime: a fresh identity token per
 * request (see docs/identity.md). header: a named header with a secret value
 * (OpenAPI sources only; kept like a bearer token).
 */
export const SourceAuthInput = Schema.Union(
  Schema.Struct({ type: Schema.Literal("none") }),
  Schema.Struct({ type: Schema.Literal("bearer"), token: Schema.optional(Secret) }),
  Schema.Struct({ type: Schema.Literal("runtime") }),
  Schema.Struct({ type: Schema.Literal("header"), name: HeaderName, value: Schema.optional(Secret) })
).annotations({ identifier: "SourceAuthInput" })
export type SourceAuthInput = typeof SourceAuthInput.Type

/** A source's auth as shown: the type, and for secrets only their last four characters. */
export class SourceAuth extends Schema.Class<SourceAuth>("SourceAuth")({
  type: Schema.Literal("none", "bearer", "runtime", "header"),
  name: Schema.optional(Schema.String.annotations({ description: "header auth: the header's name" })),
  last4: Schema.optional(Schema.String.annotations({ description: "bearer and header auth" }))
}) {}

const httpUrl = Schema.String.pipe(
  Schema.maxLength(2048),
  Schema.filter((url) => URL.canParse(url) && /^https?:$/.test(new URL(url).protocol) || "must be an https URL")
)

const sourceFields = {
  name: SourceName.annotations({ description: "unique within the definition; names the source in toolSources" }),
  exposure: Schema.optional(
    ToolExposure.annotations({ description: "for all its tools; default by the agent's tool count" })
  )
}

export class McpSourceInput extends Schema.Class<McpSourceInput>("McpSourceInput")({
  kind: Schema.Literal("mcp"),
  ...sourceFields,
  url: httpUrl.annotations({ description: "the server's streamable HTTP endpoint; https and public" }),
  auth: Schema.optional(SourceAuthInput.annotations({ description: "default none" })),
  tools: Schema.optional(ToolFilter)
}) {}

export class OpenApiSourceInput extends Schema.Class<OpenApiSourceInput>("OpenApiSourceInput")(
  Schema.Struct({
    kind: Schema.Literal("openapi"),
    ...sourceFields,
    url: Schema.optional(httpUrl.annotations({ description: "where the OpenAPI 3.x document is; or document" })),
    document: Schema.optional(JsonObject.annotations({ description: "the OpenAPI 3.x document itself; or url" })),
    baseUrl: Schema.optional(httpUrl.annotations({ description: "replaces the document's servers[0].url" })),
    auth: Schema.optional(SourceAuthInput.annotations({ description: "default none" })),
    operations: Schema.optional(ToolFilter.annotations({ description: "by operationId" }))
  }).pipe(
    Schema.filter((source) =>
      (source.url === undefined) !== (source.document === undefined) ||
      { path: ["url"], message: "give exactly one of url and document" }
    )
  )
) {}

export const ToolSourceInput = Schema.Union(McpSourceInput, OpenApiSourceInput)
export type ToolSourceInput = typeof ToolSourceInput.Type

/** A definition's tool source as shown: its settings without secrets. */
export class ToolSourceSettings extends Schema.Class<ToolSourceSettings>("ToolSourceSettings")({
  kind: Schema.Literal("mcp", "openapi"),
  name: Schema.String,
  url: Schema.optional(Schema.String),
  document: Schema.optional(Schema.Boolean.annotations({ description: "openapi: the document was given inline" })),
  baseUrl: Schema.optional(Schema.String),
  auth: SourceAuth,
  tools: Schema.optional(ToolFilter),
  operations: Schema.optional(ToolFilter),
  exposure: Schema.optional(ToolExposure)
}) {}

const ToolSources = Schema.Array(ToolSourceInput).pipe(
  Schema.maxItems(16, { message: () => "at most 16 tool sources" }),
  Schema.filter((sources) =>
    new Set(sources.map((source) => source.name)).size === sources.length || "tool source names must be unique"
  )
)

/**
 * Human input a definition's agents ask for: the tools whose calls need a
 * person's approval first, who may approve besides the turn's sender or
 * actor, and how long an input waits before it expires.
 */
export class HumanInputSettings extends Schema.Class<HumanInputSettings>("HumanInputSettings")(
  Schema.Struct({
    approvals: Schema.optional(
      Schema.Array(
        Schema.Struct({
          tool: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128)),
          source: Schema.optional(
            Schema.String.annotations({
              description: "the tool source's name (builtins, application, or a source); default any"
            })
          )
        }).annotations({ parseOptions: { onExcessProperty: "error" } })
      ).pipe(Schema.maxItems(64, { message: () => "at most 64 tools" })).annotations({
        description: "tools whose calls wait for a person's approval; at most 64"
      })
    ),
    approvers: Schema.optional(
      Schema.Array(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200))).pipe(
        Schema.maxItems(100, { message: () => "at most 100 approvers" })
      ).annotations({ description: "ids (the `from.id` of answers) who may answer besides the input's audience" })
    ),
    expiresInSeconds: Schema.optional(
      Schema.Int.pipe(Schema.between(5, 604800, { message: () => "must be an integer from 5 to 604800" }))
        .annotations({ description: "how long an input waits before it expires; default 86400 (a day)" })
    )
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

const prompt = Schema.String.pipe(Schema.maxLength(32000, { message: () => "must be at most 32000 characters" }))
const name = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(80))
const description = Schema.String.pipe(Schema.maxLength(500))

/** Body of POST /v1/definitions; no other fields are allowed. */
export class DefinitionInput extends Schema.Class<DefinitionInput>("DefinitionInput")(
  Schema.Struct({
    name,
    description: Schema.optional(description),
    model: Schema.optional(Schema.String.annotations({ description: "id from GET /v1/models" })),
    systemPrompt: Schema.optional(prompt),
    thinkingLevel: Schema.optional(ThinkingLevel),
    fileTools: Schema.optional(Schema.Boolean),
    builtins: Schema.optional(Builtins),
    delegate: Schema.optional(DelegateSettings),
    humanInput: Schema.optional(HumanInputSettings),
    toolSources: Schema.optional(ToolSources.annotations({ description: "in order of precedence; at most 16" }))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** Body of PATCH /v1/definitions/{id}: what is given changes (null removes), and makes a new revision. */
export class DefinitionUpdate extends Schema.Class<DefinitionUpdate>("DefinitionUpdate")(
  Schema.Struct({
    name: Schema.optional(name),
    description: Schema.optional(Schema.NullOr(description)),
    model: Schema.optional(Schema.NullOr(Schema.String)),
    systemPrompt: Schema.optional(Schema.NullOr(prompt)),
    thinkingLevel: Schema.optional(Schema.NullOr(ThinkingLevel)),
    fileTools: Schema.optional(Schema.NullOr(Schema.Boolean)),
    builtins: Schema.optional(Builtins.annotations({ description: "replaces; [] removes" })),
    delegate: Schema.optional(Schema.NullOr(DelegateSettings)),
    humanInput: Schema.optional(Schema.NullOr(HumanInputSettings)),
    toolSources: Schema.optional(ToolSources.annotations({ description: "replaces the list" }))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** A definition at one revision. */
export class Definition extends Schema.Class<Definition>("Definition")({
  id: DefinitionId,
  revision: Schema.Int.annotations({ description: "1 at creation; each update adds one" }),
  name: Schema.String,
  description: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  systemPrompt: Schema.optional(Schema.String),
  thinkingLevel: Schema.optional(ThinkingLevel),
  fileTools: Schema.optional(Schema.Boolean),
  builtins: Builtins,
  delegate: Schema.optional(DelegateSettings),
  humanInput: Schema.optional(HumanInputSettings),
  toolSources: Schema.Array(ToolSourceSettings),
  createdAt: Timestamp,
  updatedAt: Timestamp.annotations({ description: "when this revision was made" })
}) {}

/** Body of POST /v1/agents/{id}/definition: re-applies the agent's definition at a revision. */
export class DefinitionApply extends Schema.Class<DefinitionApply>("DefinitionApply")(
  Schema.Struct({
    revision: Schema.optional(Schema.Int.pipe(Schema.positive()).annotations({ description: "default the latest" })),
    requestId: Schema.optional(Schema.String.pipe(Schema.minLength(1)))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}
