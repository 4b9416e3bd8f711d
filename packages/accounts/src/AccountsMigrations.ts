/**
 * The accounts package's tables: tenants, their API keys, and the console's
 * sessions with the one-time sign-in links the operator hands out. Every other
 * package's tables hang off `tenants`, so these come first.
 */
import { Migrations } from "@agent-runtime/store"
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

const consoleSessions = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // Only hashes of the cookie's and the links' secrets are kept. A person signing in is found by login.
  yield* sql`
    CREATE TABLE console_sessions (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      secret_hash bytea NOT NULL UNIQUE,
      login text,
      name text,
      method text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      revoked_at timestamptz
    )`
  yield* sql`
    CREATE TABLE sign_in_links (
      secret_hash bytea PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      used_at timestamptz
    )`
  yield* sql`CREATE INDEX tenants_login ON tenants (lower(login)) WHERE login IS NOT NULL`
})

export const migrations = Migrations.make("accounts_migrations", {
  "1_tenants": Migrations.legacy(1, tenants),
  "2_console_sessions": consoleSessions
})
