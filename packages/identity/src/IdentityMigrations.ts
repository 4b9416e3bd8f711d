/**
 * The identity package's table: the keys that sign identity tokens, shared
 * by every node. It references no other package's table.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A table of signing keys as `IdentityKeys` keeps them: `identity_keys`, or another signer's of the same
 * shape (`IdentityKeys.Options.table`).
 */
export const keyTable = (name: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // generation orders the keys and is unique, so nodes starting together insert one first key (ON CONFLICT).
    // sealed_private_key is the private JWK sealed with the node's sealing key, bound to the key (`sealContext`).
    yield* sql`
    CREATE TABLE ${sql(name)} (
      kid text PRIMARY KEY,
      generation integer NOT NULL UNIQUE,
      public_jwk jsonb NOT NULL,
      sealed_private_key text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      activates_at timestamptz NOT NULL,
      retires_at timestamptz
    )`
  })

const keys = keyTable("identity_keys")

export const migrations = Migrations.make("identity_migrations", {
  "1_keys": keys
})
