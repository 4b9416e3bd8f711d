/**
 * Usage and cost of every model response, per tenant, key scope, provider
 * and model: what limits, billing and webhooks read.
 */
import { Ledger, Rates } from "@agent-runtime/billing"
import { Billing } from "@agent-runtime/domain"
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
  /**
   * Records one response's usage, with its usage.recorded event and a prepaid tenant's charge for it, in one
   * statement.
   */
  readonly record: (entry: Entry) => Effect.Effect<void, PersistenceError.PersistenceError>
  /** Many entries (and their events) in one statement: the gateway records in batches off the response path. */
  readonly recordAll: (entries: ReadonlyArray<Entry>) => Effect.Effect<void, PersistenceError.PersistenceError>
  /** GET /v1/usage: what the tenant's responses used, per UTC day, model and kind, with the totals. */
  readonly report: (
    tenantId: string,
    params: typeof Billing.UsageParams.Type
  ) => Effect.Effect<Billing.Usage, PersistenceError.PersistenceError>
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
  const rates = yield* Rates.Rates

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
    subject: entry.subject ?? null,
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

  /** What a prepaid tenant pays for a response: model cost on a key that is not its own. */
  const chargeOf = (entry: Entry): Ledger.Charge => ({
    tenantId: entry.tenantId,
    model: Ledger.modelCharge(rates, entry),
    tokens: entry.input + entry.output + entry.cacheRead + entry.cacheWrite,
    responses: 1
  })

  const recordAll = (entries: ReadonlyArray<Entry>) => {
    if (entries.length === 0) return Effect.void
    const charged = Ledger.charging(sql, entries.map(chargeOf))
    return sql`WITH recorded AS (INSERT INTO usage_records ${sql.insert(entries.map(row))})
        ${charged === undefined ? sql`` : sql`, charged AS (${charged})`}
        ${Outbox.insert(sql, entries.map(event))}`.pipe(Effect.asVoid, PersistenceError.PersistenceError.refail)
  }

  const record = (entry: Entry) => recordAll([entry])

  const report = (tenantId: string, params: typeof Billing.UsageParams.Type) =>
    Effect.gen(function*() {
      const since = params.since ?? Ledger.monthStart()
      const until = params.until ?? Math.floor(Date.now() / 1000) + 1
      const rows = yield* sql<Omit<Billing.UsageDay, never>>`
        SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, provider || '/' || model AS model,
          CASE WHEN kind = 'compaction' THEN 'compaction' ELSE 'turn' END AS kind,
          count(*)::float8 AS responses, sum(input)::float8 AS input, sum(output)::float8 AS output,
          sum(cache_read)::float8 AS cache_read, sum(cache_write)::float8 AS cache_write,
          sum(cost_usd)::float8 AS cost,
          (count(*) FILTER (WHERE key_source IN ${sql.in(Ledger.operatorKeySources)}))::float8
            AS platform_responses,
          coalesce(sum(cost_usd) FILTER (WHERE key_source IN ${sql.in(Ledger.operatorKeySources)}), 0)::float8
            AS platform_cost
        FROM usage_records
        WHERE tenant_id = ${tenantId} AND at >= to_timestamp(${since}) AND at < to_timestamp(${until})
          ${params.agentId === undefined ? sql`` : sql`AND agent_id = ${params.agentId}`}
          ${params.keyScope === undefined ? sql`` : sql`AND key_scope = ${params.keyScope}`}
          ${params.subject === undefined ? sql`` : sql`AND subject = ${params.subject}`}
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`
      const days = rows.map((row) => new Billing.UsageDay(row, { disableValidation: true }))
      const sum = (field: keyof Billing.UsageTotals) => days.reduce((total, day) => total + day[field], 0)
      return new Billing.Usage({
        since,
        until,
        totals: new Billing.UsageTotals({
          responses: sum("responses"),
          input: sum("input"),
          output: sum("output"),
          cacheRead: sum("cacheRead"),
          cacheWrite: sum("cacheWrite"),
          cost: sum("cost"),
          platformResponses: sum("platformResponses"),
          platformCost: sum("platformCost")
        }),
        days
      })
    }).pipe(PersistenceError.PersistenceError.refail)

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

  return UsageLog.of({ record, recordAll, report, totals, spent, runUsage })
})

export const layer: Layer.Layer<UsageLog, never, SqlClient.SqlClient | Rates.Rates> = Layer.effect(UsageLog, make)
