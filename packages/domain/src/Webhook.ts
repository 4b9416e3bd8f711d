/**
 * Webhooks: the endpoints a tenant registers, the per-tenant usage webhook,
 * and the signed events delivered to them (Standard Webhooks; at least once,
 * dedupe by the event id, order by `created`).
 */
import { Schema } from "effect"
import { StringMap, Timestamp } from "./Common.ts"
import { InputKind, ResolvedInputState } from "./Input.ts"
import { StoppedReason } from "./Run.ts"
import { HttpUrl, JsonObject } from "./Validation.ts"

export const RunEventType = Schema.Literal(
  "run.started",
  "run.completed",
  "run.failed",
  "input.requested",
  "input.resolved",
  "usage.recorded"
)
export type RunEventType = typeof RunEventType.Type

export const BillingEventType = Schema.Literal(
  "billing.balance.low",
  "billing.balance.depleted",
  "billing.topup.receipt",
  "billing.topup.declined",
  "billing.topup.action_required",
  "billing.topup.no_card",
  "billing.topup.limit",
  "billing.topup.reconcile"
)
export type BillingEventType = typeof BillingEventType.Type

/** The event type names an endpoint may subscribe to. */
export const WebhookEventType = Schema.Literal(...RunEventType.literals, ...BillingEventType.literals)
export type WebhookEventType = typeof WebhookEventType.Type

export const WebhookId = Schema.String.pipe(Schema.pattern(/^we_[A-Za-z0-9]+$/)).annotations({
  description: "webhook endpoint id (we_...)"
})
export type WebhookId = typeof WebhookId.Type

/** A signing secret (whsec_...); strip the prefix before verifying with a Standard Webhooks library. */
export const WebhookSigningSecret = Schema.String.pipe(Schema.pattern(/^whsec_/)).annotations({
  description: "signing secret (whsec_...), shown only once"
})
export type WebhookSigningSecret = typeof WebhookSigningSecret.Type

export const maxWebhookEndpoints = 16

const description = Schema.String.pipe(Schema.maxLength(500, { message: () => "must be at most 500 characters" }))

export class WebhookEndpoint extends Schema.Class<WebhookEndpoint>("WebhookEndpoint")({
  id: WebhookId,
  url: Schema.String,
  events: Schema.Array(WebhookEventType),
  description: Schema.optional(description),
  createdAt: Timestamp
}) {}

