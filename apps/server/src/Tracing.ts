/**
 * The operator's traces: Effect's own spans (the HTTP server's, entity messages', SQL statements', the turn's)
 * exported over OTLP/HTTP with protobuf to the collector the operator names with the standard OpenTelemetry
 * variables. With no endpoint set, no tracer is installed: spans stay Effect's in-process ones, nothing is
 * sampled, batched or sent, and a turn pays nothing for the feature.
 */
import { NodeSpans } from "@agent-runtime/telemetry"
import { NodeSdk, Tracer } from "@effect/opentelemetry"
import { diag, type DiagLogger, DiagLogLevel, trace } from "@opentelemetry/api"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto"
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type ReadableSpan,
  type Sampler,
  SamplingDecision,
  type SpanExporter,
  TraceIdRatioBasedSampler
} from "@opentelemetry/sdk-trace-base"
import { Config, type ConfigError, Duration, Effect, Layer, Option, Runtime } from "effect"
import * as OtelResource from "./OtelResource.ts"
import { ServerConfig } from "./ServerConfig.ts"

export interface Options {
  /** Where spans are posted: the traces endpoint itself, `/v1/traces` included. */
  readonly url: string
  /** Sent with every export (a collector's API key, say). */
  readonly headers: Readonly<Record<string, string>>
  readonly sampler: Sampler
}

/** `key=value` pairs separated by commas, values percent-encoded, as the OTLP exporter variables write headers. */
const headers = (name: string) =>
  Config.string(name).pipe(
    Config.withDefault(""),
    Config.map((list) =>
      Object.fromEntries(
        list.split(",").flatMap((pair) => {
          const equals = pair.indexOf("=")
          return equals <= 0 ? [] : [[pair.slice(0, equals).trim(), decodeURIComponent(pair.slice(equals + 1).trim())]]
        })
      )
    )
  )

/** The one encoding this node sends: a collector set up for another (gRPC on 4317) would hear nothing. */
const protocol = (name: string) => Config.option(Config.literal("http/protobuf")(name))

/** `OTEL_TRACES_SAMPLER` and its `OTEL_TRACES_SAMPLER_ARG`, as the OpenTelemetry SDKs read them. */
const sampler: Config.Config<Sampler> = Config.all({
  name: Config.literal(
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio"
  )("OTEL_TRACES_SAMPLER").pipe(Config.withDefault("parentbased_always_on")),
  ratio: Config.number("OTEL_TRACES_SAMPLER_ARG").pipe(
    Config.validate({ message: "Expected a ratio from 0 to 1", validation: (ratio) => ratio >= 0 && ratio <= 1 }),
    Config.withDefault(1)
  )
}).pipe(Config.map(({ name, ratio }) => {
  const root = name.endsWith("always_on")
    ? new AlwaysOnSampler()
    : name.endsWith("always_off")
    ? new AlwaysOffSampler()
    : new TraceIdRatioBasedSampler(ratio)
  return name.startsWith("parentbased_") ? new ParentBasedSampler({ root }) : root
}))

/**
 * Leaves out the statements no span encloses: the background loops' (lease renewals, sweeps, the database
 * probe), several a second on an idle node, each a trace of its own that says nothing. A statement made for
 * a request, an entity message or a turn is exported with it.
 */
const withoutLoneStatements = (sampler: Sampler): Sampler => ({
  shouldSample: (context, traceId, name, kind, attributes, links) =>
    name === "sql.execute" && trace.getSpanContext(context) === undefined
      ? { decision: SamplingDecision.NOT_RECORD }
      : sampler.shouldSample(context, traceId, name, kind, attributes, links),
  toString: () => `WithoutLoneStatements{${sampler.toString()}}`
})

