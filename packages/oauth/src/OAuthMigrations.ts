/**
 * The OAuth package's tables: what the authorization server keeps (clients,
 * codes, tokens, sessions, interactions: `oauth_records`, each under the
 * SHA-256 of its id, so a stolen table holds no usable token), the grants
 * people gave (`oauth_grants`, the connected apps), and the server's own
 * signing keys (`oauth_keys`, kept and rotated as the identity keys are).
 */
import { IdentityMigrations } from "@agent-runtime/identity"
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const oauth = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE oauth_records (
      kind text NOT NULL,
      id_hash bytea NOT NULL,
      payload jsonb NOT NULL,
      grant_id text,
      uid_hash bytea,
      expires_at timestamptz,
      consumed_at timestamptz,
      PRIMARY KEY (kind, id_hash)
    )`
  yield* sql`CREATE INDEX oauth_records_grant ON oauth_records (grant_id) WHERE grant_id IS NOT NULL`
  yield* sql`CREATE INDEX oauth_records_uid ON oauth_records (uid_hash) WHERE uid_hash IS NOT NULL`
  yield* sql`CREATE INDEX oauth_records_expiry ON oauth_records (expires_at)`
  yield* sql`
    CREATE TABLE oauth_grants (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      client_id text NOT NULL,
      client_name text NOT NULL,
      login text,
      scope text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      used_at timestamptz
    )`
  yield* sql`CREATE INDEX oauth_grants_tenant ON oauth_grants (tenant_id, created_at)`
  yield* IdentityMigrations.keyTable("oauth_keys")
})

export const migrations = Migrations.make("oauth_migrations", {
  "1_oauth": oauth
})
