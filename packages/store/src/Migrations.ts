/**
 * The schema, one migration per step, applied in order at start. Applied
 * steps are recorded, so a restart (or a second node) runs nothing twice.
 */
import { Migrator } from "@effect/sql"
import { SqlClient } from "@effect/sql"
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

export const migrations = {
  "1_tenants": tenants
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
