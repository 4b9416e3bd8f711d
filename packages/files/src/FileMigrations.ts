/**
 * The files package's tables: volumes, their files (rows naming chunks),
 * the chunks themselves (content-addressed, see `ContentStore`), pinned
 * contents, and each tenant's usage for its quota. Needs the accounts
 * package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const tables = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // files, bytes: the sums of its files, kept in the transaction of each change so a listing need not add them.
  yield* sql`
    CREATE TABLE volumes (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text,
      agent_id text,
      forked_from text,
      files bigint NOT NULL DEFAULT 0,
      bytes bigint NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX volumes_tenant ON volumes (tenant_id, id)`
  // path in "C": ordered by its UTF-8 bytes, so a directory's files are one range of the primary key for any
  // Unicode. chunks: the SHA-256 of each chunk, in order.
  yield* sql`
    CREATE TABLE volume_files (
      volume_id text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
      path text COLLATE "C" NOT NULL,
      version integer NOT NULL,
      size bigint NOT NULL,
      content_type text NOT NULL,
      chunks bytea[] NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now(),
      by text,
      PRIMARY KEY (volume_id, path)
    )`
  // put_at: when last put (a put of a chunk already here renews it), which the sweep's grace counts from.
  yield* sql`
    CREATE TABLE file_chunks (
      hash bytea PRIMARY KEY,
      data bytea NOT NULL,
      size integer NOT NULL,
      put_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`
    CREATE TABLE file_pins (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      size bigint NOT NULL,
      content_type text NOT NULL,
      chunks bytea[] NOT NULL,
      expires_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX file_pins_expiry ON file_pins (expires_at)`
  // The row each change of a tenant's files locks first: the quota is checked and counted under it.
  yield* sql`
    CREATE TABLE file_usage (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      bytes bigint NOT NULL DEFAULT 0,
      files bigint NOT NULL DEFAULT 0
    )`
})

/**
 * What the camelRun client's volume wire needs: each volume's change sequence
 * and a bounded history of its changes, snapshots (frozen copies of its file
 * rows, naming the same chunks), and where a fork came from.
 */
const changesAndSnapshots = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // seq: bumped by every write or removal of one of its files, in that change's transaction.
  yield* sql`ALTER TABLE volumes ADD COLUMN seq bigint NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE volumes ADD COLUMN forked_snapshot text`
  // kind: write or delete; version and size of what was written (null for a removal).
  yield* sql`
    CREATE TABLE volume_changes (
      volume_id text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
      seq bigint NOT NULL,
      path text COLLATE "C" NOT NULL,
      kind text NOT NULL,
      version integer,
      size bigint,
      by text,
      at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (volume_id, seq)
    )`
  // files, bytes: as of the snapshot, its bytes counted in the tenant's usage until it is deleted.
  yield* sql`
    CREATE TABLE volume_snapshots (
      id text PRIMARY KEY,
      volume_id text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
      name text,
      seq bigint NOT NULL,
      files bigint NOT NULL,
      bytes bigint NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX volume_snapshots_volume ON volume_snapshots (volume_id, id)`
  yield* sql`
    CREATE TABLE volume_snapshot_files (
      snapshot_id text NOT NULL REFERENCES volume_snapshots (id) ON DELETE CASCADE,
      path text COLLATE "C" NOT NULL,
      version integer NOT NULL,
      size bigint NOT NULL,
      content_type text NOT NULL,
      chunks bytea[] NOT NULL,
      updated_at timestamptz NOT NULL,
      by text,
      PRIMARY KEY (snapshot_id, path)
    )`
})

export const migrations = Migrations.make("files_migrations", {
  "1_files": tables,
  "2_changes_and_snapshots": changesAndSnapshots
})
