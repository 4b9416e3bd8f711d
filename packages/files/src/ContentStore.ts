/**
 * Where the bytes of files live: chunks of up to `chunkSize` bytes named by
 * their SHA-256, so equal content is stored once whoever holds it (other
 * files, forks, other tenants: the name is of the content, nothing else).
 * The files and pins naming chunks are rows in PostgreSQL; this is the one
 * interface behind which the bytes are, so a large deployment can keep them
 * in an S3-compatible store instead (`layer` keeps them in PostgreSQL).
 *
 * Chunks are put before the row naming them commits, and nothing counts
 * references: the sweep deletes what no file, snapshot or unexpired pin names,
 * unless it was put within a grace period, which covers the writes in flight.
 */
import { PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Array as Arr, Context, Data, Effect, Layer } from "effect"
import * as Crypto from "node:crypto"

/** Bytes of every chunk of a file but its last. */
export const chunkSize = 1024 * 1024

/** A chunk asked for is not stored: it was swept once nothing named it (or it never was put). */
export class ChunkMissing extends Data.TaggedError("ChunkMissing")<{ readonly hash: string }> {}

export class ContentStore extends Context.Tag("@agent-runtime/files/ContentStore")<ContentStore, {
  /** Stores the chunks (those already there are kept, and count as put now); answers their hashes, in order. */
  readonly put: (
    chunks: ReadonlyArray<Uint8Array>
  ) => Effect.Effect<ReadonlyArray<Uint8Array>, PersistenceError.PersistenceError>
  /**
   * The bytes of each chunk, in order. ChunkMissing when one is gone: the file naming it when the caller looked
   * may have been overwritten since, and the chunk swept.
   */
  readonly get: (
    hashes: ReadonlyArray<Uint8Array>
  ) => Effect.Effect<ReadonlyArray<Uint8Array>, ChunkMissing | PersistenceError.PersistenceError>
  /**
   * Deletes the chunks no file and no unexpired pin names, last put before `olderThan`; answers how many.
   * A chunk put for a write whose row has not committed yet is not named by anything, hence the grace.
   */
  readonly sweep: (olderThan: Date) => Effect.Effect<number, PersistenceError.PersistenceError>
}>() {}

/** `bytes` cut into chunks of `chunkSize` (views, not copies); none for no bytes. */
export const split = (bytes: Uint8Array): ReadonlyArray<Uint8Array> =>
  Arr.makeBy(Math.ceil(bytes.length / chunkSize), (i) => bytes.subarray(i * chunkSize, (i + 1) * chunkSize))

export const hash = (chunk: Uint8Array): Buffer => Crypto.createHash("sha256").update(chunk).digest()

const hex = (hash: Uint8Array) => Buffer.from(hash.buffer, hash.byteOffset, hash.byteLength).toString("hex")

interface ChunkRow {
  readonly hash: Buffer
  readonly data: Buffer
}

/** Chunks per statement, so one statement carries at most a few MiB. */
const batchSize = 8

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const put = (chunks: ReadonlyArray<Uint8Array>) =>
    Effect.gen(function*() {
      const hashes = chunks.map(hash)
      const byHash = new Map(hashes.map((hash, i) => [hex(hash), { hash, data: chunks[i]! }]))
      // Those already stored are not sent again; marking them put now keeps the sweep off them.
      const present = yield* sql<{ hash: Buffer }>`UPDATE file_chunks SET put_at = now()
        WHERE hash = ANY (${[...byHash.values()].map((chunk) => chunk.hash)}::bytea[]) RETURNING hash`
      for (const row of present) byHash.delete(hex(row.hash))
      // In hash order, so two puts of the same chunks take their rows' locks in one order and never deadlock.
      const absent = [...byHash.keys()].sort().map((key) => byHash.get(key)!)
      yield* Effect.forEach(
        Arr.chunksOf(absent, batchSize),
        (batch) =>
          // Another writer may store the same chunk meanwhile: one row, put now either way.
          sql`INSERT INTO file_chunks ${
            sql.insert(batch.map(({ data, hash }) => ({ hash, data, size: data.length })))
          } ON CONFLICT (hash) DO UPDATE SET put_at = now()`,
        { discard: true }
      )
      return hashes
    }).pipe(PersistenceError.PersistenceError.refail)

  const get = (hashes: ReadonlyArray<Uint8Array>) =>
    Effect.gen(function*() {
      const wanted = [...new Map(hashes.map((hash) => [hex(hash), hash])).values()]
      const found = new Map<string, Uint8Array>()
      yield* Effect.forEach(
        Arr.chunksOf(wanted, batchSize),
        (batch) =>
          Effect.map(
            sql<ChunkRow>`SELECT hash, data FROM file_chunks WHERE hash = ANY (${batch}::bytea[])`,
            (rows) => rows.forEach((row) => found.set(hex(row.hash), row.data))
          ),
        { discard: true }
      )
      return found
    }).pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap((found) =>
        Effect.forEach(hashes, (hash) => {
          const data = found.get(hex(hash))
          return data === undefined ? Effect.fail(new ChunkMissing({ hash: hex(hash) })) : Effect.succeed(data)
        })
      )
    )

  const sweep = (olderThan: Date) =>
    // A chunk a put holds locked is being put again: skipped, never waited for, so a sweep and a put cannot
    // deadlock; locked rows are checked again as they are now, and one put meanwhile is kept.
    sql<{ count: number }>`WITH swept AS (
        DELETE FROM file_chunks WHERE hash IN (
          SELECT c.hash FROM file_chunks c WHERE c.put_at < ${olderThan}
            AND NOT EXISTS (SELECT FROM volume_files f, unnest(f.chunks) AS u (hash) WHERE u.hash = c.hash)
            AND NOT EXISTS (SELECT FROM volume_snapshot_files s, unnest(s.chunks) AS u (hash) WHERE u.hash = c.hash)
            AND NOT EXISTS (SELECT FROM file_pins p, unnest(p.chunks) AS u (hash)
              WHERE u.hash = c.hash AND p.expires_at > now())
          FOR UPDATE OF c SKIP LOCKED)
        RETURNING 1)
      SELECT count(*)::int AS count FROM swept`.pipe(
      Effect.map(([row]) => row!.count),
      PersistenceError.PersistenceError.refail
    )

  return ContentStore.of({ put, get, sweep })
})

/** Chunks in PostgreSQL's `file_chunks`. */
export const layer: Layer.Layer<ContentStore, never, SqlClient.SqlClient> = Layer.effect(ContentStore, make)
