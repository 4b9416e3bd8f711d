/**
 * The operator's metrics, in Prometheus' text format (served by http/Metrics.ts). Every Effect `Metric` in
 * the process is exported, through @effect/opentelemetry's metrics bridge and OpenTelemetry's Prometheus
 * serializer: the instruments here, the cluster's own (`effect_cluster_*`) and any another package defines.
 *
 * What a request or a turn pays is a counter or histogram update. Figures that need a query (database
 * sessions, the webhook backlog, queued requests) or a look at the process are read when scraped.
 */
import { Drain, EventLog, RunnerReports } from "@agent-runtime/agent"
import { DatabaseHealth } from "@agent-runtime/store"
import { Metrics as OtelMetrics, type Resource } from "@effect/opentelemetry"
import { type HttpApp, HttpServerError, HttpServerRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { PrometheusSerializer } from "@opentelemetry/exporter-prometheus"
import { Context, Duration, Effect, Layer, Metric, MetricBoundaries, MetricLabel, Option, Tracer } from "effect"
import * as Runners from "./Runners.ts"
import { ServerConfig } from "./ServerConfig.ts"

const httpDuration = Metric.histogram(
  "http_server_request_duration_seconds",
  MetricBoundaries.fromIterable([0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30]),
  "REST API requests by method, route and status, timed until the response starts (an event stream until its " +
    "headers, a long poll until its answer)"
)

// Not incremental: it goes down as requests end, so it is exported as a gauge.
const httpActive = Metric.counter("http_server_active_requests", { description: "REST API requests being served" })

const turnDuration = Metric.histogram(
  "agent_runtime_turn_duration_seconds",
  MetricBoundaries.fromIterable([0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]),
  "Runs of a request on this node, from its start or resume to its settling or handing on"
)

const events = Metric.counter("agent_runtime_events", {
  description: "Events appended to the event logs of the agents this node owns, by type",
  incremental: true
})

const turnsRunning = Metric.gauge("agent_runtime_turns_running", { description: "Turns running on this node" })

const requestsQueued = Metric.gauge("agent_runtime_requests_queued", {
  description: "Accepted requests waiting to run on this node's agents, as of its last runner report"
})

const databaseReachable = Metric.gauge("agent_runtime_database_reachable", {
  description: "1 while this node reaches its database, 0 during an outage"
})

const databaseSessions = Metric.gauge("agent_runtime_database_sessions", {
  description: "This node's PostgreSQL sessions (its pool's and its LISTEN sessions), by state"
})

const webhooksPending = Metric.gauge("agent_runtime_webhook_deliveries_pending", {
  description: "Webhook deliveries not yet delivered nor given up, cluster-wide"
})

const webhooksOldest = Metric.gauge("agent_runtime_webhook_oldest_pending_seconds", {
  description: "Age of the oldest pending webhook delivery's event, cluster-wide; 0 when none is pending"
})

const cpuSeconds = Metric.counter("process_cpu_seconds", {
  description: "CPU time this process used, user and system",
  incremental: true
})

const residentMemory = Metric.gauge("process_resident_memory_bytes", { description: "This process's resident memory" })

// Label sets made once per value: a metric keeps its hook for each set it has seen, by identity.
const labelSets = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()
const labels = (...pairs: ReadonlyArray<readonly [string, string]>) => {
  const key = pairs.map(([name, value]) => `${name}=${value}`).join(",")
  let set = labelSets.get(key)
  if (set === undefined) {
    set = pairs.map(([name, value]) => MetricLabel.make(name, value))
    labelSets.set(key, set)
  }
  return set
}

/** Records one request the REST listener answered; `route` is the route's pattern (`/v1/agents/:id/prompt`). */
export const observeRequest = (method: string, route: string, status: number, seconds: number) =>
  httpDuration.unsafeUpdate(
    seconds,
    labels(["http.request.method", method], ["http.route", route], ["http.response.status_code", String(status)])
  )

/** Counts a request from when the listener takes it until it is answered. */
export const requestStarted = () => httpActive.unsafeUpdate(1, [])
export const requestEnded = () => httpActive.unsafeUpdate(-1, [])

/** The route of a request the router did not match (a 404, or one refused before routing). */
export const unmatched = "unmatched"

/**
 * Times every request the API serves, by the route the router matched: it names it on the request's
 * server span (`http.route`), which the platform's tracer opens around this middleware.
 */
export const middleware = <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.withFiberRuntime((fiber) => {
    const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
    const span = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
    const started = performance.now()
    requestStarted()
    return Effect.onExit(app, (exit) =>
      Effect.sync(() => {
        requestEnded()
        const route = Option.isSome(span) && span.value._tag === "Span"
          ? span.value.attributes.get("http.route")
          : undefined
        observeRequest(
          request.method,
          typeof route === "string" ? route : unmatched,
          HttpServerError.exitResponse(exit).status,
          (performance.now() - started) / 1000
        )
      }))
  })

/** A frame's type (an event's own for an event), or `other` for one that names none a label should hold. */
const eventType = (data: unknown) => {
  const frame = data as { readonly type?: unknown; readonly event?: { readonly type?: unknown } }
  const type = frame.type === "event" ? frame.event?.type : frame.type
  return typeof type === "string" && /^[a-z_]{1,40}$/.test(type) ? type : "other"
}

/** The node's registry of its agents' event logs (`EventLog.layerLocalLogs`), counting every event appended. */
export const layerLocalLogs: Layer.Layer<EventLog.LocalLogs> = Layer.effect(
  EventLog.LocalLogs,
  Effect.map(EventLog.LocalLogs, (logs) =>
    EventLog.LocalLogs.of({
      ...logs,
      register: (agentId, log) =>
        Effect.zipRight(
          logs.register(agentId, log),
          // A listener is told each entry in the step that appends it; the log is registered once per term.
          Effect.acquireRelease(
            Effect.orDie(log.listen(Option.none(), {
              entry: (entry) => events.unsafeUpdate(1, labels(["type", eventType(entry.data)])),
              close: () => {}
            })),
            ({ stop }) => Effect.sync(stop)
          )
        )
    }))
).pipe(Layer.provide(EventLog.layerLocalLogs))

/** The node's drain (`Drain.layer`), timing every run of a request it counts. */
export const layerDrain: Layer.Layer<Drain.Drain> = Layer.effect(
  Drain.Drain,
  Effect.map(Drain.make, (drain) =>
    Drain.Drain.of({
      ...drain,
      track: (effect) =>
        drain.track(Effect.suspend(() => {
          const started = performance.now()
          return Effect.ensuring(
            effect,
            Effect.sync(() => turnDuration.unsafeUpdate((performance.now() - started) / 1000, []))
          )
        }))
    }))
)

export class Metrics extends Context.Tag("@agent-runtime/server/Metrics")<Metrics, {
  /** Every Effect metric of the process in Prometheus' text format, the figures read at scrape time first refreshed. */
  readonly scrape: Effect.Effect<string>
}>() {}

/** A scrape's reads of the database wait this long at most; a figure not read keeps its last value. */
const readTimeout = Duration.seconds(2)

/** PostgreSQL's states of a client session; one the query does not find counts 0. */
const sessionStates = ["active", "idle", "idle in transaction", "idle in transaction (aborted)"]

export const make: Effect.Effect<
  Metrics["Type"],
  never,
  | SqlClient.SqlClient
  | Drain.Drain
  | RunnerReports.RunnerReports
  | DatabaseHealth.DatabaseHealth
  | ServerConfig
  | Resource.Resource
> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const drain = yield* Drain.Drain
  const runners = yield* RunnerReports.RunnerReports
  const health = yield* DatabaseHealth.DatabaseHealth
  const config = yield* ServerConfig
  const producer = yield* OtelMetrics.makeProducer
  // No scope labels (every metric has the bridge's one scope); `target_info` carries the resource.
  const serializer = new PrometheusSerializer(undefined, false, undefined, false, true)
  const sessionName = Runners.sessionName(config)
  let cpuUsed = 0
  // Shown at 0 from the start (a series that appears only with its first value is hard to alert on); the
  // labelled ones appear with each label's first value.
  turnDuration.register()
  httpActive.register()

  const processFigures = Effect.sync(() => {
    const { system, user } = process.cpuUsage()
    const used = (user + system) / 1e6
    cpuSeconds.unsafeUpdate(used - cpuUsed, [])
    cpuUsed = used
    residentMemory.unsafeUpdate(process.memoryUsage.rss(), [])
    turnsRunning.unsafeUpdate(drain.running(), [])
    databaseReachable.unsafeUpdate(health.current().reachable ? 1 : 0, [])
  })

  const sessions = Effect.map(
    sql<{ state: string | null; sessions: number }>`
      SELECT state, count(*)::int AS sessions FROM pg_stat_activity WHERE application_name = ${sessionName}
      GROUP BY state`,
    (rows) => {
      const counted = new Map(rows.map((row) => [row.state ?? "unknown", row.sessions]))
      for (const state of new Set([...sessionStates, ...counted.keys()])) {
        databaseSessions.unsafeUpdate(counted.get(state) ?? 0, labels(["state", state]))
      }
    }
  )

  // The webhooks package's table; its partial index on pending deliveries keeps the count cheap.
  const backlog = Effect.map(
    sql<{ pending: number; oldest: number }>`
      SELECT count(*)::int AS pending, coalesce(extract(epoch FROM now() - min(first_at)), 0)::float8 AS oldest
      FROM webhook_deliveries WHERE state = 'pending'`,
    ([row]) => {
      webhooksPending.unsafeUpdate(row?.pending ?? 0, [])
      webhooksOldest.unsafeUpdate(row?.oldest ?? 0, [])
    }
  )

  const queued = Effect.map(runners.list, (list) => {
    const mine = list.data.find((runner) => runner.address === runners.address)
    requestsQueued.unsafeUpdate(mine?.mailboxDepth ?? 0, [])
  })

  const read = <E>(figures: Effect.Effect<void, E>) =>
    figures.pipe(Effect.timeout(readTimeout), Effect.catchAllCause(Effect.logDebug))

  return Metrics.of({
    scrape: Effect.gen(function*() {
      yield* processFigures
      yield* Effect.all([read(sessions), read(backlog), read(queued)], { concurrency: "unbounded", discard: true })
      const { resourceMetrics } = yield* Effect.promise(() => producer.collect())
      return serializer.serialize(resourceMetrics)
    })
  })
})

export const layer: Layer.Layer<
  Metrics,
  never,
  | SqlClient.SqlClient
  | Drain.Drain
  | RunnerReports.RunnerReports
  | DatabaseHealth.DatabaseHealth
  | ServerConfig
  | Resource.Resource
> = Layer.effect(Metrics, make)
