/**
 * The REST API as one `HttpApi` definition, one group per area. The server
 * implements the groups and the OpenAPI document is generated from here.
 */
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Effect, JSONSchema, ParseResult, Schema } from "effect"
import type { ParseOptions } from "effect/SchemaAST"
import {
  AgentCreated,
  AgentCredentials,
  AgentDetail,
  AgentInput,
  AgentKey,
  AgentMetadata,
  AgentMetadataInput,
  AgentSummary,
  ConfigureInput,
  ForkCreated,
  ForkInput,
  Mount,
  MountsInput
} from "./Agent.ts"
import * as ApiError from "./ApiError.ts"
import { ConnectionHeaders, JsonRpcMessage, McpAccepted } from "./Application.ts"
import { AgentAuthentication, Authentication, OperatorAuthentication } from "./Auth.ts"
import {
  AutoTopup,
  AutoTopupInput,
  Billing,
  BillingSettingsInput,
  Checkout,
  CheckoutInput,
  LedgerEntry,
  LedgerEntryInput,
  TenantBillingInput,
  Usage,
  UsageParams
} from "./Billing.ts"
import { created, Deleted, Page, PageParams } from "./Common.ts"
import { Definition, DefinitionApply, DefinitionInput, DefinitionUpdate } from "./Definition.ts"
import { Jwks, KeyRotated } from "./Identity.ts"
import { AnswerInput, AnswerInputs, InputList, InputState } from "./Input.ts"
import { Me } from "./Me.ts"
import { Model } from "./Model.ts"
import { OAuthGrant, SignInLink, SignInLinkInput } from "./OAuth.ts"
import {
  CustomProviderInput,
  KeyInput,
  KeyScope,
  KeyScopeEntry,
  KeyScopeEntryInput,
  KeySet,
  Provider
} from "./Provider.ts"
import { Answered, AnsweredAll, ContinueInput, ExecuteInput, PromptInput, RequestRecord } from "./Run.ts"
import { DrainStarted, RunnerList } from "./Runner.ts"
import { Schedule, ScheduleInput } from "./Schedule.ts"
import {
  BrowserToken,
  BrowserTokenInput,
  EventPoll,
  History,
  HistoryPage,
  maxWholeHistoryBytes,
  SessionState,
  Upload
} from "./Session.ts"
import { RunAccepted, RunInput, RunParams, StatelessRun } from "./StatelessRun.ts"
import { TelemetryCleared, TelemetryInput, TelemetrySettings, TelemetryTestResult } from "./Telemetry.ts"
import { Tenant, TenantCreated, TenantInput } from "./Tenant.ts"
import { Token, TokenCreated, TokenInput } from "./Token.ts"
import {
  AgentFile,
  AgentFileList,
  AgentFileListParams,
  ChangesParams,
  FileChanges,
  FileLink,
  FileLinkInput,
  FileLinkParams,
  FileList,
  FileListParams,
  FileParams,
  FileWriteParams,
  maxChangesKept,
  maxChangesPerPage,
  SnapshotInput,
  Volume,
  VolumeFile,
  VolumeForkInput,
  VolumeInput,
  VolumeSnapshot
} from "./Volume.ts"
import {
  AttemptParams,
  DeliveryParams,
  Resent,
  UsageWebhook,
  UsageWebhookCreated,
  UsageWebhookInput,
  WebhookAttempt,
  WebhookDelivery,
  WebhookEndpoint,
  WebhookEndpointCreated,
  WebhookEndpointInput,
  WebhookEndpointUpdate,
  WebhookSecret
} from "./Webhook.ts"

const idParam = HttpApiSchema.param("id", Schema.String)
const providerParam = HttpApiSchema.param("provider", Schema.String)
const runnerAddressParam = HttpApiSchema.param(
  "address",
  Schema.String.annotations({ description: "the runner's host:port (URL-encoded)" })
)
const nameParam = HttpApiSchema.param(
  "name",
  Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,80}$/)).annotations({
    description: "1 to 80 characters of A-Z a-z 0-9 _ -"
  })
)
const scopeParam = HttpApiSchema.param(
  "scope",
  Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,80}$/)).annotations({
    description: "1 to 80 characters of A-Z a-z 0-9 _ -"
  })
)

/** The `{data, next}` wrapper, only where another wire format asks for it; other lists answer a bare array. */
const List = Page

/**
 * How a body a client sends is decoded: a field the schema does not know is refused, at any depth (a misspelt
 * `spendLimit` would otherwise be dropped and the client believe it took effect), and every problem is named,
 * not only the first. The OpenAPI document already says `additionalProperties: false` for these.
 */
export const payloadOptions: ParseOptions = { onExcessProperty: "error", errors: "all" }

/**
 * A request body's schema, decoded with `payloadOptions` wherever it is decoded (the API, the hot routes) and
 * encoded so by the typed client. Only inputs: answers, records and stored rows keep ignoring fields they do
 * not know, so an older row or a newer server's answer still decodes.
 */
export const payload = <A, I, R>(schema: Schema.Schema<A, I, R>): Schema.Schema<A, I, R> =>
  schema.annotations({ parseOptions: payloadOptions })

export class HealthGroup extends HttpApiGroup.make("health", { topLevel: true })
  .add(
    HttpApiEndpoint.get("healthz", "/healthz")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ok") }))
      .annotate(OpenApi.Description, "The process is up.")
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ready") }))
      .addError(ApiError.Unavailable.Wire)
      .annotate(OpenApi.Description, "200 while serving; 503 while starting or draining.")
  )
  .annotate(OpenApi.Title, "Health")
{}

export class MeGroup extends HttpApiGroup.make("me")
  .add(HttpApiEndpoint.get("get", "/v1/me").addSuccess(Me))
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Account")
{}

