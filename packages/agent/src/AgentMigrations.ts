/**
 * The agent package's tables: agents, their requests and history, the
 * journal of tool calls with the ownership epoch that fences a stale owner,
 * and the runners' reports. Needs the accounts package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

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
})

/** What each runner last reported of itself, and an operator's request that it drain (see `RunnerReports`). */
const runnerReports = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
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

/** The tools an agent's application listed, and the connection serving them (see `ApplicationConnection`). */
const application = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE agents ADD COLUMN application_tools jsonb, ADD COLUMN tools_hash text,
    ADD COLUMN connection text`
})

/**
 * Definitions and their revisions; a revision is never changed, and a deleted
 * definition keeps its revisions for the agents made from them.
 */
const definitions = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE definitions (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      revision integer NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      deleted_at timestamptz
    )`
  yield* sql`CREATE INDEX definitions_tenant ON definitions (tenant_id, id) WHERE deleted_at IS NULL`
  yield* sql`
    CREATE TABLE definition_revisions (
      definition_id text NOT NULL REFERENCES definitions (id) ON DELETE CASCADE,
      revision integer NOT NULL,
      body jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (definition_id, revision)
    )`
})

/** Schedules: due prompts; `claimed_until` is the lease of the node delivering one. */
const schedules = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE schedules (
      id text PRIMARY KEY,
      agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
      tenant_id text NOT NULL,
      text text,
      code text,
      every_seconds integer,
      due_at timestamptz NOT NULL,
      claimed_until timestamptz,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX schedules_due ON schedules (due_at)`
  yield* sql`CREATE INDEX schedules_agent ON schedules (agent_id)`
  yield* sql`CREATE INDEX schedules_tenant ON schedules (tenant_id, due_at)`
})

/** Sub-agents by the agents above them, for spend limits that count what sub-agents spend. */
const delegation = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX agents_delegated ON agents USING gin ((config -> 'delegation' -> 'ancestors') jsonb_path_ops)`
})

/**
 * Human input: what a turn asked a person, who may answer, and how it
 * settled. The pending ones of a suspended request resume its turn once the
 * last settles; the partial index serves the expiry sweep.
 */
const inputs = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE agent_inputs (
      id text PRIMARY KEY,
      agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
      tenant_id text NOT NULL,
      request_id text NOT NULL,
      tool_call_id text NOT NULL,
      kind text NOT NULL CHECK (kind IN ('question', 'approval', 'form', 'url')),
      message text NOT NULL,
      detail jsonb NOT NULL,
      audience jsonb NOT NULL,
      approvers jsonb NOT NULL,
      state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'answered', 'declined', 'cancelled', 'expired', 'superseded')),
      answer jsonb,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      settled_at timestamptz
    )`
  yield* sql`CREATE INDEX agent_inputs_agent ON agent_inputs (agent_id, created_at DESC)`
  yield* sql`CREATE INDEX agent_inputs_request ON agent_inputs (agent_id, request_id)`
  yield* sql`CREATE INDEX agent_inputs_calls ON agent_inputs (agent_id, tool_call_id)`
  yield* sql`CREATE INDEX agent_inputs_expiring ON agent_inputs (expires_at) WHERE state = 'pending'`
})

/**
 * Stateless runs: an agent row that is a run (its retention after it ends is set), keyed by its own
 * Idempotency-Key apart from agents' keys, and left out of everything that lists or finds agents.
 */
const runs = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE agents ADD COLUMN retention_seconds integer, ADD COLUMN run_key text`
  yield* sql`CREATE UNIQUE INDEX agents_run_key ON agents (tenant_id, run_key)
    WHERE run_key IS NOT NULL AND deleted_at IS NULL`
  yield* sql`CREATE INDEX agents_runs ON agents (tenant_id, id) WHERE retention_seconds IS NOT NULL`
})

/**
 * Definitions upserted by an `Idempotency-Key`: one live definition per tenant and key, so creates racing on
 * a key make one (the loser's insert meets the index and takes the winner's). A deleted definition frees its key.
 */
const definitionKeys = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE definitions ADD COLUMN idempotency_key text`
  yield* sql`CREATE UNIQUE INDEX definitions_idempotency_key ON definitions (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND deleted_at IS NULL`
})

/** The tenant's inbox (GET /v1/inputs): its inputs newest first, paged by (created_at, id). */
const inputInbox = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX agent_inputs_tenant ON agent_inputs (tenant_id, created_at DESC, id DESC)`
})

export const migrations = Migrations.make("agent_migrations", {
  "1_agents": Migrations.legacy(3, agents),
  "2_journal": Migrations.legacy(4, journal),
  // Written by the same step of the single list as the journal.
  "3_runner_reports": Migrations.legacy(4, runnerReports),
  "4_application": application,
  "5_definitions": definitions,
  "6_schedules": schedules,
  "7_delegation": delegation,
  "8_inputs": inputs,
  "9_runs": runs,
  "10_definition_keys": definitionKeys,
  "11_input_inbox": inputInbox
})
