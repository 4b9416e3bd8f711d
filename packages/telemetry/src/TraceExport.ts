/**
 * Sends tenants' spans to their OTLP/HTTP endpoints, never in a run's way:
 * a run hands each finished span to an in-memory queue (at most
 * `maxQueuedPerTenant` per tenant and `maxQueued` in all; beyond that spans
 * are dropped and counted), and one loop per node sends batches of up to
 * `maxBatch` about every `flushInterval`, one batch at a time per tenant.
 *
 * A batch is encoded by OpenTelemetry's own serializers (protobuf or JSON),
 * goes out through the egress guard (the endpoint checked at every
 * connection, redirects never followed) and is tried again on 429, 502, 503,
 * 504, a timeout or a failed connection, honouring Retry-After, up to
 * `maxAttempts` times; any other answer drops it. Export is best effort:
 * spans live in memory, and a stopping node sends what it can within
 * `flushOnStop`.
 */
import { ApiError, Telemetry } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import type { PersistenceError } from "@agent-runtime/store"
import { type Attributes, type HrTime, SpanKind, SpanStatusCode } from "@opentelemetry/api"
import { JsonTraceSerializer, ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer"
import { resourceFromAttributes } from "@opentelemetry/resources"
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base"
import { Context, Duration, Effect, FiberSet, Layer, Metric, Option, Redacted, Schedule } from "effect"
import * as RunSpans from "./RunSpans.ts"
import * as TelemetrySettings from "./TelemetrySettings.ts"
import * as TraceParent from "./TraceParent.ts"

export const maxQueuedPerTenant = 5000
export const maxQueued = 20_000
export const maxBatch = 512
export const maxAttempts = 5
export const flushInterval = Duration.seconds(2)
export const exportTimeout = Duration.seconds(10)
export const flushOnStop = Duration.seconds(3)
export const settingsWait = Duration.seconds(1)
/** Batches in flight at once on a node, all tenants together. */
export const maxSending = 8

/** Spans dropped: a full queue, or a batch out of attempts or refused. */
export const droppedSpans = Metric.counter("telemetry_spans_dropped", {
  description: "tenant spans dropped: queue full, or a batch refused or out of attempts",
  incremental: true
})
export const exportedSpans = Metric.counter("telemetry_spans_exported", {
  description: "tenant spans an endpoint accepted",
  incremental: true
})

/** What a request's run needs to be traced. */
export interface RunRequest {
  readonly tenantId: string
  readonly agentId: string
  readonly requestId: string
  /** The caller's `traceparent`, as sent with the request. */
  readonly traceparent?: string | undefined
  /** The tenant's sampleRate decides, not the header's flag (a resume in the trace of the run that asked). */
  readonly sampledByRate?: boolean | undefined
}

export class TraceExport extends Context.Tag("@agent-runtime/telemetry/TraceExport")<TraceExport, {
  /**
   * The run's trace when its tenant exports and the run is sampled. A settings read that fails leaves the
   * run untraced rather than failing it.
   */
  readonly begin: (request: RunRequest) => Effect.Effect<Option.Option<RunSpans.Traced>>
  /** The trace context a request's record shows, when its tenant exports. */
  readonly contextOf: (request: RunRequest) => Effect.Effect<Option.Option<TraceContextView>>
  /** Sends one span now, past the queue, and answers what the endpoint said. */
  readonly test: (
    tenantId: string
  ) => Effect.Effect<Telemetry.TelemetryTestResult, ApiError.NotFound | PersistenceError.PersistenceError>
}>() {}

export interface TraceContextView {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly sampled: boolean
}

const resource = resourceFromAttributes({ "service.name": "agent-runtime" })
const scope = { name: "agent-runtime" }

const hrTime = (ms: number): HrTime => [Math.floor(ms / 1000), Math.round((ms % 1000) * 1e6)]

const kinds: Record<RunSpans.Kind, SpanKind> = {
  server: SpanKind.SERVER,
  client: SpanKind.CLIENT,
  internal: SpanKind.INTERNAL
}

/** Our span as the OpenTelemetry serializers read one. */
const readable = (span: RunSpans.SpanData): ReadableSpan => ({
  name: span.name,
  kind: kinds[span.kind],
  spanContext: () => ({ traceId: span.traceId, spanId: span.spanId, traceFlags: 1 }),
  ...(span.parentSpanId === undefined
    ? {}
    : { parentSpanContext: { traceId: span.traceId, spanId: span.parentSpanId, traceFlags: 1 } }),
  startTime: hrTime(span.startMs),
  endTime: hrTime(span.endMs),
  duration: hrTime(span.endMs - span.startMs),
  status: span.status.error
    ? { code: SpanStatusCode.ERROR, ...(span.status.message === undefined ? {} : { message: span.status.message }) }
    : { code: SpanStatusCode.UNSET },
  attributes: span.attributes as Attributes,
  links: [],
  events: [],
  ended: true,
  resource,
  instrumentationScope: scope,
  droppedAttributesCount: 0,
  droppedEventsCount: 0,
  droppedLinksCount: 0
})

/** Answers worth trying again (OTLP/HTTP's retryable statuses). */
const retryable = new Set([429, 502, 503, 504])

type Sent =
  | { readonly _tag: "Answered"; readonly status: number; readonly retryAfter: string | null }
  | { readonly _tag: "Failed"; readonly error: string }

/** Seconds or an HTTP date; at most a minute, so a batch does not sit out the node's life. */
const retryAfterMillis = (value: string | null): number | undefined => {
  if (value === null) return undefined
  const seconds = Number(value)
  const millis = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - Date.now()
  return Number.isFinite(millis) ? Math.min(60_000, Math.max(0, millis)) : undefined
}

export interface Options {
  /** The first retry's wait, doubling after (default 1 s). */
  readonly firstRetry?: Duration.DurationInput
}

export const make = (options: Options = {}) =>
  Effect.gen(function*() {
    const settings = yield* TelemetrySettings.TelemetrySettings
    const egress = yield* Egress.Egress
    const firstRetryMs = Duration.toMillis(options.firstRetry ?? Duration.seconds(1))
    const queues = new Map<string, Array<RunSpans.SpanData>>()
    const sending = new Set<string>()
    let queued = 0

    const drop = (count: number) => droppedSpans.unsafeUpdate(count, [])

    /**
     * The tenant's target, read within `settingsWait`: a run or a record never waits on a database that does
     * not answer (a connection cut by a partition hangs rather than fails); it goes untraced instead.
     */
    const targetOf = (tenantId: string) => settings.target(tenantId, { within: settingsWait })

    const offerFor = (tenantId: string) => (span: RunSpans.SpanData) => {
      let queue = queues.get(tenantId)
      if (queue === undefined) queues.set(tenantId, queue = [])
      if (queue.length >= maxQueuedPerTenant || queued >= maxQueued) return drop(1)
      queue.push(span)
      queued++
    }

    const post = (target: TelemetrySettings.Target, spans: ReadonlyArray<RunSpans.SpanData>) =>
      Effect.suspend(() => {
        const json = target.protocol === "http/json"
        const serializer = json ? JsonTraceSerializer : ProtobufTraceSerializer
        const body = serializer.serializeRequest(spans.map(readable))!
        return egress.fetch(target.endpoint, {
          method: "POST",
          body,
          headers: {
            ...Redacted.value(target.headers),
            "content-type": json ? "application/json" : "application/x-protobuf",
            "user-agent": "agent-runtime-telemetry/1"
          }
        }).pipe(
          Effect.tap((response) => Effect.promise(() => response.body?.cancel() ?? Promise.resolve())),
          Effect.map((response): Sent => ({
            _tag: "Answered",
            status: response.status,
            retryAfter: response.headers.get("retry-after")
          })),
          Effect.timeoutFail({
            duration: exportTimeout,
            onTimeout: () => `no answer within ${Duration.format(exportTimeout)}`
          }),
          Effect.catchAll((error) =>
            Effect.succeed<Sent>({ _tag: "Failed", error: typeof error === "string" ? error : error.message })
          )
        )
      })

    /** Sends a batch, retrying what is worth it; the last answer. */
    const deliver = (target: TelemetrySettings.Target, spans: ReadonlyArray<RunSpans.SpanData>) =>
      Effect.gen(function*() {
        let sent: Sent = { _tag: "Failed", error: "not sent" }
        for (let attempt = 1; attempt <= maxAttempts; attempt++) {
          sent = yield* post(target, spans)
          const again = sent._tag === "Failed" || retryable.has(sent.status)
          if (!again || attempt === maxAttempts) break
          const wait = (sent._tag === "Answered" ? retryAfterMillis(sent.retryAfter) : undefined) ??
            firstRetryMs * 2 ** (attempt - 1) * (0.8 + Math.random() * 0.4)
          yield* Effect.sleep(Duration.millis(wait))
        }
        return sent
      })

    const describe = (sent: Sent) =>
      sent._tag === "Failed"
        ? `Could not connect (${sent.error})`
        : sent.status >= 300 && sent.status < 400
        ? `HTTP ${sent.status}: redirects are not followed`
        : `HTTP ${sent.status}`

    const ok = (sent: Sent) => sent._tag === "Answered" && sent.status >= 200 && sent.status < 300

    /** One batch of the tenant's queue; the tenant's settings read again, so a cleared export sends nothing. */
    const sendBatch = (tenantId: string) =>
      Effect.gen(function*() {
        const queue = queues.get(tenantId) ?? []
        const batch = queue.splice(0, maxBatch)
        queued -= batch.length
        if (queue.length === 0) queues.delete(tenantId)
        if (batch.length === 0) return
        const target = yield* targetOf(tenantId).pipe(Effect.orElseSucceed(() => Option.none()))
        if (Option.isNone(target)) return drop(batch.length)
        const sent = yield* deliver(target.value, batch)
        if (ok(sent)) exportedSpans.unsafeUpdate(batch.length, [])
        else drop(batch.length)
        yield* settings.recordExport(tenantId, ok(sent) ? { ok: true } : { ok: false, error: describe(sent) }).pipe(
          Effect.ignore
        )
      })

    // Suspended: the tenants with spans are read at each round, not once.
    // Each tenant's sends run apart from the round that starts them: an endpoint that hangs holds its own
    // tenant's batches for their attempts, never another tenant's, nor the next round.
    const senders = yield* FiberSet.make<void, never>()
    const lanes = yield* Effect.makeSemaphore(maxSending)
    const sendTenant = (tenantId: string, all: boolean) =>
      Effect.suspend(() => {
        const batches = all ? Math.ceil((queues.get(tenantId)?.length ?? 0) / maxBatch) : 1
        return Effect.repeatN(sendBatch(tenantId), Math.max(0, batches - 1))
      }).pipe(
        lanes.withPermits(1),
        Effect.catchAllCause((cause) => Effect.logWarning("exporting tenant spans failed", cause)),
        Effect.ensuring(Effect.sync(() => sending.delete(tenantId)))
      )
    const sendDue = (all: boolean) =>
      Effect.suspend(() =>
        Effect.forEach(
          [...queues.keys()].filter((tenantId) => !sending.has(tenantId)),
          (tenantId) => {
            sending.add(tenantId)
            return FiberSet.run(senders, sendTenant(tenantId, all))
          },
          { discard: true }
        )
      )

    yield* sendDue(false).pipe(Effect.repeat(Schedule.spaced(flushInterval)), Effect.forkScoped)
    // A stopping node sends what it holds, within a bound: export is best effort.
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(sendDue(true), FiberSet.awaitEmpty(senders)).pipe(Effect.timeout(flushOnStop), Effect.ignore)
    )

    const contextOf = (request: RunRequest) =>
      targetOf(request.tenantId).pipe(
        Effect.map(Option.map((target) => {
          const context = TraceParent.forRequest(
            request.agentId,
            request.requestId,
            TraceParent.parse(request.traceparent)
          )
          return {
            traceId: context.traceId,
            spanId: context.spanId,
            ...(context.parentSpanId === undefined ? {} : { parentSpanId: context.parentSpanId }),
            sampled: TraceParent.sampled(context, target.sampleRate)
          }
        })),
        Effect.orElseSucceed(() => Option.none())
      )

    const begin = (request: RunRequest) =>
      targetOf(request.tenantId).pipe(
        Effect.map(Option.flatMap((target): Option.Option<RunSpans.Traced> => {
          const caller = TraceParent.forRequest(
            request.agentId,
            request.requestId,
            TraceParent.parse(request.traceparent)
          )
          const context = request.sampledByRate === true ? { ...caller, sampledByCaller: undefined } : caller
          if (!TraceParent.sampled(context, target.sampleRate)) return Option.none()
          return Option.some({
            tenantId: request.tenantId,
            context,
            includeContent: target.includeContent,
            common: {
              "agent_runtime.tenant": request.tenantId,
              "agent_runtime.agent.id": request.agentId,
              "agent_runtime.request.id": request.requestId
            },
            offer: offerFor(request.tenantId),
            usage: RunSpans.emptyUsage()
          })
        })),
        // At debug level: while the database is away every run would say it.
        Effect.catchAll((error) =>
          Effect.as(Effect.logDebug("reading telemetry settings failed; the run is not traced", error), Option.none())
        )
      )

    const test = (tenantId: string) =>
      Effect.gen(function*() {
        const target = yield* targetOf(tenantId)
        if (Option.isNone(target)) return yield* new ApiError.NotFound({ error: "no telemetry export is set" })
        const now = Date.now()
        const span: RunSpans.SpanData = {
          traceId: TraceParent.randomTraceId(),
          spanId: TraceParent.randomSpanId(),
          parentSpanId: undefined,
          name: "agent-runtime test span",
          kind: "internal",
          startMs: now,
          endMs: now + 1,
          attributes: { "agent_runtime.tenant": tenantId, "agent_runtime.test": true },
          status: { error: false }
        }
        const sent = yield* post(target.value, [span])
        yield* settings.recordExport(tenantId, ok(sent) ? { ok: true } : { ok: false, error: describe(sent) })
        return new Telemetry.TelemetryTestResult({
          ok: ok(sent),
          ...(sent._tag === "Answered" ? { status: sent.status } : {}),
          ...(ok(sent) ? {} : { error: describe(sent) }),
          traceId: span.traceId,
          spanId: span.spanId
        })
      })

    return TraceExport.of({ begin, contextOf, test })
  })

export const layer = (
  options: Options = {}
): Layer.Layer<TraceExport, never, TelemetrySettings.TelemetrySettings | Egress.Egress> =>
  Layer.scoped(TraceExport, make(options))
