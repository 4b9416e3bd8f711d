/**
 * Trace export: each run becomes a trace with spans per run, model call,
 * tool call and wait, sent to the tenant's OTLP/HTTP endpoint.
 */
import { Schema } from "effect"
import { StringMap, Timestamp } from "./Common.ts"
import { HttpUrl } from "./Validation.ts"

export const TelemetryProtocol = Schema.Literal("http/protobuf", "http/json")
export type TelemetryProtocol = typeof TelemetryProtocol.Type

export class TelemetryInclude extends Schema.Class<TelemetryInclude>("TelemetryInclude")({
  content: Schema.optional(
    Schema.Boolean.annotations({ description: "also export prompts, replies, tool arguments and results" })
  )
}) {}

/** Body of PUT /v1/telemetry; changes only what is given. */
export class TelemetrySettingsInput extends Schema.Class<TelemetrySettingsInput>("TelemetrySettingsInput")({
  endpoint: Schema.optional(HttpUrl.annotations({ description: "OTLP/HTTP URL" })),
  headers: Schema.optional(
    StringMap.annotations({
      description: "stored encrypted, never returned; kept while the endpoint keeps its origin; empty object removes"
    })
  ),
  protocol: Schema.optional(TelemetryProtocol.annotations({ description: "http/protobuf (default) or http/json" })),
  sampleRate: Schema.optional(
    Schema.Number.pipe(Schema.between(0, 1, { message: () => "must be between 0 and 1" })).annotations({
      description: "share of runs traced, default 1"
    })
  ),
  include: Schema.optional(TelemetryInclude),
  preset: Schema.optional(Schema.String)
}) {}

export class TelemetryStatus extends Schema.Class<TelemetryStatus>("TelemetryStatus")({
  lastExportAt: Schema.optional(Schema.NullOr(Timestamp)),
  lastError: Schema.optional(Schema.NullOr(Schema.String)),
  lastErrorAt: Schema.optional(Schema.NullOr(Timestamp))
}) {}

/** The settings as read (GET answers null when none are set); headers are names only. */
export class TelemetrySettings extends Schema.Class<TelemetrySettings>("TelemetrySettings")({
  endpoint: Schema.String,
  headers: Schema.optional(Schema.Array(Schema.String).annotations({ description: "header names only" })),
  protocol: TelemetryProtocol,
  sampleRate: Schema.Number,
  include: Schema.optional(TelemetryInclude),
  preset: Schema.optional(Schema.String),
  status: TelemetryStatus
}) {}

/** Answer of clearing the settings; false if nothing was set. */
export class TelemetryCleared extends Schema.Class<TelemetryCleared>("TelemetryCleared")({
  deleted: Schema.Boolean
}) {}

export class TelemetryTest extends Schema.Class<TelemetryTest>("TelemetryTest")({
  ok: Schema.Boolean,
  status: Schema.optional(Schema.Number),
  error: Schema.optional(Schema.String),
  traceId: Schema.String,
  spanId: Schema.String
}) {}
