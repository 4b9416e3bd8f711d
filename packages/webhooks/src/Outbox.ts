/**
 * The outbox: webhook events are rows written by the statement (or in the
 * transaction) of the change they report, so there is no event for a change
 * that did not happen and no change without its event. A trigger fans each
 * event out to the endpoints subscribed to it in the same statement; a
 * tenant with none writes no event at all.
 */
import type { Webhook } from "@agent-runtime/domain"
import { Ids, Storable } from "@agent-runtime/store"
import { SqlClient, type Statement } from "@effect/sql"
import { Effect } from "effect"

export interface NewEvent {
  readonly tenantId: string
  readonly type: Webhook.WebhookEventType
  readonly data: Record<string, unknown>
  /** A jsonb expression merged into `data` as the row is written: what only the statement knows. */
  readonly merge?: Statement.Fragment | undefined
  /** The event is written only where this holds (in the statement's snapshot): the change it reports happens. */
  readonly when?: Statement.Fragment | undefined
  /** `usage`: only the usage webhook takes it (a gateway call's usage); otherwise every subscribed endpoint. */
  readonly audience?: "all" | "usage" | undefined
}

const kinds = { all: "{endpoint,usage}", usage: "{usage}" } as const

/**
 * One statement writing the events, to run on its own or inside the caller's
 * statement (as a WITH entry beside the change). `created` is the database's
 * clock in milliseconds, one clock for every node, so `created` orders them.
 */
export const insert = (sql: SqlClient.SqlClient, events: ReadonlyArray<NewEvent>): Statement.Statement<never> => {
  if (events.length === 0) return sql`SELECT 1 WHERE false`
  const rows = events.map((event) =>
    sql`SELECT ${Ids.make("evt")} AS id, ${event.tenantId} AS tenant_id, ${event.type} AS type,
      round(extract(epoch from clock_timestamp())::numeric, 3)::float8 AS created,
      ${Storable.stringify(event.data)}::jsonb ${event.merge === undefined ? sql`` : sql`|| ${event.merge}`} AS data,
      ${kinds[event.audience ?? "all"]}::text[] AS kinds
      ${event.when === undefined ? sql`` : sql`WHERE ${event.when}`}`
  )
  return sql`INSERT INTO webhook_events (id, tenant_id, type, created, data, kinds)
    SELECT v.id, v.tenant_id, v.type, v.created, v.data, v.kinds FROM (${sql.join(" UNION ALL ", false)(rows)}) AS v
    WHERE EXISTS (SELECT 1 FROM webhook_endpoints w
      WHERE w.tenant_id = v.tenant_id AND v.type = ANY (w.events) AND w.kind = ANY (v.kinds))`
}

/** Writes the events in the caller's transaction (it must run in one for the promise above to hold). */
export const publish = (events: ReadonlyArray<NewEvent>) =>
  events.length === 0 ? Effect.void : Effect.flatMap(SqlClient.SqlClient, (sql) => Effect.asVoid(insert(sql, events)))