export class TokensGroup extends HttpApiGroup.make("tokens")
  .add(
    HttpApiEndpoint.post("create", "/v1/tokens")
      .setPayload(payload(TokenInput))
      .addSuccess(TokenCreated, created)
      .addError(ApiError.Forbidden.Wire)
      .annotate(
        OpenApi.Description,
        "Creates an API key; the key itself is shown only in this answer. An OAuth access token gets 403: a " +
          "connected application cannot mint itself a key that outlives its grant."
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/tokens")
      .setUrlParams(PageParams)
      .addSuccess(Schema.Array(Token))
      .annotate(OpenApi.Description, "The tenant's API keys, oldest first, without their secrets.")
  )
  .add(
    HttpApiEndpoint.del("revoke")`/v1/tokens/${idParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Revokes an API key; calls with it fail with 401 from then on.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Tokens")
{}

export class OAuthGroup extends HttpApiGroup.make("oauth")
  .add(
    HttpApiEndpoint.get("listGrants", "/v1/oauth/grants")
      .addSuccess(Schema.Array(OAuthGrant))
      .annotate(
        OpenApi.Description,
        "Connected applications: the coding agents (MCP clients) someone of the tenant allowed to act as it, " +
          "newest first."
      )
  )
  .add(
    HttpApiEndpoint.del("revokeGrant")`/v1/oauth/grants/${idParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Revokes a connected application's grant: its access and refresh tokens stop at once, on every node."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Connected apps")
{}

const definitionParam = HttpApiSchema.param("id", Schema.String)

export class DefinitionsGroup extends HttpApiGroup.make("definitions")
  .add(
    HttpApiEndpoint.post("create", "/v1/definitions")
      .setPayload(payload(DefinitionInput))
      .setHeaders(Schema.Struct({
        "idempotency-key": Schema.optional(AgentKey.annotations({
          description: "upserts the tenant's definition under this key (a UUID will do)"
        }))
      }))
      .addSuccess(Definition, created)
      .annotate(
        OpenApi.Description,
        "A reusable agent template at revision 1. Tool source URLs are checked like every URL the runtime " +
          "calls (https, public addresses); secrets (bearer tokens, header values) are sealed and never returned. " +
          "With Idempotency-Key, an upsert by key: the first call creates the definition (201); the same key " +
          "again answers the same definition (200), as it was when the body says what its latest revision " +
          "says, else at a next revision holding the body (a source's secret left out keeps the same-named " +
          "source's). Deleting the definition frees its key."
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/definitions")
      .setUrlParams(PageParams)
      .addSuccess(Schema.Array(Definition))
      .annotate(OpenApi.Description, "The tenant's definitions at their latest revisions, by id.")
  )
  .add(
    HttpApiEndpoint.get("get")`/v1/definitions/${definitionParam}`
      .setUrlParams(Schema.Struct({
        revision: Schema.optional(
          Schema.NumberFromString.pipe(Schema.int(), Schema.positive()).annotations({
            description: "an earlier revision; default the latest",
            jsonSchema: { type: "integer", minimum: 1 }
          })
        )
      }))
      .addSuccess(Definition)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.patch("update")`/v1/definitions/${definitionParam}`
      .setPayload(payload(DefinitionUpdate))
      .addSuccess(Definition)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Writes the next revision: given fields change (null removes), the rest is kept; toolSources replaces " +
          "the list, and a source's secret left out keeps the same-named source's. Agents stay on their revision " +
          "until moved (POST /v1/agents/{id}/definition, or an upsert naming the definition)."
      )
  )
  .add(
    HttpApiEndpoint.del("remove")`/v1/definitions/${definitionParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "No new agent can be made from it; agents made from it keep running their revision."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Definitions")
{}

const scheduleParam = HttpApiSchema.param("scheduleId", Schema.String)

export class SchedulesGroup extends HttpApiGroup.make("schedules")
  .add(
    HttpApiEndpoint.post("create")`/v1/agents/${idParam}/schedules`
      .setPayload(payload(ScheduleInput))
      .addSuccess(Schedule, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(
        OpenApi.Description,
        "A prompt delivered to the agent at a time (at, or inSeconds from now; default now), and every " +
          "everySeconds after when given. A due schedule fires once across the cluster; times missed while no " +
          "node ran fire once, not once each. At most 100 per agent."
      )
  )
  .add(
    HttpApiEndpoint.get("listForAgent")`/v1/agents/${idParam}/schedules`
      .addSuccess(Schema.Array(Schedule))
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "The agent's schedules, soonest first.")
  )
  .add(
    HttpApiEndpoint.del("cancel")`/v1/agents/${idParam}/schedules/${scheduleParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/schedules")
      .addSuccess(Schema.Array(Schedule))
      .annotate(OpenApi.Description, "Every schedule of the tenant's agents, soonest first (at most 1000).")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Schedules")
{}

export class ModelsGroup extends HttpApiGroup.make("models")
  .add(
    HttpApiEndpoint.get("list", "/v1/models")
      .addSuccess(List(Model))
      .annotate(
        OpenApi.Description,
        "Every model an agent may name: the catalog and the tenant's own providers; `available` when a key is at hand."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Models")
{}

export class ProvidersGroup extends HttpApiGroup.make("providers")
  .add(
    HttpApiEndpoint.get("list", "/v1/providers")
      .addSuccess(Schema.Array(Provider))
      .annotate(OpenApi.Description, "Built-in and custom providers with the status of their keys; never a secret.")
  )
  .add(
    HttpApiEndpoint.get("get")`/v1/providers/${nameParam}`
      .addSuccess(Provider)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.put("put")`/v1/providers/${nameParam}`
      .setPayload(payload(CustomProviderInput))
      .addSuccess(Provider)
      .annotate(
        OpenApi.Description,
        "Creates or replaces a custom provider. apiKey and headers: omitted keeps what is stored, null removes it."
      )
  )
  .add(
    HttpApiEndpoint.del("delete")`/v1/providers/${nameParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Providers")
{}

export class KeysGroup extends HttpApiGroup.make("keys")
  .add(
    HttpApiEndpoint.put("put")`/v1/keys/${providerParam}`
      .setPayload(payload(KeyInput))
      .addSuccess(KeySet)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Sets the tenant's key for a built-in provider (source tenant; admin when the operator sets it). " +
          "With verify (the default) the key is checked with the provider first; an invalid key is not stored."
      )
  )
  .add(
    HttpApiEndpoint.del("delete")`/v1/keys/${providerParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Keys")
{}

export class KeyScopesGroup extends HttpApiGroup.make("keyScopes")
  .add(HttpApiEndpoint.get("list", "/v1/key-scopes").addSuccess(Schema.Array(KeyScope)))
  .add(
    HttpApiEndpoint.get("get")`/v1/key-scopes/${scopeParam}`
      .addSuccess(KeyScope)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.del("delete")`/v1/key-scopes/${scopeParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Removes the scope's entries and its own providers.")
  )
  .add(
    HttpApiEndpoint.put("putEntry")`/v1/key-scopes/${scopeParam}/providers/${providerParam}`
      .setPayload(payload(Schema.Union(KeyScopeEntryInput, KeyInput)))
      .addSuccess(Schema.Union(KeyScopeEntry, KeySet))
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Sets the scope's entry for a built-in provider. A KeyScopeEntryInput answers the entry; " +
          "a KeyInput (apiKey with verify) checks the key first and answers a KeySet."
      )
  )
  .add(
    HttpApiEndpoint.del("deleteEntry")`/v1/key-scopes/${scopeParam}/providers/${providerParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.put("putProvider")`/v1/key-scopes/${scopeParam}/model-providers/${nameParam}`
      .setPayload(payload(CustomProviderInput))
      .addSuccess(Provider)
  )
  .add(
    HttpApiEndpoint.get("getProvider")`/v1/key-scopes/${scopeParam}/model-providers/${nameParam}`
      .addSuccess(Provider)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.del("deleteProvider")`/v1/key-scopes/${scopeParam}/model-providers/${nameParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Key scopes")
{}

const agentParam = HttpApiSchema.param("id", Schema.String)
const requestParam = HttpApiSchema.param("requestId", Schema.String)
/** More than 25 waits 25: camelRun's client sends what its caller asked, and times its read by the 25. */
const waitSeconds = Schema.transform(
  Schema.NumberFromString.pipe(Schema.nonNegative()),
  Schema.Number.pipe(Schema.between(0, 25)),
  { strict: true, decode: (seconds) => Math.min(seconds, 25), encode: (seconds) => seconds }
).annotations({
  description: "seconds to wait, at most 25 (more waits 25)",
  jsonSchema: { type: "number", minimum: 0, description: "seconds to wait, at most 25 (more waits 25)" }
})

/** The query of `GET /v1/agents/{id}/requests/{requestId}`. */
export const RequestParams = Schema.Struct({ wait: Schema.optional(waitSeconds) })

/** The status of an accepted prompt. */
export const promptAccepted = 202

/** A page of history: about `limit` messages (whole turns) before `before`. */
const HistoryParams = Schema.Struct({
  before: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative()).annotations({
      description: "the `next` of the previous page",
      jsonSchema: { type: "integer", minimum: 0 }
    })
  ),
  limit: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 1000)).annotations({
      description: "about this many messages, rounded to whole turns (default 50)",
      jsonSchema: { type: "integer", minimum: 1, maximum: 1000 }
    })
  )
})

export class AgentsGroup extends HttpApiGroup.make("agents")
  .add(
    HttpApiEndpoint.post("create", "/v1/agents")
      .setPayload(payload(AgentInput))
      .setHeaders(Schema.Struct({
        "idempotency-key": Schema.optional(AgentKey.annotations({
          description: "makes a keyed agent; a retry with the same key and body returns the same agent"
        }))
      }))
      .addSuccess(AgentCreated, created)
      .addError(ApiError.IdempotencyConflict.Wire)
      .addError(ApiError.IdempotencyInProgress.Wire)
  )
  .add(
    HttpApiEndpoint.put("upsert")`/v1/agents/by-key/${HttpApiSchema.param("key", AgentKey)}`
      .setPayload(payload(AgentInput))
      .addSuccess(AgentCreated)
      .addError(ApiError.IdempotencyConflict.Wire)
      .addError(ApiError.IdempotencyInProgress.Wire)
      .annotate(
        OpenApi.Description,
        "Upsert by key: the agent with this key (same id, token and history, from any process) with the given " +
          "settings applied, or a new keyed agent. Every setting given is applied; one left out is removed (name " +
          "back to the id, no type, no expiry, no spendLimit, keyScope or modelHeaders), except mounts, which " +
          "stay. ttlSeconds counts from now; a spendLimit of another usd is a new budget from now, the same usd " +
          "keeps counting. subject, context and initialMessages are set only at creation: given with another " +
          "value they are refused (400, naming the field) and nothing changes. A prompt is sent once per requestId."
      )
  )
  .add(
    HttpApiEndpoint.get("credentials")`/v1/agents/${HttpApiSchema.param("keyOrId", Schema.String)}/credentials`
      .addSuccess(AgentCredentials)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.AgentKeyless.Wire)
      .annotate(
        OpenApi.Description,
        "The agent's credentials, by key or id; only for agents made with a key (409 AGENT_KEYLESS otherwise)."
      )
  )
  .add(HttpApiEndpoint.get("list", "/v1/agents").setUrlParams(PageParams).addSuccess(Schema.Array(AgentSummary)))
  .add(
    HttpApiEndpoint.get("get")`/v1/agents/${agentParam}`
      .addSuccess(AgentDetail)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
  )
  .add(
    HttpApiEndpoint.del("delete")`/v1/agents/${agentParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.post("prompt")`/v1/agents/${agentParam}/prompt`
      .setPayload(payload(PromptInput))
      .addSuccess(RequestRecord, { status: promptAccepted })
      .addError(ApiError.SpendLimit.Wire)
      .addError(ApiError.InsufficientCredit.Wire)
      .addError(ApiError.PaymentRequired.Wire)
      .addError(ApiError.ApplicationNotConnected.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Accepts a prompt and answers its request record at once; poll it for the outcome."
      )
  )
  .add(
    HttpApiEndpoint.post("fork")`/v1/agents/${agentParam}/fork`
      .setPayload(payload(ForkInput))
      .addSuccess(ForkCreated, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "A new agent with this one's settings and a copy of its history up to atMessage (an index or a request id, " +
          "rounded to the end of its turn) or the last finished turn, never mid-turn. The same key returns the same " +
          "fork; without a key one is made up and the fork lives a day unless ttlSeconds is given."
      )
  )
  .add(
    HttpApiEndpoint.post("continue")`/v1/agents/${agentParam}/continue`
      .setPayload(payload(ContinueInput))
      .addSuccess(RequestRecord, { status: 202 })
      .addError(ApiError.ApplicationNotConnected.Wire)
      .addError(ApiError.SpendLimit.Wire)
      .addError(ApiError.InsufficientCredit.Wire)
      .addError(ApiError.PaymentRequired.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(OpenApi.Description, "Runs a turn on the history as it is, without a new user message.")
  )
  .add(
    HttpApiEndpoint.post("execute")`/v1/agents/${agentParam}/execute`
      .setPayload(payload(ExecuteInput))
      .addSuccess(RequestRecord, { status: 202 })
      .addError(ApiError.ApplicationNotConnected.Wire)
      .addError(ApiError.SpendLimit.Wire)
      .addError(ApiError.InsufficientCredit.Wire)
      .addError(ApiError.PaymentRequired.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Runs JavaScript with the agent's code-mode tools (`tools.<name>(args)`), without the model, queued like " +
          "a prompt. The request's outcome.result holds ok, value (what the code returned), logs, error, limit " +
          "and the calls it made (toolCalls with innerCallId). Its calls are journaled: after a lost node the " +
          "code runs again and calls already sent are answered from the journal, never sent twice."
      )
  )
  .add(
    HttpApiEndpoint.post("abort")`/v1/agents/${agentParam}/abort`
      .setPayload(payload(Schema.Struct({ requestId: Schema.optional(Schema.String.pipe(Schema.minLength(1))) })))
      .addSuccess(RequestRecord)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Cancels queued runs (they end with code cancelled) and stops the running turn at once, keeping what was " +
          "said (it ends with code aborted). Answers the abort's own record, settled; a requestId another request " +
          "used is 409 IDEMPOTENCY_CONFLICT."
      )
  )
  .add(
    HttpApiEndpoint.post("configure")`/v1/agents/${agentParam}/configure`
      .setPayload(payload(ConfigureInput))
      .addSuccess(RequestRecord)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Changes settings at once, ahead of queued runs; absent fields stay, null removes. mounts are checked as " +
          "at creation; a running turn keeps the settings it began with (mounts included), the next turn has the " +
          "new ones. A requestId used before answers that configure's record when the body is the same, and is " +
          "409 IDEMPOTENCY_CONFLICT, changing nothing, when it was another body or request."
      )
  )
  .add(
    HttpApiEndpoint.get("mounts")`/v1/agents/${agentParam}/mounts`
      .addSuccess(Schema.Array(Mount))
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(OpenApi.Description, "The agent's mounts, its workspace included (as AgentDetail's `mounts`).")
  )
  .add(
    HttpApiEndpoint.put("setMounts")`/v1/agents/${agentParam}/mounts`
      .setPayload(payload(MountsInput))
      .addSuccess(Schema.Array(Mount))
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "Replaces the agent's mounts, as a configure with `mounts` (checked as at creation: a volume the tenant " +
          "does not have is 404, nothing changes); answers the mounts now. A running turn keeps the mounts it " +
          "began with, the next one sees these."
      )
  )
  .add(
    HttpApiEndpoint.post("applyDefinition")`/v1/agents/${agentParam}/definition`
      .setPayload(payload(DefinitionApply))
      .addSuccess(RequestRecord)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Moves an agent made from a definition to a revision of it (default the latest), as a configure: the " +
          "definition's model, system prompt, thinking level, fileTools, builtins and tool sources replace the " +
          "agent's, except a model, thinkingLevel or fileTools the agent set itself; systemPromptAppend stays. A " +
          "requestId used before with another revision, or by another request, is 409 IDEMPOTENCY_CONFLICT."
      )
  )
  .add(
    HttpApiEndpoint.get("request")`/v1/agents/${agentParam}/requests/${requestParam}`
      .setUrlParams(RequestParams)
      .addSuccess(RequestRecord)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
  )
  .add(
    HttpApiEndpoint.get("state")`/v1/agents/${agentParam}/state`
      .addSuccess(SessionState)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
  )
  .add(
    HttpApiEndpoint.get("history")`/v1/agents/${agentParam}/history`
      .setUrlParams(HistoryParams)
      .addSuccess(HistoryPage)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
  )
  .add(
    HttpApiEndpoint.get("events")`/v1/agents/${agentParam}/events`
      .setUrlParams(Schema.Struct({
        poll: Schema.optional(Schema.Literal("1", "true")),
        wait: Schema.optional(waitSeconds),
        snapshot: Schema.optional(Schema.Literal("1", "true"))
      }))
      .setHeaders(Schema.Struct({
        "last-event-id": Schema.optional(Schema.NumberFromString.annotations({ description: "the last cursor seen" }))
      }))
      .addSuccess(EventPoll)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.ReplayGap.Wire)
      .annotate(
        OpenApi.Description,
        "Server-sent events (text/event-stream): `event: ready` (its `id:` the cursor the stream goes on from, so " +
          "a stream cut before its first event resumes from it), then `id:`/`data:` frames and `: heartbeat` " +
          "comments about every 5 s. With poll=1 the answer is one JSON EventPoll after at most `wait` seconds. " +
          "A node handing its agents on (or, for a stream, one that cannot reach its database) answers 503 " +
          "UNAVAILABLE with Retry-After instead: its streams end, so retry, through any node."
      )
  )
  .add(
    HttpApiEndpoint.post("browserToken")`/v1/agents/${agentParam}/browser-tokens`
      .setPayload(payload(BrowserTokenInput))
      .addSuccess(BrowserToken, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "A short-lived token (5 to 3600 s, default 900; nothing revokes it sooner) a web page on any origin sends " +
          "as bearer (never in a URL) to GET this agent's events, state, history and inputs, as its scopes allow " +
          "(403 anywhere else). Its events show only the listed types (default: all but the runtime's own " +
          "codemode, compaction_usage, spend_limit_reached); snapshots and response frames always arrive, an " +
          "outcome (there and in state) only as {result: {stopped, error}, error, uncertain}. redact usage.cost " +
          "removes provider cost from messages in events, snapshots and history. See docs/agents.md."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Agents")
{}

const runParam = HttpApiSchema.param("id", Schema.String)

/** Stateless runs: one call with an agent's configuration and an input, one answer out (see docs/runs.md). */
export class RunsGroup extends HttpApiGroup.make("runs")
  .add(
    HttpApiEndpoint.post("create", "/v1/runs")
      .setPayload(payload(RunInput))
      .setHeaders(Schema.Struct({
        "idempotency-key": Schema.optional(AgentKey.annotations({
          description: "the same key and body are the same run while it is kept; another body is 409"
        }))
      }))
      .addSuccess(StatelessRun)
      .addSuccess(RunAccepted, { status: promptAccepted })
      .addError(ApiError.SpendLimit.Wire)
      .addError(ApiError.InsufficientCredit.Wire)
      .addError(ApiError.PaymentRequired.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .addError(ApiError.IdempotencyInProgress.Wire)
      .annotate(
        OpenApi.Description,
        "Starts a run: the agent configuration given (or a definition's, with overrides) on `input`, with no " +
          "history. 200 with the ended run when it ends within `wait`, else 202 with it running: read it with " +
          "GET /v1/runs/{id}?wait=25. Not an agent: not listed among agents; kept retentionSeconds after it " +
          "ends, then deleted with its messages, events and files."
      )
  )
  .add(HttpApiEndpoint.get("list", "/v1/runs").setUrlParams(PageParams).addSuccess(Schema.Array(StatelessRun)))
  .add(
    HttpApiEndpoint.get("get")`/v1/runs/${runParam}`
      .setUrlParams(RunParams)
      .addSuccess(StatelessRun)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "The run; with `wait`, once it ends or the wait (at most 25 s) is over.")
  )
  .add(
    HttpApiEndpoint.get("messages")`/v1/runs/${runParam}/messages`
      .setUrlParams(HistoryParams)
      .addSuccess(HistoryPage)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "The run's messages: its input, the model's responses, the tool results.")
  )
  .add(
    HttpApiEndpoint.get("events")`/v1/runs/${runParam}/events`
      .setUrlParams(Schema.Struct({
        poll: Schema.optional(Schema.Literal("1", "true")),
        wait: Schema.optional(waitSeconds)
      }))
      .setHeaders(Schema.Struct({
        "last-event-id": Schema.optional(Schema.NumberFromString.annotations({ description: "the last cursor seen" }))
      }))
      .addSuccess(EventPoll)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.ReplayGap.Wire)
      .annotate(
        OpenApi.Description,
        "The run's events as server-sent events, as an agent's (ready, id/data frames, heartbeats), ending " +
          "after the run's `response` frame; a stream cut before it resumes with Last-Event-ID. A run that " +
          "ended answers its response frame alone. With poll=1, one JSON EventPoll."
      )
  )
  .add(
    HttpApiEndpoint.post("abort")`/v1/runs/${runParam}/abort`
      .addSuccess(StatelessRun)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Stops the run: it ends failed, code aborted. An ended run is answered as it is.")
  )
  .add(
    HttpApiEndpoint.del("delete")`/v1/runs/${runParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Deletes the run now (a running one is aborted first), with all it wrote.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Runs")
{}

const clientParam = HttpApiSchema.param("id", Schema.String)
const ClientFilePathParams = Schema.Struct({
  id: Schema.String,
  "*": Schema.String.annotations({ description: "the agent's path less its leading slash, each segment encoded" })
})

/** A request to an agent over its own token: a prompt, a steer, an abort, a configure or a status. */
const inputParam = HttpApiSchema.param("inputId", Schema.String)

const InputListParams = Schema.Struct({
  state: Schema.optional(InputState.annotations({ description: "only inputs in this state" }))
})

const answerDescription = "Answers an input: accept (with content: a question's answers, a form's fields), " +
  "decline (an approval may give {reason}) or cancel. `from` must be in the input's audience or the " +
  "definition's approvers (else 403). The same answer again is the same answer; another one for a settled " +
  "input is 409. When it settles the suspension's last input, `request` is the run resuming the turn."

const answersDescription = "Answers several inputs at once (1 to 100), each as the single answer route " +
  "would; all are checked before any is recorded. `requests` are the runs resuming turns whose last input " +
  "settled."

/** An agent's human input: list it, answer one input, answer several. */
export class InputsGroup extends HttpApiGroup.make("inputs")
  .add(
    HttpApiEndpoint.get("list")`/v1/agents/${agentParam}/inputs`
      .setUrlParams(InputListParams)
      .addSuccess(InputList)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "The agent's inputs, newest first (at most 100); pending ones with ?state=pending."
      )
  )
  .add(
    HttpApiEndpoint.post("answer")`/v1/agents/${agentParam}/inputs/${inputParam}/answer`
      .setPayload(payload(AnswerInput))
      .addSuccess(Answered)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, answerDescription)
  )
  .add(
    HttpApiEndpoint.get("inbox", "/v1/inputs")
      .setUrlParams(Schema.Struct({ ...PageParams.fields, ...InputListParams.fields }))
      .addSuccess(InputList)
      .annotate(
        OpenApi.Description,
        "The tenant's inbox: the inputs of all its agents (deleted ones' left out), newest first, in pages of " +
          "`limit` (at most 1000); pending ones with ?state=pending. Answer one at its agent's route."
      )
  )
  .add(
    HttpApiEndpoint.post("answerAll")`/v1/agents/${agentParam}/answers`
      .setPayload(payload(AnswerInputs))
      .addSuccess(AnsweredAll)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, answersDescription)
  )
  .middleware(Authentication)
{}

/**
 * Each member names its method with one literal, so a body is decoded as the member its method names and
 * refused naming that member's problem (`text: is missing`), not every member's.
 */
export const ClientRequest = Schema.Union(
  Schema.Struct({ method: Schema.Literal("prompt"), ...PromptInput.fields }),
  Schema.Struct({ method: Schema.Literal("steer"), ...PromptInput.fields }),
  Schema.Struct({ method: Schema.Literal("execute"), ...ExecuteInput.fields }),
  Schema.Struct({
    method: Schema.Literal("abort"),
    requestId: Schema.optional(Schema.String.pipe(Schema.minLength(1)))
  }),
  Schema.Struct({ method: Schema.Literal("status") }),
  Schema.Struct({ method: Schema.Literal("continue"), ...ContinueInput.fields }),
  Schema.extend(
    Schema.Struct({ method: Schema.Literal("configure") }),
    Schema.Struct({
      // The same fields as ConfigureInput's, which the handler builds from them (a looser requestId here let ""
      // through to fail there, as a defect).
      requestId: ConfigureInput.fields.requestId,
      model: ConfigureInput.fields.model,
      systemPrompt: ConfigureInput.fields.systemPrompt,
      systemPromptAppend: ConfigureInput.fields.systemPromptAppend,
      thinkingLevel: ConfigureInput.fields.thinkingLevel,
      builtins: ConfigureInput.fields.builtins,
      mcp: ConfigureInput.fields.mcp
    })
  )
).annotations({
  identifier: "ClientRequest",
  description: "The agent's own token cannot change keyScope, spendLimit, modelHeaders or mounts (mounts name the " +
    "tenant's volumes, beyond the agent's own). A requestId used before by another request or body is 409 " +
    "IDEMPOTENCY_CONFLICT."
})

/**
 * The request envelope the camelRun client sends: `{id, method, params}`, its id the request's id. Taken as the
 * flat request it names (`{method, requestId: id, ...params}`; a status request has no id of its own), then
 * decoded as that, so a problem is named as it would be in the flat form (`text: is missing`).
 */
const ClientRequestEnvelope = Schema.Struct({
  id: Schema.String.pipe(Schema.minLength(1)),
  method: Schema.String,
  params: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})

const isEnvelope = (body: unknown): boolean =>
  typeof body === "object" && body !== null && "id" in body && !("requestId" in body)

/**
 * The document's view of the body: the flat request or the envelope. Its named parts are the ones the other
 * routes put in the document's components, so they are referred to there.
 */
const clientRequestDocument = {
  oneOf: [
    JSONSchema.fromAST(ClientRequest.ast, {
      definitions: {},
      definitionPath: "#/components/schemas/",
      topLevelReferenceStrategy: "skip"
    }),
    JSONSchema.fromAST(ClientRequestEnvelope.ast, { definitions: {} })
  ]
}

/** A request to an agent over its own token, flat or in camelRun's envelope. */
export const ClientRequestBody = Schema.transformOrFail(
  Schema.Unknown.annotations({ jsonSchema: clientRequestDocument }),
  Schema.typeSchema(ClientRequest),
  {
    strict: true,
    decode: (body, options) =>
      isEnvelope(body)
        ? ParseResult.decodeUnknown(ClientRequestEnvelope)(body, options).pipe(
          Effect.flatMap(({ id, method, params }) =>
            ParseResult.decodeUnknown(ClientRequest)({
              ...params,
              method,
              ...(method === "status" ? {} : { requestId: id })
            }, options)
          )
        )
        : ParseResult.decodeUnknown(ClientRequest)(body, options),
    encode: (request) => ParseResult.encode(ClientRequest)(request)
  }
)

export class ClientsGroup extends HttpApiGroup.make("clients")
  .add(
    HttpApiEndpoint.post("request")`/clients/${clientParam}/requests`
      .setPayload(payload(ClientRequestBody))
      .addSuccess(RequestRecord)
      .addError(ApiError.ApplicationNotConnected.Wire)
      .addError(ApiError.SpendLimit.Wire)
      .addError(ApiError.InsufficientCredit.Wire)
      .addError(ApiError.PaymentRequired.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
  )
  .add(
    HttpApiEndpoint.get("getRequest")`/clients/${clientParam}/requests/${requestParam}`
      .setUrlParams(Schema.Struct({ wait: Schema.optional(waitSeconds) }))
      .addSuccess(RequestRecord)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
  )
  .add(
    HttpApiEndpoint.get("events")`/clients/${clientParam}/events`
      .setUrlParams(Schema.Struct({
        poll: Schema.optional(Schema.Literal("1", "true")),
        wait: Schema.optional(waitSeconds),
        watch: Schema.optional(Schema.Literal("1", "true")),
        snapshot: Schema.optional(Schema.Literal("1", "true")),
        takeover: Schema.optional(Schema.Literal("1", "true")).annotations({
          description: "replace the connection serving the agent's tools now"
        }),
        connection: Schema.optional(Schema.String.pipe(Schema.pattern(/^conn_[A-Za-z0-9_-]{1,64}$/))).annotations({
          description: "reconnect as this connection (the `connection` of an earlier ready frame)"
        })
      }))
      .setHeaders(Schema.Struct({ "last-event-id": Schema.optional(Schema.NumberFromString) }))
      .addSuccess(EventPoll)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.ReplayGap.Wire)
      .addError(ApiError.ApplicationConnected.Wire)
      .annotate(
        OpenApi.Description,
        "The agent's event stream; unless watch=1 also the connection serving the agent's tools: `event: mcp` " +
          "frames carry the runtime's MCP messages (see docs/application-tools.md). poll=1 answers JSON."
      )
  )
  .add(
    HttpApiEndpoint.post("mcp")`/clients/${clientParam}/mcp`
      .setPayload(JsonRpcMessage)
      .setHeaders(ConnectionHeaders)
      .addSuccess(McpAccepted, { status: 202 })
      .addError(ApiError.InvalidRequest.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .addError(ApiError.ApplicationReplaced.Wire)
      .annotate(
        OpenApi.Description,
        "The application's MCP messages (answers to tools/call, progress, draining), naming its connection"
      )
  )
  .add(
    HttpApiEndpoint.get("state")`/clients/${clientParam}/state`
      .addSuccess(SessionState)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "The agent's cursor and its latest requests with their outcomes, as GET /v1/agents/{id}/state: what a " +
          "client reconnecting reads to settle the requests it waits on"
      )
  )
  .add(
    HttpApiEndpoint.get("history")`/clients/${clientParam}/history`
      .setUrlParams(HistoryParams)
      .addSuccess(HistoryPage)
      .addSuccess(History)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "With `limit` and/or `before`, a HistoryPage as GET /v1/agents/{id}/history answers. Without either, " +
          `the whole history as a History {messages}, oldest first; one of more than ${
            maxWholeHistoryBytes / 1024 / 1024
          } MiB of message JSON is 413 TOO_LARGE: read it in pages.`
      )
  )
  .add(
    HttpApiEndpoint.del("delete")`/clients/${clientParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Deletes the agent, as DELETE /v1/agents/{id}. Its token is refused from then on (401 on every " +
          "/clients/{id} route), a final answer for a client."
      )
  )
  .add(
    HttpApiEndpoint.post("metadata")`/clients/${clientParam}/metadata`
      .setPayload(payload(AgentMetadataInput))
      .addSuccess(AgentMetadata)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(OpenApi.Description, "Sets the agent's name and/or type; answers them as they are now.")
  )
  .add(
    HttpApiEndpoint.post("createSchedule")`/clients/${clientParam}/schedules`
      .setPayload(payload(ScheduleInput))
      .addSuccess(Schedule, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, "POST /v1/agents/{id}/schedules over the agent's own token.")
  )
  .add(
    HttpApiEndpoint.get("schedules")`/clients/${clientParam}/schedules`
      .addSuccess(Schema.Array(Schedule))
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "The agent's schedules, soonest first.")
  )
  .add(
    HttpApiEndpoint.del("cancelSchedule")`/clients/${clientParam}/schedules/${scheduleParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.get("inputs")`/clients/${clientParam}/inputs`
      .setUrlParams(InputListParams)
      .addSuccess(InputList)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
  )
  .add(
    HttpApiEndpoint.post("answer")`/clients/${clientParam}/inputs/${inputParam}/answer`
      .setPayload(payload(AnswerInput))
      .addSuccess(Answered)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, answerDescription)
  )
  .add(
    // camelRun's client answers here; `.../answer` stays for ours.
    HttpApiEndpoint.post("answerInput")`/clients/${clientParam}/inputs/${inputParam}`
      .setPayload(payload(AnswerInput))
      .addSuccess(Answered)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, `${answerDescription} The same as POST .../inputs/{inputId}/answer.`)
  )
  .add(
    HttpApiEndpoint.post("answerAll")`/clients/${clientParam}/answers`
      .setPayload(payload(AnswerInputs))
      .addSuccess(AnsweredAll)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, answersDescription)
  )
  .middleware(AgentAuthentication)
  .annotate(OpenApi.Title, "Agent connection")
  .annotate(
    OpenApi.Description,
    "Routes for the agent's own token (aat_...); requests with a browser Origin are refused."
  )
{}

const webhookParam = HttpApiSchema.param("webhookId", Schema.String)
const eventParam = HttpApiSchema.param("eventId", Schema.String)

const attempts = <const Name extends string>(name: Name, root: `/${string}`) =>
  HttpApiEndpoint.get(name, `${root}/webhooks/:webhookId/attempts`)
    .setPath(Schema.Struct({ webhookId: Schema.String }))
    .setUrlParams(AttemptParams)
    .addSuccess(Schema.Array(WebhookAttempt))
    .addError(ApiError.NotFound.Wire)
    .annotate(
      OpenApi.Description,
      "An endpoint's latest delivery attempts, newest first (status, latency, why it did not count, next try); " +
        "also for the usage webhook's id."
    )

const volumeParam = HttpApiSchema.param("volumeId", Schema.String)

/**
 * A file's path as the rest of the URL (`*`, each segment percent-encoded), for the routes whose clients put
 * it there; the OpenAPI document names it `path` (`withNamedWildcards`).
 */
const wildcard = { "*": Schema.String.annotations({ description: "the file's path, each segment encoded" }) }
const FilePathParams = Schema.Struct({ volumeId: Schema.String, ...wildcard })

const fileLinkDescription = "A signed URL for one file, used without any Authorization header until `expiresIn` " +
  "seconds (default 900, at most 86400): GET downloads the file, PUT uploads it (at most `maxBytes`, its " +
  "content type `contentType` when given). A changed link answers 403, an expired one 410."

/** A file's bytes on the wire, whatever its own content type. */
const FileBytes = HttpApiSchema.Uint8Array({ contentType: "application/octet-stream" })

export class VolumesGroup extends HttpApiGroup.make("volumes")
  .add(
    HttpApiEndpoint.post("create", "/v1/volumes")
      .setPayload(payload(VolumeInput))
      .addSuccess(Volume, created)
      .annotate(OpenApi.Description, "A new, empty volume to mount into agents (see docs/files.md).")
  )
  .add(HttpApiEndpoint.get("list", "/v1/volumes").setUrlParams(PageParams).addSuccess(Schema.Array(Volume)))
  .add(HttpApiEndpoint.get("get")`/v1/volumes/${volumeParam}`.addSuccess(Volume).addError(ApiError.NotFound.Wire))
  .add(
    HttpApiEndpoint.del("remove")`/v1/volumes/${volumeParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Removes the volume and its files; agents mounting it see no files there.")
  )
  .add(
    HttpApiEndpoint.post("fork")`/v1/volumes/${volumeParam}/fork`
      .setPayload(payload(VolumeForkInput))
      .addSuccess(Volume, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "A copy-on-write copy: the same files (those of `snapshot`, one of this volume's, when given), sharing " +
          "their bytes until either side writes; as quick whatever their size. Counted against the storage quota " +
          "like any other bytes."
      )
  )
  .add(
    HttpApiEndpoint.post("snapshot")`/v1/volumes/${volumeParam}/snapshots`
      .setPayload(payload(SnapshotInput))
      .addSuccess(VolumeSnapshot, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "A frozen, read-only copy of the volume's files now (copy-on-write, as quick as a fork); later writes " +
          "leave it as it is. Its bytes count against the storage quota until it is deleted."
      )
  )
  .add(
    HttpApiEndpoint.get("snapshots")`/v1/volumes/${volumeParam}/snapshots`
      .addSuccess(Schema.Array(VolumeSnapshot))
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "The volume's snapshots, oldest first.")
  )
  .add(
    HttpApiEndpoint.del("removeSnapshot")`/v1/volumes/${volumeParam}/snapshots/${
      HttpApiSchema.param("snapshotId", Schema.String)
    }`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.get("changes")`/v1/volumes/${volumeParam}/changes`
      .setUrlParams(ChangesParams)
      .addSuccess(FileChanges)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        `The writes and removals of files after seq \`since\`, oldest first, at most ${maxChangesPerPage} ` +
          "(ask again from the last seq for more). Only the last " +
          `${maxChangesKept} changes are kept: \`gap: true\` when some after \`since\` are not.`
      )
  )
  .add(
    HttpApiEndpoint.get("files")`/v1/volumes/${volumeParam}/files`
      .setUrlParams(FileListParams)
      .addSuccess(FileList)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "The files under `prefix` (the whole volume by default) whose paths match `glob`, in path order; " +
          "`next` is the `after` of the next page."
      )
  )
  .add(
    HttpApiEndpoint.get("readPath", "/v1/volumes/:volumeId/files/*")
      .setPath(FilePathParams)
      .addSuccess(FileBytes)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "GET .../file?path= with the path in the URL (each segment encoded).")
  )
  .add(
    HttpApiEndpoint.put("writePath", "/v1/volumes/:volumeId/files/*")
      .setPath(FilePathParams)
      .setPayload(FileBytes)
      .addSuccess(VolumeFile)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Conflict.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "PUT .../file?path= with the path in the URL. `If-None-Match: *` writes only a new file, " +
          '`If-Match: "<version>"` only that version: 409 CONFLICT otherwise.'
      )
  )
  .add(
    HttpApiEndpoint.del("removePath", "/v1/volumes/:volumeId/files/*")
      .setPath(FilePathParams)
      .addSuccess(VolumeFile)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, "DELETE .../file?path= with the path in the URL; `If-Match` as for writes.")
  )
  .add(
    HttpApiEndpoint.post("link")`/v1/volumes/${volumeParam}/links`
      .setPayload(payload(FileLinkInput))
      .addSuccess(FileLink)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, fileLinkDescription)
  )
  .add(
    HttpApiEndpoint.get("read")`/v1/volumes/${volumeParam}/file`
      .setUrlParams(FileParams)
      .addSuccess(FileBytes)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "The file's bytes, with its content type, `etag` (its version) and `x-file-version`; a `Range: bytes=` " +
          "header of one range answers 206 with that part."
      )
  )
  .add(
    HttpApiEndpoint.put("write")`/v1/volumes/${volumeParam}/file`
      .setUrlParams(FileWriteParams)
      .setPayload(FileBytes)
      .addSuccess(VolumeFile)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Conflict.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "Writes the whole file as its next version. The request's Content-Type is kept as the file's (sniffed " +
          "from the bytes and name when absent or application/octet-stream). `ifVersion` (or `If-Match`) makes it " +
          "conditional: 409 when the file has moved on."
      )
  )
  .add(
    HttpApiEndpoint.del("removeFile")`/v1/volumes/${volumeParam}/file`
      .setUrlParams(FileWriteParams)
      .addSuccess(VolumeFile)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Conflict.Wire)
      .annotate(OpenApi.Description, "Removes the file (when at `ifVersion`, if given); answers it as it was.")
  )
  .add(
    HttpApiEndpoint.put("upload")`/v1/agents/${agentParam}/uploads/${HttpApiSchema.param("requestId", Schema.String)}/${
      HttpApiSchema.param("name", Schema.String)
    }`
      .setPayload(FileBytes)
      .addSuccess(Upload)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "Puts a file in the agent's workspace under uploads/<requestId>/<name>; attach it to that prompt as " +
          "{path}. The same request again writes a new version."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Volumes and files")
{}

/** An agent's files over its own token, named as the agent sees them (/workspace/report.pdf). */
export class ClientFilesGroup extends HttpApiGroup.make("clientFiles")
  .add(
    HttpApiEndpoint.get("files")`/clients/${clientParam}/files`
      .setUrlParams(AgentFileListParams)
      .addSuccess(AgentFileList)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "The files of the agent's mounts under `path` (every mount by default) whose paths match `glob`, in path " +
          "order; `next` is the `after` of the next page."
      )
  )
  .add(
    HttpApiEndpoint.get("read", "/clients/:id/files/*")
      .setPath(ClientFilePathParams)
      .addSuccess(FileBytes)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "The file at the agent's path (files/workspace/a.md is /workspace/a.md), with its content type and " +
          "`x-file-version`; `Range` as for a volume's file."
      )
  )
  .add(
    HttpApiEndpoint.put("write", "/clients/:id/files/*")
      .setPath(ClientFilePathParams)
      .setPayload(FileBytes)
      .addSuccess(AgentFile)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(
        OpenApi.Description,
        "Writes the file at the agent's path; 403 in a read-only mount. `If-Match`/`If-None-Match` as for a " +
          "volume's file."
      )
  )
  .add(
    HttpApiEndpoint.post("link")`/clients/${clientParam}/links`
      .setPayload(payload(FileLinkInput))
      .addSuccess(FileLink)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(OpenApi.Description, `${fileLinkDescription} \`path\` is the agent's; PUT in a read-only mount is 403.`)
  )
  .add(
    HttpApiEndpoint.put("upload")`/clients/${clientParam}/uploads/${HttpApiSchema.param("requestId", Schema.String)}/${
      HttpApiSchema.param("name", Schema.String)
    }`
      .setPayload(FileBytes)
      .addSuccess(Upload)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(OpenApi.Description, "PUT /v1/agents/{id}/uploads/{requestId}/{name} over the agent's own token.")
  )
  .middleware(AgentAuthentication)
  .annotate(OpenApi.Title, "Agent files")
{}