const credentialParameter = /(^|[?&])(signature|code)=[^&#]*/g
const signInLink = /\/sign-in\/link\/[^/?#]+/g

/** A URL with its credentials left out: their names stay, their values do not. */
export const withoutCredentials = (url: string) =>
  url.replace(credentialParameter, "$1$2=REDACTED").replace(signInLink, "/sign-in/link/REDACTED")

/**
 * A URL may carry a credential: a signed link's signature (`/v1/files/...?signature=`, `/v1/links/...`), an
 * identity provider's code (`/sign-in/callback?code=`), a one-time sign-in link (`/sign-in/link/...`). The URL
 * attributes the HTTP tracer records keep where they were, not their values, so the collector holds none.
 */
const withoutSignatures = (exporter: SpanExporter): SpanExporter => {
  const scrub = (span: ReadableSpan): ReadableSpan => {
    const redacted = Object.entries(span.attributes).flatMap(([key, value]) => {
      if (typeof value !== "string" || !key.startsWith("url.")) return []
      const scrubbed = withoutCredentials(value)
      return scrubbed === value ? [] : [[key, scrubbed]]
    })
    return redacted.length === 0
      ? span
      : Object.create(span, { attributes: { value: { ...span.attributes, ...Object.fromEntries(redacted) } } })
  }
  return {
    export: (spans, done) => exporter.export(spans.map(scrub), done),
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve()
  }
}

/**
 * The traces endpoint, from `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is or `OTEL_EXPORTER_OTLP_ENDPOINT`
 * with `/v1/traces` appended; none when neither is set, when `OTEL_TRACES_EXPORTER` is `none` or when
 * `OTEL_SDK_DISABLED` is true.
 */
export const config: Config.Config<Option.Option<Options>> = Config.all({
  disabled: Config.boolean("OTEL_SDK_DISABLED").pipe(Config.withDefault(false)),
  exporter: Config.literal("otlp", "none")("OTEL_TRACES_EXPORTER").pipe(Config.withDefault("otlp")),
  tracesEndpoint: Config.option(Config.url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
  endpoint: Config.option(Config.url("OTEL_EXPORTER_OTLP_ENDPOINT")),
  headers: headers("OTEL_EXPORTER_OTLP_HEADERS"),
  tracesHeaders: headers("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
  protocol: protocol("OTEL_EXPORTER_OTLP_PROTOCOL"),
  tracesProtocol: protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
  sampler
}).pipe(Config.map((read) => {
  if (read.disabled || read.exporter === "none") return Option.none()
  const url = Option.orElse(
    Option.map(read.tracesEndpoint, (url) => url.href),
    () => Option.map(read.endpoint, (url) => `${url.href.replace(/\/$/, "")}/v1/traces`)
  )
  return Option.map(url, (url) => ({
    url,
    headers: { ...read.headers, ...read.tracesHeaders },
    sampler: withoutLoneStatements(read.sampler)
  }))
}))

/**
 * The SDK's own reports (an export refused or timed out, a full queue dropping spans) as the node's warnings:
 * without a logger it says nothing, and a collector that is down would go unnoticed.
 */
const diagnostics = Effect.gen(function*() {
  const runFork = Runtime.runFork(yield* Effect.runtime<never>())
  const warn = (message: string, ...args: Array<unknown>) =>
    void runFork(Effect.logWarning(message, ...args).pipe(Effect.annotateLogs("component", "otel")))
  const logger: DiagLogger = { error: warn, warn, info: () => {}, debug: () => {}, verbose: () => {} }
  yield* Effect.acquireRelease(
    Effect.sync(() => diag.setLogger(logger, DiagLogLevel.WARN)),
    () => Effect.sync(() => diag.disable())
  )
})

/** Effect's tracer over the SDK's, batching into the OTLP exporter. */
const exporting = (options: Options, server: ServerConfig) =>
  Layer.mergeAll(
    Layer.discard(Tracer.layer).pipe(
      Layer.provide(
        NodeSdk.layerTracerProvider(
          new BatchSpanProcessor(
            withoutSignatures(new OTLPTraceExporter({ url: options.url, headers: options.headers }))
          ),
          // What is still batched is flushed as the node stops; the stop timeout bounds it, as it bounds the rest.
          { sampler: options.sampler, shutdownTimeout: Duration.seconds(server.stopTimeoutSeconds) }
        )
      ),
      Layer.provide(OtelResource.layer)
    ),
    Layer.succeed(NodeSpans.Exporting, true),
    Layer.scopedDiscard(diagnostics)
  )

/** Installs the exporting tracer for the layers built above it when an endpoint is configured; nothing otherwise. */
export const layer: Layer.Layer<NodeSpans.Exporting, ConfigError.ConfigError, ServerConfig> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const options = yield* config
    const server = yield* ServerConfig
    return Option.match(options, {
      onNone: () => Layer.succeed(NodeSpans.Exporting, false),
      onSome: (options) => exporting(options, server)
    })
  })
)
