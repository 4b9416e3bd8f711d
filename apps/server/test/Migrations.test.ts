/**
 * Each package's migrations against the single list every earlier release
 * ran (`LegacyMigrations.ts`, kept verbatim): a database that list made is
 * taken over with its tables and rows, one made before the list's last step
 * gets only what it lacks, and a fresh database gets the same schema either
 * way.
 */
import { Database, Migrations } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { Migrator, SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { migrations } from "../src/Migrations.ts"
import * as Legacy from "./LegacyMigrations.ts"

/** A client as the node has it, applying nothing. */
const client = (url: string) => Layer.fresh(Database.layerClient(Redacted.make(url)))

const migrated = (url: string) => Migrations.run(...migrations).pipe(Effect.provide(client(url)))

/**
 * Tables made by steps written after the single list (packages that never
 * had a step on it): a database the list made gets them when taken over, so
 * they are left out where it is compared with what the list made.
 */
const sinceTheList = [
  "identity_keys",
  "definitions",
  "definition_revisions",
  "schedules",
  "agent_inputs",
  "webhook_endpoints",
  "webhook_events",
  "webhook_deliveries",
  "webhook_attempts",
  "volumes",
  "volume_files",
  "file_chunks",
  "file_pins",
  "file_usage",
  "volume_changes",
  "volume_snapshots",
  "volume_snapshot_files",
  "telemetry_settings",
  "tenant_billing",
  "ledger_entries",
  "purchases",
  "card_checks",
  "console_sessions",
  "sign_in_links",
  "oauth_records",
  "oauth_grants",
  "oauth_keys"
]

/**
 * Columns added since the list to tables it made (agents' application tools, stateless runs, the usage's
 * subject): likewise left out.
 */
const columnsSinceTheList = [
  ...["application_tools", "tools_hash", "connection", "retention_seconds", "run_key"].map((column) =>
    `agents.${column}`
  ),
  "usage_records.subject"
]

/**
 * Indexes added since the list to tables it made (sub-agents by their ancestors, usage by agent, runs, tenants
 * by the login people sign in with): likewise.
 */
const indexesSinceTheList = [
  "agents_delegated",
  "usage_records_agent",
  "agents_run_key",
  "agents_runs",
  "tenants_login"
]

/** SQL: the table named by `column` is compared (neither a migration record nor made since the list). */
const compared = (column: string) =>
  `${column} NOT LIKE '%migrations' AND ${column} NOT IN (${sinceTheList.map((name) => `'${name}'`).join(", ")})`

/** Columns, indexes and constraints of every compared table. */
const schemaOf = (url: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = yield* sql.unsafe<Record<string, unknown>>(`
      SELECT table_name, ordinal_position, column_name, data_type, is_nullable, column_default
      FROM information_schema.columns
      WHERE table_schema = 'public' AND ${compared("table_name")}
        AND table_name || '.' || column_name NOT IN (${columnsSinceTheList.map((name) => `'${name}'`).join(", ")})
      ORDER BY table_name, column_name`)
    const indexes = yield* sql.unsafe<Record<string, unknown>>(`
      SELECT tablename, indexname, indexdef FROM pg_indexes
      WHERE schemaname = 'public' AND ${compared("tablename")}
        AND indexname NOT IN (${indexesSinceTheList.map((name) => `'${name}'`).join(", ")})
      ORDER BY tablename, indexname`)
    const constraints = yield* sql.unsafe<Record<string, unknown>>(`
      SELECT conrelid::regclass::text AS table_name, conname, pg_get_constraintdef(oid) AS definition
      FROM pg_constraint
      WHERE connamespace = 'public'::regnamespace
        AND ${compared("conrelid::regclass::text")}
      ORDER BY 1, 2`)
    return { columns, indexes, constraints }
  }).pipe(Effect.provide(client(url)))

/** Every row of every compared table, as JSON. */
const rowsOf = (url: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tables = yield* sql<{ tablename: string }>`
      SELECT tablename FROM pg_tables
      WHERE schemaname = 'public' AND ${sql.unsafe(compared("tablename"))}
      ORDER BY tablename`
    const rows: Record<string, ReadonlyArray<string>> = {}
    for (const { tablename } of tables) {
      const dropped = columnsSinceTheList.filter((name) => name.startsWith(`${tablename}.`))
        .map((name) => ` - '${name.slice(tablename.length + 1)}'`).join("")
      const found = yield* sql.unsafe<{ row: string }>(
        `SELECT (to_jsonb(t)${dropped})::text AS row FROM ${tablename} t ORDER BY 1`
      )
      rows[tablename] = found.map((r) => r.row)
    }
    return rows
  }).pipe(Effect.provide(client(url)))

