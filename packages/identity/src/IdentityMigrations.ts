/**
 * The identity package's table: the keys that sign identity tokens, shared
 * by every node. It references no other package's table.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const keys = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // generation orders the keys and is unique, so nodes starting together insert one first key (ON CONFLICT).
  // sealed_private_key is the private JWK sealed with the node's sealing key, bound to `identity-key:<kid>`.
  yield* sql`
    CREATE TABLE identity_keys (
      kid text PRIMARY KEY,
      generation integer NOT NULL UNIQUE,
      public_jwk jsonb NOT NULL,
      sealed_private_key text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      activates_at timestamptz NOT NULL,
      retires_at timestamptz
    )`
})

export const migrations = Migrations.make("identity_migrations", {
  "1_keys": keys
})
