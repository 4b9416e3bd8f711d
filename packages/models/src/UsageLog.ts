/**
 * Usage and cost of every model response, per tenant, key scope, provider
 * and model: what limits, billing and webhooks read.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export interface Entry {
  readonly tenantId: string
  readonly agentId?: string | undefined
  readonly requestId?: string | undefined
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

export class UsageLog extends Effect.Service<UsageLog>()("@agent-runtime/models/UsageLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const row = (entry: Entry) => ({
      tenantId: entry.tenantId,
      agentId: entry.agentId ?? null,
      requestId: entry.requestId ?? null,
      keyScope: entry.keyScope ?? null,
      keySource: entry.keySource,
      provider: entry.provider,
      model: entry.model,
      kind: entry.kind,
      input: entry.input,
      output: entry.output,
      cacheRead: entry.cacheRead,
      cacheWrite: entry.cacheWrite,
      reasoning: entry.reasoning ?? null,
      costUsd: entry.costUsd,
      costSource: entry.costSource
    })

    const record = (entry: Entry) =>
      sql`INSERT INTO usage_records ${sql.insert(row(entry))}`.pipe(Effect.asVoid, Effect.orDie)

    /** Many entries in one statement: the gateway records in batches off the response path. */
    const recordAll = (entries: ReadonlyArray<Entry>) =>
      entries.length === 0
        ? Effect.void
        : sql`INSERT INTO usage_records ${sql.insert(entries.map(row))}`.pipe(Effect.asVoid, Effect.orDie)

    const totals = (tenantId: string) =>
      sql<Totals>`
        SELECT count(*)::float8 AS responses, coalesce(sum(input), 0)::float8 AS input,
          coalesce(sum(output), 0)::float8 AS output, coalesce(sum(cache_read), 0)::float8 AS cache_read,
          coalesce(sum(cache_write), 0)::float8 AS cache_write, coalesce(sum(cost_usd), 0)::float8 AS cost_usd
        FROM usage_records WHERE tenant_id = ${tenantId}`.pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

    /**
     * USD an agent's responses cost since a time (its spend limit's start), or within one request; with
     * `subAgents`, also what those agents spent (in any request) since the time.
     */
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
        Effect.orDie
      )

    return { record, recordAll, totals, spent } as const
  })
}) {}
