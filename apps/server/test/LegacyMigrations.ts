/**
 * FIXTURE, not product code: `packages/store/src/Migrations.ts` as every
 * release before each package owned its tables shipped it (commit c0e8a7d),
 * kept verbatim below this comment so tests can make a database the way
 * those releases did and check the per-package migrations take it over.
 * Never edit what follows: it stands for databases already deployed.
 */
/**
 * The schema, one migration per step, applied in order at start. Applied
 * steps are recorded, so a restart (or a second node) runs nothing twice.
 */
import { Migrator, SqlClient } from "@effect/sql"
import { Effect } from "effect"

const tenants = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE tenants (
      id text PRIMARY KEY,
      name text NOT NULL,
      login text,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`
    CREATE TABLE api_tokens (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      prefix text NOT NULL,
      secret_hash bytea NOT NULL UNIQUE,
      created_at timestamptz NOT NULL DEFAULT now(),
      revoked_at timestamptz
    )`
  yield* sql`CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, id) WHERE revoked_at IS NULL`
})

/** Provider keys, custom providers, key scopes and usage: the model layer. */
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

/** Agents, their requests, their history, and the blocks of event ids they hand out. */
const agents = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE agents (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      key text,
      name text NOT NULL,
      type text,
      config jsonb NOT NULL,
      input_fingerprint text NOT NULL,
      expires_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT now(),
      deleted_at timestamptz,
      -- Event ids are handed out in blocks, so they keep growing across restarts and moves.
      event_block bigint NOT NULL DEFAULT 0
    )`
  yield* sql`CREATE UNIQUE INDEX agents_key ON agents (tenant_id, key) WHERE key IS NOT NULL AND deleted_at IS NULL`
  yield* sql`CREATE INDEX agents_tenant ON agents (tenant_id, id) WHERE deleted_at IS NULL`
  yield* sql`
    CREATE TABLE agent_requests (
      agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
      id text NOT NULL,
      seq bigserial,
      method text NOT NULL,
      state text NOT NULL CHECK (state IN ('queued', 'running', 'completed')),
      fingerprint text NOT NULL,
      input jsonb NOT NULL,
      began_index integer,
      outcome jsonb,
      steered_into text,
      started_at timestamptz NOT NULL DEFAULT now(),
      began_at timestamptz,
      ended_at timestamptz,
      PRIMARY KEY (agent_id, id)
    )`
  yield* sql`CREATE INDEX agent_requests_open ON agent_requests (agent_id, seq) WHERE state <> 'completed'`
  yield* sql`
    CREATE TABLE agent_messages (
      agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
      index integer NOT NULL,
      request_id text,
      message jsonb NOT NULL,
      PRIMARY KEY (agent_id, index)
    )`
})

/**
 * Tool calls as they start and end, so a node taking over a turn knows which
 * calls were sent (never sent again) and which results exist; and the
 * agent's ownership epoch, which fences a stale owner's journal writes.
 */
const journal = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE agent_tool_calls (
      agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
      tool_call_id text NOT NULL,
      request_id text NOT NULL,
      tool text NOT NULL,
      result jsonb,
      started_at timestamptz NOT NULL DEFAULT now(),
      ended_at timestamptz,
      PRIMARY KEY (agent_id, tool_call_id)
    )`
  yield* sql`ALTER TABLE agents ADD COLUMN owner text, ADD COLUMN owner_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN released_cursor bigint, ADD COLUMN released_events jsonb`
  yield* sql`ALTER TABLE agent_requests ADD COLUMN handoff text, ADD COLUMN resumes integer NOT NULL DEFAULT 0`
  // Waking an agent's unfinished work failed this many times; the next attempt waits until resume_after.
  yield* sql`ALTER TABLE agents ADD COLUMN resume_failures integer NOT NULL DEFAULT 0, ADD COLUMN resume_after timestamptz`
  yield* sql`CREATE INDEX agents_owner ON agents (owner) WHERE owner IS NOT NULL`
  // What each runner last reported of itself, and an operator's request that it drain.
  yield* sql`
    CREATE TABLE runner_reports (
      address text PRIMARY KEY,
      started_at timestamptz NOT NULL,
      reported_at timestamptz NOT NULL,
      state text NOT NULL CHECK (state IN ('active', 'draining')),
      shards integer NOT NULL DEFAULT 0,
      agents integer NOT NULL DEFAULT 0,
      turns_running integer NOT NULL DEFAULT 0,
      mailbox_depth integer NOT NULL DEFAULT 0,
      drain_requested_at timestamptz
    )`
})

/** The gateway's per-tenant settings, set by the operator: stream slots (none means the node's default). */
const gateway = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE gateway_settings (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      stream_slots integer NOT NULL CHECK (stream_slots > 0)
    )`
})

export const migrations = {
  "1_tenants": tenants,
  "2_models": models,
  "3_agents": agents,
  "4_journal": journal,
  "5_gateway": gateway
}

const table = "agent_runtime_migrations"

/** Applies the pending migrations; concurrent starts wait on the migration table's lock. */
export const run = Migrator.make({})({ loader: Migrator.fromRecord(migrations), table }).pipe(
  // Two first starts can race to create the migrations table; the loser retries once it exists.
  Effect.retry({ times: 3 }),
  Effect.tap((applied) =>
    applied.length === 0 ? Effect.void : Effect.logInfo("migrated").pipe(
      Effect.annotateLogs("migrations", applied.map(([id, name]) => `${id}_${name}`).join(","))
    )
  )
)