/** Where a presented file's signed link leads: no bearer token, the signature is the credential. */
export class DownloadsGroup extends HttpApiGroup.make("downloads")
  .add(
    HttpApiEndpoint.get("download")`/v1/files/${HttpApiSchema.param("fileId", Schema.String)}`
      .setUrlParams(Schema.Struct({ expires: Schema.String, signature: Schema.String }))
      .addSuccess(FileBytes)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(
        OpenApi.Description,
        "A presented file, as it was when presented. The link is signed and expires: a changed link answers 403, " +
          "an expired one 410."
      )
  )
  .add(
    HttpApiEndpoint.get("linkRead")`/v1/links/${volumeParam}`
      .setUrlParams(FileLinkParams)
      .addSuccess(FileBytes)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.Gone.Wire)
      .annotate(OpenApi.Description, "Where a GET link of POST .../links leads: the file as it is now.")
  )
  .add(
    HttpApiEndpoint.put("linkWrite")`/v1/links/${volumeParam}`
      .setUrlParams(FileLinkParams)
      .setPayload(FileBytes)
      .addSuccess(VolumeFile)
      .addError(ApiError.Forbidden.Wire)
      .addError(ApiError.Gone.Wire)
      .addError(ApiError.Conflict.Wire)
      .addError(ApiError.TooLarge.Wire)
      .annotate(OpenApi.Description, "Where a PUT link of POST .../links leads: writes the file's next version.")
  )
  .annotate(OpenApi.Title, "Downloads")
{}

