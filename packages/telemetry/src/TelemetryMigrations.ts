/**
 * The telemetry package's table: each tenant's export settings, with the
 * headers sealed, and what the nodes last heard from its endpoint. Needs the
 * accounts package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const settings = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // sealed_headers: the headers as one sealed JSON object, bound to the tenant; header_names: what GET shows.
  yield* sql`
    CREATE TABLE telemetry_settings (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      endpoint text NOT NULL,
      sealed_headers text,
      header_names text[] NOT NULL DEFAULT '{}',
      protocol text NOT NULL,
      sample_rate double precision NOT NULL,
      include_content boolean NOT NULL,
      preset text,
      updated_at timestamptz NOT NULL DEFAULT now(),
      last_export_at timestamptz,
      last_error text,
      last_error_at timestamptz
    )`
})

export const migrations = Migrations.make("telemetry_migrations", {
  "1_telemetry_settings": settings
})