/** A row in each table, as a node of an earlier release would have written them. */
const seed = (url: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const statements = [
      `INSERT INTO tenants (id, name, login) VALUES ('tn_old', 'old', 'octo')`,
      `INSERT INTO api_tokens (id, tenant_id, name, prefix, secret_hash)
        VALUES ('tok_old', 'tn_old', 'ci', 'art_abcd', '\\x0102')`,
      `INSERT INTO tenant_keys (tenant_id, provider, source, sealed_key, last4)
        VALUES ('tn_old', 'openai', 'tenant', 's', '1234')`,
      `INSERT INTO platform_keys (provider, sealed_key, last4) VALUES ('anthropic', 's', '5678')`,
      `INSERT INTO key_scope_entries (tenant_id, scope, provider, region) VALUES ('tn_old', 'team', 'openai', 'eu')`,
      `INSERT INTO custom_providers (tenant_id, name, type, base_url, auth, models)
        VALUES ('tn_old', 'fake', 'openai-completions', 'https://fake.test/v1', 'bearer', '[{"id": "m1"}]')`,
      `INSERT INTO usage_records (tenant_id, agent_id, key_source, provider, model, kind, input, output, cache_read,
          cache_write, cost_usd, cost_source)
        VALUES ('tn_old', 'agent_old', 'tenant', 'openai', 'gpt', 'response', 10, 20, 0, 0, 0.5, 'catalog')`,
      `INSERT INTO agents (id, tenant_id, key, name, config, input_fingerprint, owner, owner_epoch)
        VALUES ('agent_old', 'tn_old', 'k', 'old', '{"model": "fake/m1"}', 'f', '127.0.0.1:1', 3)`,
      `INSERT INTO agent_requests (agent_id, id, method, state, fingerprint, input)
        VALUES ('agent_old', 'req_1', 'prompt', 'queued', 'f', '{"text": "hi"}')`,
      `INSERT INTO agent_messages (agent_id, index, request_id, message)
        VALUES ('agent_old', 0, 'req_1', '{"role": "user", "order_id": 1}')`,
      `INSERT INTO agent_tool_calls (agent_id, tool_call_id, request_id, tool)
        VALUES ('agent_old', 'call_1', 'req_1', 'fetch')`,
      `INSERT INTO runner_reports (address, started_at, reported_at, state)
        VALUES ('127.0.0.1:1', now(), now(), 'active')`,
      `INSERT INTO gateway_settings (tenant_id, stream_slots) VALUES ('tn_old', 4)`
    ]
    for (const statement of statements) yield* sql.unsafe(statement)
  }).pipe(Effect.provide(client(url)))

/** Every step of every package, as `Migrations.run` answers them. */
const allSteps = migrations.flatMap((each) =>
  Object.keys(each.steps).map((key) => [each.table, Number(key.split("_")[0]), key.slice(key.indexOf("_") + 1)])
)

describe("migrations", () => {
  it.live("a database the single list made keeps its tables and rows, and is recorded as migrated", () =>
    Effect.gen(function*() {
      const url = yield* TestDatabase.make
      yield* Legacy.run.pipe(Effect.provide(client(url)))
      yield* seed(url)
      const schema = yield* schemaOf(url)
      const rows = yield* rowsOf(url)
      expect(Object.values(rows).every((table) => table.length === 1)).toBe(true)

      // As a node of this release starts: through the database layer, under the startup lock.
      const applied = yield* Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM agents`
      ).pipe(
        Effect.provide(Layer.fresh(Database.layerClient(Redacted.make(url), { migrations })))
      )
      expect(applied).toEqual([{ n: 1 }])
      expect(yield* schemaOf(url)).toEqual(schema)
      expect(yield* rowsOf(url)).toEqual(rows)
      const added = yield* TestDatabase.query(
        url,
        `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('${sinceTheList.join("', '")}')`
      )
      expect(added).toHaveLength(sinceTheList.length)
      const addedColumns = yield* TestDatabase.query(
        url,
        `SELECT column_name FROM information_schema.columns WHERE table_schema = 'public'
          AND table_name || '.' || column_name IN ('${columnsSinceTheList.join("', '")}')`
      )
      expect(addedColumns).toHaveLength(columnsSinceTheList.length)
      // Every step is recorded in its package's table, so none runs again.
      expect(yield* migrated(url)).toEqual([])
      const recorded = yield* Effect.flatMap(
        SqlClient.SqlClient,
        (sql) =>
          Effect.forEach(
            migrations,
            (each) =>
              sql<{ migrationId: number }>`SELECT migration_id FROM ${sql(each.table)} ORDER BY 1`.pipe(
                Effect.map((found) => found.map((row) => [each.table, row.migrationId]))
              )
          )
      ).pipe(Effect.provide(client(url)))
      expect(recorded.flat()).toEqual(allSteps.map(([table, id]) => [table, id]))
    }))

  it.live("a database made before the list's last step gets only what it lacks", () =>
    Effect.gen(function*() {
      const older = yield* TestDatabase.make
      const { "5_gateway": _, ...before } = Legacy.migrations
      yield* Migrator.make({})({ loader: Migrator.fromRecord(before), table: Migrations.legacyTable }).pipe(
        Effect.provide(client(older))
      )
      yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql`INSERT INTO tenants (id, name) VALUES ('tn_old', 'old')`)
        .pipe(Effect.provide(client(older)))
      expect(yield* migrated(older)).toEqual(allSteps)
      const fresh = yield* TestDatabase.make
      yield* migrated(fresh)
      expect(yield* schemaOf(older)).toEqual(yield* schemaOf(fresh))
      expect((yield* rowsOf(older)).tenants).toHaveLength(1)
    }))

  it.live("a fresh database gets the same schema from the packages' migrations as from the single list", () =>
    Effect.gen(function*() {
      const legacy = yield* TestDatabase.make
      const fresh = yield* TestDatabase.make
      yield* Legacy.run.pipe(Effect.provide(client(legacy)))
      expect(yield* migrated(fresh)).toEqual(allSteps)
      const expected = yield* schemaOf(legacy)
      expect(expected.columns.length).toBeGreaterThan(80)
      expect(yield* schemaOf(fresh)).toEqual(expected)
    }))
})