export class WebhooksGroup extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.post("create", "/v1/webhooks")
      .setPayload(payload(WebhookEndpointInput))
      .addSuccess(WebhookEndpointCreated, created)
      .addError(ApiError.Conflict.Wire)
      .annotate(
        OpenApi.Description,
        "Registers an endpoint (https, a public address; at most 16). Its signing secret is shown only in this " +
          "answer. Events are signed per Standard Webhooks and delivered at least once (see docs/webhooks.md)."
      )
  )
  .add(HttpApiEndpoint.get("list", "/v1/webhooks").addSuccess(Schema.Array(WebhookEndpoint)))
  .add(
    HttpApiEndpoint.get("get")`/v1/webhooks/${webhookParam}`
      .addSuccess(WebhookEndpoint)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.patch("update")`/v1/webhooks/${webhookParam}`
      .setPayload(payload(WebhookEndpointUpdate))
      .addSuccess(WebhookEndpoint)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Changes the url, events or description; events already queued still go out.")
  )
  .add(
    HttpApiEndpoint.del("remove")`/v1/webhooks/${webhookParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Removes the endpoint; its undelivered events are dropped.")
  )
  .add(
    HttpApiEndpoint.post("rotateSecret")`/v1/webhooks/${webhookParam}/secret`
      .addSuccess(WebhookSecret)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "A new signing secret, shown only here; the old one also signs (a second signature in " +
          "webhook-signature) for 24 hours."
      )
  )
  .add(attempts("attempts", "/v1"))
  .add(
    HttpApiEndpoint.get("deliveries")`/v1/webhooks/${webhookParam}/deliveries`
      .setUrlParams(DeliveryParams)
      .addSuccess(Schema.Array(WebhookDelivery))
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "The endpoint's latest events and how their delivery stands, newest first.")
  )
  .add(
    HttpApiEndpoint.post("resend")`/v1/webhooks/${webhookParam}/deliveries/${eventParam}/resend`
      .addSuccess(Resent, { status: 202 })
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Sends an event to the endpoint again under the same id (delivered or failed ones too), with a fresh " +
          "3 days of retries."
      )
  )
  .add(
    HttpApiEndpoint.get("getUsage", "/v1/usage-webhook")
      .addSuccess(UsageWebhook)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.put("putUsage", "/v1/usage-webhook")
      .setPayload(payload(UsageWebhookInput))
      .addSuccess(UsageWebhookCreated)
      .annotate(
        OpenApi.Description,
        "Sets the usage webhook: every model response's usage (agents' and the gateway's) as usage.recorded. " +
          "The answer shows its secret once; setting it again keeps the secret and its queued events."
      )
  )
  .add(
    HttpApiEndpoint.del("removeUsage", "/v1/usage-webhook")
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.post("rotateUsageSecret", "/v1/usage-webhook/secret")
      .addSuccess(WebhookSecret)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "A new secret for the usage webhook; the old one also signs for 24 hours.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Webhooks")
{}

export class TelemetryGroup extends HttpApiGroup.make("telemetry")
  .add(
    HttpApiEndpoint.get("get", "/v1/telemetry")
      .addSuccess(Schema.NullOr(TelemetrySettings))
      .annotate(
        OpenApi.Description,
        "The trace export settings (header names only) with what the endpoint last answered; null when none."
      )
  )
  .add(
    HttpApiEndpoint.put("put", "/v1/telemetry")
      .setPayload(payload(TelemetryInput))
      .addSuccess(TelemetrySettings)
      .annotate(
        OpenApi.Description,
        "Exports each run as an OpenTelemetry trace (GenAI conventions) to an OTLP/HTTP endpoint. Changes only " +
          "what is given; headers are stored encrypted and never shown again, kept while the endpoint keeps its " +
          "origin, dropped when it moves; {} removes them. See docs/telemetry.md."
      )
  )
  .add(HttpApiEndpoint.del("clear", "/v1/telemetry").addSuccess(TelemetryCleared))
  .add(
    HttpApiEndpoint.post("test", "/v1/telemetry/test")
      .addSuccess(TelemetryTestResult)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Sends one span (`agent-runtime test span`) now and answers what the endpoint said, with the span's ids."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Telemetry")
{}

export class BillingGroup extends HttpApiGroup.make("billing")
  .add(
    HttpApiEndpoint.get("usage", "/v1/usage")
      .setUrlParams(UsageParams)
      .addSuccess(Usage)
      .annotate(
        OpenApi.Description,
        "What the tenant's model responses used (agent turns, compaction and gateway calls), per UTC day, model " +
          "and kind, with the totals; the same numbers as its usage.recorded webhooks. Filters by agent, key " +
          "scope and subject. See docs/billing.md."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/billing")
      .addSuccess(Billing)
      .annotate(
        OpenApi.Description,
        "The tenant's billing: mode, balance, this month's ledger sums, recent entries and the rates; every " +
          "amount an integer in micro-USD. `billing: none` when the operator bills the tenant nothing."
      )
  )
  .add(
    HttpApiEndpoint.patch("configure", "/v1/billing")
      .setPayload(payload(BillingSettingsInput))
      .addSuccess(Billing)
      .annotate(
        OpenApi.Description,
        "Sets the tenant's monthly cap on charges (null removes it; at the cap new work gets 402 SPEND_LIMIT) " +
          "and the balance at which billing.balance.low fires."
      )
  )
  .add(
    HttpApiEndpoint.get("ledger", "/v1/billing/ledger")
      .setUrlParams(PageParams)
      .addSuccess(Schema.Array(LedgerEntry))
      .annotate(OpenApi.Description, "The tenant's ledger, newest first.")
  )
  .add(
    HttpApiEndpoint.post("checkout", "/v1/billing/checkout")
      .setPayload(payload(CheckoutInput))
      .addSuccess(Checkout, created)
      .addError(ApiError.Conflict.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Buys credit: answers the payment provider's page (`url`) to send the buyer to. The credit is posted " +
          "once, when the provider says it is paid (GET /v1/billing/checkouts/{id} reads it; the " +
          "billing.topup.receipt webhook tells it). 409 CONFLICT when the tenant is not prepaid or the service " +
          "sells no credit; 503 when the provider does not answer (retry with the same requestId)."
      )
  )
  .add(
    HttpApiEndpoint.get("getCheckout")`/v1/billing/checkouts/${idParam}`
      .addSuccess(Checkout)
      .annotate(
        OpenApi.Description,
        "A purchase or card check: `open` until paid, `paid` once its credit (or grant) is posted, `expired`."
      )
  )
  .add(
    HttpApiEndpoint.post("cardCheck", "/v1/billing/card-check")
      .addSuccess(Checkout, created)
      .addError(ApiError.Conflict.Wire)
      .annotate(
        OpenApi.Description,
        "Verifies a card (saved, not charged) to unlock the starting credit `startingCredit.cardCheck` offers; " +
          "a card unlocks it once across all tenants, a prepaid card never. Asked again while one is open, " +
          "answers that one; 409 once the starting credit is decided."
      )
  )
  .add(
    HttpApiEndpoint.get("getAutoTopup", "/v1/billing/auto-topup")
      .addSuccess(AutoTopup)
  )
  .add(
    HttpApiEndpoint.put("setAutoTopup", "/v1/billing/auto-topup")
      .setPayload(payload(AutoTopupInput))
      .addSuccess(AutoTopup)
      .addError(ApiError.Conflict.Wire)
      .annotate(
        OpenApi.Description,
        "Automatic top-up: when the balance falls below `threshold`, the saved card (from a purchase or card " +
          "check) is charged for `amount` and its fee, at most `monthlyLimit` a UTC month. Saving lifts a pause."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Billing")
{}

/** What the payment provider tells the service, authenticated by its own signature instead of a token. */
export class PaymentNoticesGroup extends HttpApiGroup.make("paymentNotices")
  .add(
    HttpApiEndpoint.post("notice", "/v1/billing/payments/webhook")
      .setPayload(Schema.Unknown.annotations({ description: "the provider's event, as it sends it" }))
      .setHeaders(Schema.Struct({ "stripe-signature": Schema.optional(Schema.String) }))
      .addSuccess(Schema.Struct({ received: Schema.Boolean }))
      .annotate(
        OpenApi.Description,
        "Stripe's webhook endpoint (checkout.session.completed, checkout.session.async_payment_succeeded, " +
          "checkout.session.expired, payment_intent.succeeded, charge.refunded), verified against its " +
          "Stripe-Signature with the endpoint's signing secret. A notice is acted on once however often sent."
      )
  )
  .annotate(OpenApi.Title, "Payment notices")
{}

export class AdminGroup extends HttpApiGroup.make("admin")
  .add(
    HttpApiEndpoint.post("createTenant", "/v1/admin/tenants")
      .setPayload(payload(TenantInput))
      .addSuccess(TenantCreated, created)
      .annotate(OpenApi.Description, "Creates a tenant and its first API key (shown only in this answer).")
  )
  .add(
    HttpApiEndpoint.get("listTenants", "/v1/admin/tenants")
      .setUrlParams(PageParams)
      .addSuccess(Schema.Array(Tenant))
  )
  .add(
    HttpApiEndpoint.get("getTenant")`/v1/admin/tenants/${idParam}`
      .addSuccess(Tenant)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.put("putPlatformKey")`/v1/admin/platform-keys/${providerParam}`
      .setPayload(payload(KeyInput))
      .addSuccess(KeySet)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "A platform key: used by every tenant without its own key (source platform).")
  )
  .add(
    HttpApiEndpoint.del("deletePlatformKey")`/v1/admin/platform-keys/${providerParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.get("listRunners", "/v1/admin/runners")
      .addSuccess(RunnerList)
      .annotate(
        OpenApi.Description,
        "The cluster's runners: state, lease, shard counts and load (agents, running turns, waiting requests)."
      )
  )
  .add(
    HttpApiEndpoint.post("drainRunner")`/v1/admin/runners/${runnerAddressParam}/drain`
      .addSuccess(DrainStarted, { status: 202 })
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Drains a runner as SIGTERM does: /readyz answers 503, running turns finish their current step and " +
          "continue on other runners (turn_resumed, handoff drain), event streams get `event: reconnect`, then " +
          "the process exits. Idempotent while it drains."
      )
  )
  .add(
    HttpApiEndpoint.put("setTenantBilling")`/v1/admin/tenants/${idParam}/billing`
      .setPayload(payload(TenantBillingInput))
      .addSuccess(Billing)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "Sets how the tenant is billed: `prepaid` (its runs are paid from credit; 402 at zero) or `none`. " +
          "`startingCredit` is granted once, the first time the tenant is made prepaid with one."
      )
  )
  .add(
    HttpApiEndpoint.get("getTenantBilling")`/v1/admin/tenants/${idParam}/billing`
      .addSuccess(Billing)
      .addError(ApiError.NotFound.Wire)
  )
  .add(
    HttpApiEndpoint.post("postLedgerEntry")`/v1/admin/tenants/${idParam}/ledger`
      .setPayload(payload(LedgerEntryInput))
      .setHeaders(Schema.Struct({
        "idempotency-key": Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)))
      }))
      .addSuccess(LedgerEntry, created)
      .addError(ApiError.NotFound.Wire)
      .addError(ApiError.IdempotencyConflict.Wire)
      .annotate(
        OpenApi.Description,
        "Grants credit, adjusts the balance (a signed amount) or records a refund (money given back, taken " +
          "from the balance). The same Idempotency-Key and body is the same entry; another body is 409."
      )
  )
  .add(attempts("webhookAttempts", "/v1/admin"))
  .add(
    HttpApiEndpoint.post("createSignInLink", "/v1/admin/sign-in-links")
      .setPayload(payload(SignInLinkInput))
      .addSuccess(SignInLink, created)
      .addError(ApiError.NotFound.Wire)
      .annotate(
        OpenApi.Description,
        "A one-time link that signs its holder in to the tenant's console (and so lets them connect coding " +
          "agents): for self-hosting without an identity provider. Valid once, for 15 minutes."
      )
  )
  .add(
    HttpApiEndpoint.post("rotateIdentityKey", "/v1/admin/identity-keys/rotate")
      .addSuccess(KeyRotated)
      .annotate(
        OpenApi.Description,
        "Adds an identity-token signing key: published in /.well-known/jwks.json at once, signing from " +
          "`activatesAt`; earlier keys stay published for the overlap after it (see docs/identity.md)."
      )
  )
  .add(
    HttpApiEndpoint.post("rotateOAuthKey", "/v1/admin/oauth-keys/rotate")
      .addSuccess(KeyRotated)
      .annotate(
        OpenApi.Description,
        "Adds a signing key of the OAuth server (its ID tokens; /oauth/jwks): published at once, signing from " +
          "`activatesAt`, the earlier keys published for the overlap after it, as identity keys rotate."
      )
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Operator")
  .annotate(OpenApi.Description, "Tenant and cluster administration with the operator token.")
{}

/** Public documents at fixed paths, without authentication. */
export class WellKnownGroup extends HttpApiGroup.make("wellKnown")
  .add(
    HttpApiEndpoint.get("jwks", "/.well-known/jwks.json")
      .addSuccess(Jwks)
      .annotate(
        OpenApi.Description,
        "The public keys that verify identity tokens (EdDSA JWTs the runtime sends tool servers in " +
          "x-agent-runtime-identity). Cacheable for 5 minutes; see docs/identity.md."
      )
  )
  .annotate(OpenApi.Title, "Well-known")
{}

/**
 * Schema failures are answered as INVALID_REQUEST (see the server's error
 * mapping), so the framework's own decode-error body never reaches a client
 * and is left out of the document; so are the generator's builtin ids.
 */
const withoutDecodeError = (spec: Record<string, any>): Record<string, any> => {
  const decodeError = "#/components/schemas/HttpApiDecodeError"
  for (const path of Object.values<Record<string, any>>(spec.paths)) {
    for (const operation of Object.values<Record<string, any>>(path)) {
      const invalid = operation.responses?.["400"]
      const schema = invalid?.content?.["application/json"]?.schema
      if (!schema?.anyOf) continue
      const rest = schema.anyOf.filter((member: { $ref?: string }) => member.$ref !== decodeError)
      invalid.content["application/json"].schema = rest.length === 1 ? rest[0] : { anyOf: rest }
      invalid.description = '{error, code: "INVALID_REQUEST"} with HTTP 400; the error names each field and why'
    }
  }
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete spec.components.schemas[name]
  return withoutBuiltinIds(spec)
}

/**
 * A route whose rest is a file's path (`.../files/*`) as OpenAPI can say it: `{path}`, the parameter named so.
 */
const withNamedWildcards = (spec: Record<string, any>): Record<string, any> => {
  for (const [route, operations] of Object.entries<Record<string, any>>(spec.paths)) {
    if (!route.endsWith("/*")) continue
    for (const operation of Object.values<Record<string, any>>(operations)) {
      for (const parameter of operation.parameters ?? []) if (parameter.name === "*") parameter.name = "path"
    }
    delete spec.paths[route]
    spec.paths[`${route.slice(0, -1)}{path}`] = operations
  }
  return spec
}

/**
 * The generator tags every `unknown`/`object` schema with the same `$id`
 * (`/schemas/unknown`); repeated, those ids make the document invalid, and
 * they name nothing a client can use.
 */
const withoutBuiltinIds = <A>(node: A): A => {
  if (Array.isArray(node)) return node.map(withoutBuiltinIds) as A
  if (node === null || typeof node !== "object") return node
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(node)) {
    if (key === "$id" && typeof value === "string" && value.startsWith("/schemas/")) continue
    out[key] = withoutBuiltinIds(value)
  }
  return out as A
}

