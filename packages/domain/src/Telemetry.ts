/**
 * Telemetry export: a tenant's OTLP/HTTP endpoint that receives each run as
 * a trace (OpenTelemetry GenAI conventions), and what the runtime last heard
 * from it.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"
import { HttpUrl } from "./Validation.ts"

export const TelemetryProtocol = Schema.Literal("http/protobuf", "http/json")
export type TelemetryProtocol = typeof TelemetryProtocol.Type

/** Backends whose endpoint and header names the runtime knows; a preset only labels the settings. */
export const TelemetryPreset = Schema.Literal(
  "langsmith",
  "langfuse",
  "honeycomb",
  "datadog",
  "grafana",
  "jaeger",
  "collector"
)
export type TelemetryPreset = typeof TelemetryPreset.Type

export const maxTelemetryHeaders = 32
export const maxTelemetryHeaderBytes = 8192

const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/
const headerValue = Schema.String.pipe(
  Schema.pattern(/^[\t\x20-\x7e\x80-\xff]{0,4096}$/, {
    message: () => "must be at most 4096 characters without control characters"
  })
)

/** Header names the runtime sets itself or that would change how the request is carried. */
export const reservedHeaders: ReadonlySet<string> = new Set([
  "content-type",
  "content-length",
  "content-encoding",
  "transfer-encoding",
  "host",
  "connection",
  "upgrade",
  "te",
  "trailer",
  "keep-alive",
  "proxy-authorization",
  "expect"
])

// Names are checked by the filter, so the document shows a plain map of strings.
export const TelemetryHeaders = Schema.Record({ key: Schema.String, value: headerValue }).pipe(
  Schema.filter((headers) => {
    const names = Object.keys(headers)
    if (names.length > maxTelemetryHeaders) return `at most ${maxTelemetryHeaders} headers`
    const invalid = names.find((name) => !headerName.test(name))
    if (invalid !== undefined) return `${JSON.stringify(invalid.slice(0, 64))} is not an HTTP header name`
    const reserved = names.find((name) => reservedHeaders.has(name.toLowerCase()))
    if (reserved !== undefined) return `${reserved} is set by the runtime`
    const lower = new Set(names.map((name) => name.toLowerCase()))
    if (lower.size !== names.length) return "a header name appears twice"
    const bytes = names.reduce((sum, name) => sum + name.length + headers[name]!.length, 0)
    return bytes <= maxTelemetryHeaderBytes || `at most ${maxTelemetryHeaderBytes} bytes of headers`
  })
).annotations({ description: "sent with every export; stored encrypted, never returned" })

export const TelemetryInclude = Schema.Struct({
  content: Schema.optional(Schema.Boolean.annotations({
    description: "also export prompts, replies, tool arguments and results, cut at 16,384 characters each"
  }))
}).annotations({ parseOptions: { onExcessProperty: "error" } })

/** `PUT /v1/telemetry`: changes only what is given (the first PUT needs `endpoint`). */
export class TelemetryInput extends Schema.Class<TelemetryInput>("TelemetryInput")(
  Schema.Struct({
    endpoint: Schema.optional(HttpUrl.annotations({
      description: "the OTLP/HTTP traces URL; a collector's base URL (no path) gets /v1/traces"
    })),
    headers: Schema.optional(TelemetryHeaders),
    protocol: Schema.optional(TelemetryProtocol),
    sampleRate: Schema.optional(
      Schema.Number.pipe(Schema.between(0, 1)).annotations({ description: "share of runs traced, 0 to 1" })
    ),
    include: Schema.optional(TelemetryInclude),
    preset: Schema.optional(TelemetryPreset)
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** What the nodes last heard from the endpoint (errors since the last success). */
export class TelemetryStatus extends Schema.Class<TelemetryStatus>("TelemetryStatus")({
  lastExportAt: Schema.NullOr(Timestamp),
  lastError: Schema.NullOr(Schema.String),
  lastErrorAt: Schema.NullOr(Timestamp)
}) {}

export class TelemetrySettings extends Schema.Class<TelemetrySettings>("TelemetrySettings")({
  endpoint: Schema.String,
  headers: Schema.Array(Schema.String).annotations({ description: "the header names; values are never returned" }),
  protocol: TelemetryProtocol,
  sampleRate: Schema.Number,
  include: Schema.Struct({ content: Schema.Boolean }),
  preset: Schema.NullOr(TelemetryPreset),
  updatedAt: Timestamp,
  status: TelemetryStatus
}) {}

export class TelemetryCleared extends Schema.Class<TelemetryCleared>("TelemetryCleared")({
  deleted: Schema.Boolean
}) {}

/** `POST /v1/telemetry/test`: one span sent now, and what the endpoint answered. */
export class TelemetryTestResult extends Schema.Class<TelemetryTestResult>("TelemetryTestResult")({
  ok: Schema.Boolean,
  status: Schema.optional(Schema.Number),
  error: Schema.optional(Schema.String),
  traceId: Schema.String,
  spanId: Schema.String
}) {}
