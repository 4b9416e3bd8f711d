/**
 * Usage and cost of every model response, per tenant, key scope, provider
 * and model: what limits, billing and webhooks read.
 */
import { PersistenceError } from "@agent-runtime/store"
import { Outbox } from "@agent-runtime/webhooks"
import { SqlClient, type Statement } from "@effect/sql"
import { Context, Effect, Layer } from "effect"

export interface Entry {
  readonly tenantId: string
  readonly agentId?: string | undefined
  readonly requestId?: string | undefined
  /** The agent's subject, the turn's actor and the agent's context: for the usage.recorded event. */
  readonly subject?: string | undefined
  readonly actor?: string | undefined
  readonly context?: Record<string, unknown> | undefined
  readonly keyScope?: string | undefined
  readonly keySource: string
  readonly provider: string
  readonly model: string
  readonly kind: "response" | "compaction"
  readonly input: number
  readonly output: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly reasoning?: number | undefined
  readonly costUsd: number
  readonly costSource: "provider" | "catalog"
}

export interface Totals {
  readonly responses: number
  readonly input: number
  readonly output: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly costUsd: number
}

export interface Service {
  /** Records one response's usage, with its usage.recorded event, in one statement. */
  readonly record: (entry: Entry) => Effect.Effect<void, PersistenceError.PersistenceError>
  /** Many entries (and their events) in one statement: the gateway records in batches off the response path. */
  readonly recordAll: (entries: ReadonlyArray<Entry>) => Effect.Effect<void, PersistenceError.PersistenceError>
  /** What the tenant's responses used and cost, all told. */
  readonly totals: (tenantId: string) => Effect.Effect<Totals, PersistenceError.PersistenceError>
  /**
   * USD an agent's responses cost since a time (its spend limit's start), or within one request; with
   * `subAgents`, also what those agents spent (in any request) since the time.
   */
  readonly spent: (
    agentId: string,
    options: { readonly since?: number; readonly requestId?: string; readonly subAgents?: ReadonlyArray<string> }
  ) => Effect.Effect<number, PersistenceError.PersistenceError>
  /**
   * A jsonb expression for another statement: `{usage}`, the run's usage as run.completed and run.failed
   * carry it ({responses, input, output, cacheRead, cacheWrite, costUsd}), or null when it made no response.
   */
  readonly runUsage: (
    agentId: string | Statement.Fragment,
    requestId: string | Statement.Fragment
  ) => Statement.Fragment
}

export class UsageLog extends Context.Tag("@agent-runtime/models/UsageLog")<UsageLog, Service>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  /** What the stored row and the usage.recorded event both say, as they both say it. */
  const shared = (entry: Entry) => ({
    agentId: entry.agentId ?? null,
    requestId: entry.requestId ?? null,
    keyScope: entry.keyScope ?? null,
    provider: entry.provider,
    model: entry.model,
    kind: entry.kind,
    input: entry.input,
    output: entry.output,
    cacheRead: entry.cacheRead,
    cacheWrite: entry.cacheWrite
  })

  const row = (entry: Entry) => ({
    ...shared(entry),
    tenantId: entry.tenantId,
    keySource: entry.keySource,
    reasoning: entry.reasoning ?? null,
    costUsd: entry.costUsd,
    costSource: entry.costSource
  })

  /** usage.recorded: for subscribed endpoints when an agent made the call, for the usage webhook always. */
  const event = (entry: Entry): Outbox.NewEvent => ({
    tenantId: entry.tenantId,
    type: "usage.recorded",
    audience: entry.agentId === undefined ? "usage" : "all",
    data: {
      ...shared(entry),
      subject: entry.subject ?? null,
      actor: entry.actor ?? null,
      context: entry.context ?? {},
      ...(entry.reasoning === undefined ? {} : { reasoning: entry.reasoning }),
      cost: { usd: entry.costUsd, source: entry.costSource }
    },
    merge: sql`jsonb_build_object('at', floor(extract(epoch from now())))`
  })

  const recordAll = (entries: ReadonlyArray<Entry>) =>
    entries.length === 0
      ? Effect.void
      : sql`WITH recorded AS (INSERT INTO usage_records ${sql.insert(entries.map(row))})
        ${Outbox.insert(sql, entries.map(event))}`.pipe(Effect.asVoid, PersistenceError.PersistenceError.refail)

  const record = (entry: Entry) => recordAll([entry])

  const totals = (tenantId: string) =>
    sql<Totals>`
      SELECT count(*)::float8 AS responses, coalesce(sum(input), 0)::float8 AS input,
        coalesce(sum(output), 0)::float8 AS output, coalesce(sum(cache_read), 0)::float8 AS cache_read,
        coalesce(sum(cache_write), 0)::float8 AS cache_write, coalesce(sum(cost_usd), 0)::float8 AS cost_usd
      FROM usage_records WHERE tenant_id = ${tenantId}`.pipe(
      Effect.map((rows) => rows[0]!),
      PersistenceError.PersistenceError.refail
    )

  const spent = (
    agentId: string,
    options: { readonly since?: number; readonly requestId?: string; readonly subAgents?: ReadonlyArray<string> }
  ) =>
    sql<{ usd: number }>`
      SELECT coalesce(sum(cost_usd), 0)::float8 AS usd FROM usage_records
      WHERE ((agent_id = ${agentId}
        ${options.requestId === undefined ? sql`` : sql`AND request_id = ${options.requestId}`})
        ${
      options.subAgents === undefined || options.subAgents.length === 0
        ? sql``
        : sql`OR agent_id IN ${sql.in(options.subAgents)}`
    })
        ${options.since === undefined ? sql`` : sql`AND at >= to_timestamp(${options.since})`}`.pipe(
      Effect.map((rows) => rows[0]?.usd ?? 0),
      PersistenceError.PersistenceError.refail
    )

  const runUsage = (agentId: string | Statement.Fragment, requestId: string | Statement.Fragment) =>
    sql`jsonb_build_object('usage', (SELECT CASE WHEN count(*) = 0 THEN 'null'::jsonb
        ELSE jsonb_build_object('responses', count(*), 'input', sum(input), 'output', sum(output),
          'cacheRead', sum(cache_read), 'cacheWrite', sum(cache_write), 'costUsd', sum(cost_usd)) END
      FROM usage_records WHERE agent_id = ${agentId} AND request_id = ${requestId}))`

  return UsageLog.of({ record, recordAll, totals, spent, runUsage })
})

export const layer: Layer.Layer<UsageLog, never, SqlClient.SqlClient> = Layer.effect(UsageLog, make)