/** Every group of the API; the server mounts those implemented so far. */
export class Api extends HttpApi.make("agent-runtime")
  .add(HealthGroup)
  .add(MeGroup)
  .add(TokensGroup)
  .add(OAuthGroup)
  .add(ModelsGroup)
  .add(ProvidersGroup)
  .add(KeysGroup)
  .add(KeyScopesGroup)
  .add(AgentsGroup)
  .add(RunsGroup)
  .add(InputsGroup)
  .add(DefinitionsGroup)
  .add(SchedulesGroup)
  .add(ClientsGroup)
  .add(VolumesGroup)
  .add(ClientFilesGroup)
  .add(DownloadsGroup)
  .add(WebhooksGroup)
  .add(TelemetryGroup)
  .add(BillingGroup)
  .add(PaymentNoticesGroup)
  .add(AdminGroup)
  .add(WellKnownGroup)
  // Any route can meet these: unreadable or invalid input, unknown routes, oversized bodies, defects, and a
  // node that cannot serve now (its database unreachable, an agent's runner not answering in time).
  .addError(ApiError.InvalidRequest.Wire)
  .addError(ApiError.NotFound.Wire)
  .addError(ApiError.TooLarge.Wire)
  .addError(ApiError.Internal.Wire)
  .addError(ApiError.Unavailable.Wire)
  .annotate(OpenApi.Title, "Agent Runtime")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(OpenApi.Transform, (spec) => withoutDecodeError(withNamedWildcards(spec)))
{}
