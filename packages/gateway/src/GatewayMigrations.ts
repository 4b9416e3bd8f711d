/**
 * The gateway package's table: its per-tenant settings, set by the operator
 * (stream slots; none stored means the node's default). Needs the accounts
 * package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const settings = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE gateway_settings (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      stream_slots integer NOT NULL CHECK (stream_slots > 0)
    )`
})

export const migrations = Migrations.make("gateway_migrations", {
  "1_settings": Migrations.legacy(5, settings)
})
