/**
 * The models package's tables: provider keys (a tenant's own, the
 * operator's for it, the platform's), key scopes, custom providers, and the
 * usage of every model call. Needs the accounts package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const models = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // A tenant's own keys (source tenant) and those the operator set for it (source admin).
  yield* sql`
    CREATE TABLE tenant_keys (
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      provider text NOT NULL,
      source text NOT NULL CHECK (source IN ('tenant', 'admin')),
      sealed_key text NOT NULL,
      last4 text NOT NULL,
      set_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (tenant_id, provider)
    )`
  // Keys the platform pays for, billed to tenants' prepaid credit.
  yield* sql`
    CREATE TABLE platform_keys (
      provider text PRIMARY KEY,
      sealed_key text NOT NULL,
      last4 text NOT NULL,
      set_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`
    CREATE TABLE key_scope_entries (
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      scope text NOT NULL,
      provider text NOT NULL,
      sealed_key text,
      last4 text,
      base_url text,
      sealed_headers text,
      header_names jsonb NOT NULL DEFAULT '[]',
      region text,
      set_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (tenant_id, scope, provider)
    )`
  // scope '' holds the tenant's own custom providers; any other value, a key scope's.
  yield* sql`
    CREATE TABLE custom_providers (
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      scope text NOT NULL DEFAULT '',
      name text NOT NULL,
      type text NOT NULL,
      base_url text NOT NULL,
      auth text NOT NULL,
      sealed_key text,
      last4 text,
      sealed_headers text,
      header_names jsonb NOT NULL DEFAULT '[]',
      models jsonb NOT NULL,
      set_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (tenant_id, scope, name)
    )`
  yield* sql`
    CREATE TABLE usage_records (
      id bigserial PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      agent_id text,
      request_id text,
      key_scope text,
      key_source text NOT NULL,
      provider text NOT NULL,
      model text NOT NULL,
      kind text NOT NULL CHECK (kind IN ('response', 'compaction')),
      input bigint NOT NULL,
      output bigint NOT NULL,
      cache_read bigint NOT NULL,
      cache_write bigint NOT NULL,
      reasoning bigint,
      cost_usd double precision NOT NULL,
      cost_source text NOT NULL CHECK (cost_source IN ('provider', 'catalog')),
      at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX usage_records_tenant ON usage_records (tenant_id, at)`
})

/** A run's and an agent's usage are read back by agent and request (spend limits, run.completed's usage). */
const usageByAgent = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX usage_records_agent ON usage_records (agent_id, request_id) WHERE agent_id IS NOT NULL`
})

/** GET /v1/usage filters by the agent's subject, which each record keeps as the usage.recorded event does. */
const usageSubject = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE usage_records ADD COLUMN subject text`
})

export const migrations = Migrations.make("models_migrations", {
  "1_models": Migrations.legacy(2, models),
  "2_usage_by_agent": usageByAgent,
  "3_usage_subject": usageSubject
})