/** Body of POST /v1/webhooks; no other fields are allowed. */
export class WebhookEndpointInput extends Schema.Class<WebhookEndpointInput>("WebhookEndpointInput")(
  Schema.Struct({
    url: HttpUrl,
    events: Schema.Array(WebhookEventType),
    description: Schema.optional(description.annotations({ description: "at most 500 characters" }))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** Body of PATCH /v1/webhooks/{webhookId}: the input's fields, all optional; no other fields are allowed. */
export class WebhookEndpointUpdate extends Schema.Class<WebhookEndpointUpdate>("WebhookEndpointUpdate")(
  Schema.Struct({
    url: Schema.optional(HttpUrl),
    events: Schema.optional(Schema.Array(WebhookEventType)),
    description: Schema.optional(description.annotations({ description: "at most 500 characters" }))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

export class WebhookEndpointCreated extends Schema.Class<WebhookEndpointCreated>("WebhookEndpointCreated")({
  ...WebhookEndpoint.fields,
  secret: WebhookSigningSecret
}) {}

/** Answer of POST /v1/webhooks/{webhookId}/secret; the old secret also signs for 24 hours. */
export class WebhookSecret extends Schema.Class<WebhookSecret>("WebhookSecret")({
  secret: WebhookSigningSecret
}) {}

/** The per-tenant usage webhook: receives each model response's usage. */
export class UsageWebhookInput extends Schema.Class<UsageWebhookInput>("UsageWebhookInput")(
  Schema.Struct({ url: HttpUrl }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

export class UsageWebhook extends Schema.Class<UsageWebhook>("UsageWebhook")({
  id: WebhookId.annotations({ description: "its id in /v1/webhooks/{webhookId}/attempts, deliveries and re-sends" }),
  url: Schema.String,
  createdAt: Timestamp
}) {}

export class UsageWebhookCreated extends Schema.Class<UsageWebhookCreated>("UsageWebhookCreated")({
  ...UsageWebhook.fields,
  secret: WebhookSigningSecret
}) {}

// Event payloads

export const WebhookEventId = Schema.String.pipe(Schema.pattern(/^evt_/)).annotations({
  description: "event id (evt_...), the same each time the event is sent; dedupe by it"
})
export type WebhookEventId = typeof WebhookEventId.Type

/** The methods a run reported by webhooks starts with. */
export const RunMethod = Schema.Literal("prompt", "continue", "resume", "execute")
export type RunMethod = typeof RunMethod.Type

/** Usage of the model responses on the node that ended a run. */
export class RunUsage extends Schema.Class<RunUsage>("RunUsage")({
  responses: Schema.Number,
  input: Schema.Number,
  output: Schema.Number,
  cacheRead: Schema.Number,
  cacheWrite: Schema.Number,
  costUsd: Schema.Number
}) {}

const metadata = StringMap.annotations({ description: "what the starting message carried" })

export class RunStarted extends Schema.Class<RunStarted>("RunStarted")({
  agentId: Schema.String,
  requestId: Schema.String,
  method: RunMethod,
  actor: Schema.optional(Schema.String),
  metadata: Schema.optional(metadata),
  resumes: Schema.optional(
    Schema.Number.annotations({ description: "set when a node resumed a turn whose node was lost" })
  )
}) {}

export class RunCompleted extends Schema.Class<RunCompleted>("RunCompleted")({
  agentId: Schema.String,
  requestId: Schema.String,
  method: RunMethod,
  usage: Schema.NullOr(RunUsage).annotations({ description: "null when the run made no model response there" }),
  actor: Schema.optional(Schema.String),
  metadata: Schema.optional(metadata),
  stopped: Schema.optional(StoppedReason),
  inputIds: Schema.optional(Schema.Array(Schema.String)),
  replyIndex: Schema.optional(Schema.Number),
  messageCount: Schema.optional(Schema.Number),
  steeredInto: Schema.optional(Schema.String)
}) {}

export class RunFailed extends Schema.Class<RunFailed>("RunFailed")({
  agentId: Schema.String,
  requestId: Schema.String,
  method: RunMethod,
  usage: Schema.NullOr(RunUsage),
  error: Schema.String,
  actor: Schema.optional(Schema.String),
  metadata: Schema.optional(metadata),
  uncertain: Schema.optional(
    Schema.Boolean.annotations({ description: "a restart cut it short; effects unknown" })
  ),
  steeredInto: Schema.optional(Schema.String)
}) {}

export class InputRequested extends Schema.Class<InputRequested>("InputRequested")({
  agentId: Schema.String,
  requestId: Schema.String,
  inputId: Schema.String,
  toolCallId: Schema.String,
  kind: InputKind,
  expiresAt: Timestamp
}) {}

export class InputResolved extends Schema.Class<InputResolved>("InputResolved")({
  agentId: Schema.String,
  requestId: Schema.String,
  inputId: Schema.String,
  state: ResolvedInputState
}) {}

export const UsageKind = Schema.Literal("response", "compaction")
export type UsageKind = typeof UsageKind.Type

export class UsageCost extends Schema.Class<UsageCost>("UsageCost")({
  usd: Schema.Number,
  source: Schema.Literal("provider", "catalog")
}) {}

export class UsageRecorded extends Schema.Class<UsageRecorded>("UsageRecorded")({
  agentId: Schema.String,
  requestId: Schema.NullOr(Schema.String),
  subject: Schema.NullOr(Schema.String),
  actor: Schema.NullOr(Schema.String),
  context: JsonObject,
  keyScope: Schema.NullOr(Schema.String),
  provider: Schema.String,
  model: Schema.String,
  kind: UsageKind,
  input: Schema.Number,
  output: Schema.Number,
  cacheRead: Schema.Number,
  cacheWrite: Schema.Number,
  reasoning: Schema.optional(Schema.Number),
  cost: UsageCost,
  at: Timestamp
}) {}

const envelope = {
  id: WebhookEventId,
  created: Timestamp
}

export class RunStartedEvent extends Schema.Class<RunStartedEvent>("RunStartedEvent")({
  ...envelope,
  type: Schema.Literal("run.started"),
  data: RunStarted
}) {}

export class RunCompletedEvent extends Schema.Class<RunCompletedEvent>("RunCompletedEvent")({
  ...envelope,
  type: Schema.Literal("run.completed"),
  data: RunCompleted
}) {}

export class RunFailedEvent extends Schema.Class<RunFailedEvent>("RunFailedEvent")({
  ...envelope,
  type: Schema.Literal("run.failed"),
  data: RunFailed
}) {}

export class InputRequestedEvent extends Schema.Class<InputRequestedEvent>("InputRequestedEvent")({
  ...envelope,
  type: Schema.Literal("input.requested"),
  data: InputRequested
}) {}

export class InputResolvedEvent extends Schema.Class<InputResolvedEvent>("InputResolvedEvent")({
  ...envelope,
  type: Schema.Literal("input.resolved"),
  data: InputResolved
}) {}

export class UsageRecordedEvent extends Schema.Class<UsageRecordedEvent>("UsageRecordedEvent")({
  ...envelope,
  type: Schema.Literal("usage.recorded"),
  data: UsageRecorded
}) {}

/** A billing event; its payload is not shown. */
export class BillingEvent extends Schema.Class<BillingEvent>("BillingEvent")({
  ...envelope,
  type: BillingEventType,
  data: JsonObject
}) {}

/** The body of a webhook delivery. */
export const WebhookEvent = Schema.Union(
  RunStartedEvent,
  RunCompletedEvent,
  RunFailedEvent,
  InputRequestedEvent,
  InputResolvedEvent,
  UsageRecordedEvent,
  BillingEvent
)
export type WebhookEvent = typeof WebhookEvent.Type

/**
 * The usage webhook's body: `usage.recorded` for every model response the
 * tenant's credentials paid for, agents' and the gateway's (`agentId` null).
 */
export class UsageReport extends Schema.Class<UsageReport>("UsageReport")({
  ...envelope,
  type: Schema.Literal("usage.recorded"),
  data: Schema.Struct({
    ...UsageRecorded.fields,
    agentId: Schema.NullOr(Schema.String).annotations({ description: "null for a gateway call" })
  })
}) {}

// Delivery views

export const DeliveryState = Schema.Literal("pending", "delivered", "failed")
export type DeliveryState = typeof DeliveryState.Type

/** One try at delivering an event to an endpoint. */
export class WebhookAttempt extends Schema.Class<WebhookAttempt>("WebhookAttempt")({
  eventId: WebhookEventId,
  type: Schema.String,
  attempt: Schema.Number.annotations({
    description: "1 for the first try of the event (again from 1 after a re-send)"
  }),
  at: Timestamp,
  status: Schema.NullOr(Schema.Number).annotations({ description: "the receiver's HTTP status; null when none came" }),
  latencyMs: Schema.Number,
  error: Schema.optional(
    Schema.String.annotations({ description: "why it did not count: timeout, redirect, refused address, ..." })
  ),
  outcome: Schema.Literal("delivered", "retrying", "failed"),
  nextAt: Schema.optional(Timestamp.annotations({ description: "when the next try is due, when retrying" }))
}) {}

/** An event's delivery to one endpoint. */
export class WebhookDelivery extends Schema.Class<WebhookDelivery>("WebhookDelivery")({
  eventId: WebhookEventId,
  type: Schema.String,
  created: Timestamp,
  state: DeliveryState,
  attempts: Schema.Number,
  nextAt: Schema.NullOr(Timestamp).annotations({ description: "when the next try is due; null once settled" }),
  lastStatus: Schema.NullOr(Schema.Number),
  lastError: Schema.NullOr(Schema.String)
}) {}

export const AttemptParams = Schema.Struct({
  limit: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)).annotations({
      description: "1 to 100, default 50"
    })
  )
})

export const DeliveryParams = Schema.Struct({
  state: Schema.optional(DeliveryState),
  limit: AttemptParams.fields.limit
})

/** Answer of a re-send: the event goes out again under its id, tried from now. */
export class Resent extends Schema.Class<Resent>("Resent")({
  eventId: WebhookEventId,
  endpointId: WebhookId,
  nextAt: Timestamp
}) {}
