/**
 * A tenant's volumes and their files, shared by every node. A file's bytes
 * are content-addressed chunks (see `ContentStore`); a file row names its
 * chunks, so a fork copies rows and never bytes, and two volumes holding the
 * same bytes store them once. Every write makes a new version of its file;
 * `ifVersion` makes it conditional, which is how two writers editing one
 * file never lose an update. Quotas are per tenant (docs/files.md).
 */
import { ApiError, Common, Volume } from "@agent-runtime/domain"
import { DatabaseHealth, Ids, PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import {
  Config,
  type ConfigError,
  Context,
  Duration,
  Effect,
  Either,
  Layer,
  PubSub,
  Schedule,
  type Scope,
  Stream
} from "effect"
import * as ContentStore from "./ContentStore.ts"
import * as ContentType from "./ContentType.ts"
import * as FilePath from "./FilePath.ts"

export interface WriteOptions {
  /** As sent; otherwise sniffed from the first bytes and the name. */
  readonly contentType?: string | undefined
  /** Write only if the file is at this version now; 0: only if it does not exist yet. */
  readonly ifVersion?: number | undefined
  /** Who writes, shown as the file's `by`: an actor, `agent:<id>`, or `api`. */
  readonly by?: string | undefined
}

/** Bytes `offset` to `offset + length` (cut at the end of the file). */
export interface Range {
  readonly offset: number
  readonly length: number
}

export interface Read {
  readonly file: Volume.VolumeFile
  /** The bytes asked for: all of them, or the range. */
  readonly bytes: Uint8Array
}

/** A file's content as it was at one moment, kept apart from later writes (a presented file). */
export interface Pinned {
  readonly id: string
  readonly name: string
  readonly size: number
  readonly contentType: string
  readonly expiresAt: number
}

/** A file written or removed through this node, told once its transaction committed. */
export interface Change {
  readonly tenantId: string
  readonly volumeId: string
  readonly path: string
  /** The version written; null when the file was removed. */
  readonly version: number | null
  readonly by: string | null
}

/** A volume about to be made; `id` is given when the caller must know it first (an agent's workspace). */
export interface NewVolume {
  readonly id?: string | undefined
  readonly name?: string | undefined
  /** Marks it as that agent's workspace. */
  readonly agentId?: string | undefined
}

/** Which files to list; see `Volumes.files`. */
export interface ListOptions {
  /** A directory (`""` for all). */
  readonly prefix: string
  readonly after?: string | undefined
  readonly limit: number
  /**
   * Only files whose path, less `strip` and after `root`, matches `pattern` (`FilePath.globPattern`): how an
   * agent's glob over the paths it sees is asked of a mount's volume.
   */
  readonly glob?: { readonly pattern: string; readonly strip: string; readonly root: string } | undefined
}

export class Volumes extends Context.Tag("@agent-runtime/files/Volumes")<Volumes, {
  /** A new, empty volume. */
  readonly create: (
    tenantId: string,
    options: NewVolume
  ) => Effect.Effect<Volume.Volume, PersistenceError.PersistenceError>
  readonly list: (tenantId: string, page: Common.PageParams) => Effect.Effect<{
    readonly data: ReadonlyArray<Volume.Volume>
    readonly next: string | null
  }, PersistenceError.PersistenceError>
  readonly get: (
    tenantId: string,
    volumeId: string
  ) => Effect.Effect<Volume.Volume, ApiError.NotFound | PersistenceError.PersistenceError>
  /** Removes the volume and its files (their bytes go once nothing else holds them). */
  readonly remove: (
    tenantId: string,
    volumeId: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /**
   * A copy-on-write copy: the same files at the same versions (those of `snapshot`, one of the volume's, when
   * given), sharing their bytes; its cost is one row per file, whatever their size. Counted against the quota
   * like any other bytes.
   */
  readonly fork: (
    tenantId: string,
    volumeId: string,
    options: NewVolume & { readonly snapshot?: string | undefined }
  ) => Effect.Effect<Volume.Volume, ApiError.NotFound | ApiError.TooLarge | PersistenceError.PersistenceError>
  /**
   * Files under a directory (`""` for all), in path order, `limit` after the path `after`; InvalidRequest for a
   * prefix `FilePath.parseDirectory` refuses.
   */
  readonly files: (
    tenantId: string,
    volumeId: string,
    options: ListOptions
  ) => Effect.Effect<
    { readonly data: ReadonlyArray<Volume.VolumeFile>; readonly next: string | null },
    ApiError.NotFound | ApiError.InvalidRequest | PersistenceError.PersistenceError
  >
  readonly stat: (tenantId: string, volumeId: string, path: string) => Effect.Effect<
    Volume.VolumeFile,
    ApiError.NotFound | ApiError.InvalidRequest | PersistenceError.PersistenceError
  >
  readonly read: (
    tenantId: string,
    volumeId: string,
    path: string,
    range?: Range
  ) => Effect.Effect<Read, ApiError.NotFound | ApiError.InvalidRequest | PersistenceError.PersistenceError>
  /**
   * Writes the whole file as a new version. Conflict when `ifVersion` is not its version now; TooLarge over
   * the file size limit or the tenant's quota; InvalidRequest for a path `FilePath.parse` refuses.
   */
  readonly write: (
    tenantId: string,
    volumeId: string,
    path: string,
    bytes: Uint8Array,
    options?: WriteOptions
  ) => Effect.Effect<
    Volume.VolumeFile,
    | ApiError.NotFound
    | ApiError.InvalidRequest
    | ApiError.Conflict
    | ApiError.TooLarge
    | PersistenceError.PersistenceError
  >
  /** Removes a file (when at `ifVersion`, if given); answers the file as it was. */
  readonly removeFile: (
    tenantId: string,
    volumeId: string,
    path: string,
    options?: { readonly ifVersion?: number | undefined; readonly by?: string | undefined }
  ) => Effect.Effect<
    Volume.VolumeFile,
    ApiError.NotFound | ApiError.InvalidRequest | ApiError.Conflict | PersistenceError.PersistenceError
  >
  /** Keeps the file's current content until `expiresAt` (Unix seconds), whatever is written after. */
  readonly pin: (
    tenantId: string,
    volumeId: string,
    path: string,
    expiresAt: number
  ) => Effect.Effect<Pinned, ApiError.NotFound | ApiError.InvalidRequest | PersistenceError.PersistenceError>
  /** A pinned content, until it expires. */
  readonly readPinned: (
    id: string
  ) => Effect.Effect<Pinned & { readonly bytes: Uint8Array }, ApiError.NotFound | PersistenceError.PersistenceError>
  /** The changes made through this node from now on (for `notify` mounts); each subscriber hears every one. */
  readonly changes: Effect.Effect<Stream.Stream<Change>, never, Scope.Scope>
  /**
   * The recorded changes after seq `since`, oldest first, at most `Volume.maxChangesPerPage`; `gap` when some
   * of them are no longer kept (only the last `Volume.maxChangesKept` are).
   */
  readonly history: (
    tenantId: string,
    volumeId: string,
    since: number
  ) => Effect.Effect<Volume.FileChanges, ApiError.NotFound | PersistenceError.PersistenceError>
  /**
   * A frozen copy of the volume's files now, sharing their bytes like a fork; its bytes count against the quota
   * (TooLarge over it) until it is removed.
   */
  readonly snapshot: (
    tenantId: string,
    volumeId: string,
    options: { readonly name?: string | undefined }
  ) => Effect.Effect<Volume.VolumeSnapshot, ApiError.NotFound | ApiError.TooLarge | PersistenceError.PersistenceError>
  /** The volume's snapshots, oldest first. */
  readonly snapshots: (
    tenantId: string,
    volumeId: string
  ) => Effect.Effect<ReadonlyArray<Volume.VolumeSnapshot>, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly removeSnapshot: (
    tenantId: string,
    volumeId: string,
    snapshotId: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
}>() {}

/** The limits of `make`; see docs/files.md. */
export interface Options {
  /** Bytes a tenant's files may hold in all its volumes (default `Volume.defaultQuotaBytes`). */
  readonly quotaBytes?: number | undefined
  /** Bytes of one file (default `Volume.defaultMaxFileBytes`). */
  readonly maxFileBytes?: number | undefined
}

/** How long a chunk put stays safe from the sweep with nothing naming it: far longer than a write takes. */
export const sweepGrace = Duration.hours(1)

/** Time between sweeps on each node. */
export const sweepInterval = Duration.hours(1)

interface VolumeRow {
  readonly id: string
  readonly name: string | null
  readonly agentId: string | null
  readonly forkedFrom: string | null
  readonly forkedSnapshot: string | null
  readonly seq: number
  readonly files: number
  readonly bytes: number
  readonly createdAt: number
}

const volumeColumns = `v.id, v.name, v.agent_id, v.forked_from, v.forked_snapshot, v.seq::float8 AS seq,
  v.files::float8 AS files, v.bytes::float8 AS bytes, floor(extract(epoch from v.created_at))::float8 AS created_at`

const toVolume = (row: VolumeRow) =>
  new Volume.Volume({
    id: row.id,
    name: row.name,
    createdAt: row.createdAt,
    seq: row.seq,
    files: row.files,
    bytes: row.bytes,
    agentId: row.agentId,
    forkedFrom: row.forkedFrom,
    ...(row.forkedFrom === null ? {} : {
      origin: new Volume.VolumeOrigin({
        volume: row.forkedFrom,
        ...(row.forkedSnapshot === null ? {} : { snapshot: row.forkedSnapshot })
      })
    })
  })

const snapshotColumns = `s.id, s.volume_id AS volume, s.name, s.seq::float8 AS seq, s.files::float8 AS files,
  s.bytes::float8 AS bytes, floor(extract(epoch from s.created_at))::float8 AS created_at`

interface ChangeRow {
  readonly seq: number
  readonly path: string
  readonly kind: "write" | "delete"
  readonly version: number | null
  readonly size: number | null
  readonly by: string | null
  readonly at: number
}

const toChange = (row: ChangeRow) =>
  new Volume.FileChange({
    seq: row.seq,
    path: row.path,
    kind: row.kind,
    at: row.at,
    ...(row.version === null ? {} : { version: row.version }),
    ...(row.size === null ? {} : { size: row.size }),
    ...(row.by === null ? {} : { by: row.by })
  })

interface FileRow {
  readonly path: string
  readonly version: number
  readonly size: number
  readonly contentType: string
  readonly by: string | null
  readonly updatedAt: number
}

const fileColumns = `f.path, f.version, f.size::float8 AS size, f.content_type, f.by,
  floor(extract(epoch from f.updated_at))::float8 AS updated_at`

const toFile = (row: FileRow) =>
  new Volume.VolumeFile({
    path: row.path,
    version: row.version,
    size: row.size,
    updatedAt: row.updatedAt,
    contentType: row.contentType,
    ...(row.by === null ? {} : { by: row.by })
  })

/** A file with the chunks holding its bytes. */
interface StoredFile extends FileRow {
  readonly chunks: ReadonlyArray<Uint8Array>
}

const sameChunks = (a: ReadonlyArray<Uint8Array>, b: ReadonlyArray<Uint8Array>) =>
  a.length === b.length && a.every((hash, i) => Buffer.compare(hash, b[i]!) === 0)

const noVolume = (volumeId: string) => new ApiError.NotFound({ error: `no volume ${volumeId}` })
const noFile = (volumeId: string, path: string) => new ApiError.NotFound({ error: `no file ${path} in ${volumeId}` })

const parsed = (parse: Either.Either<string, string>) =>
  Either.match(parse, {
    onLeft: (error) => Effect.fail(new ApiError.InvalidRequest({ error })),
    onRight: Effect.succeed
  })

/** When `ifVersion` is given and the file (0: none) is at another version. */
const versionConflict = (path: string, version: number, ifVersion: number | undefined) =>
  ifVersion === undefined || ifVersion === version
    ? Effect.void
    : Effect.fail(
      new ApiError.Conflict({
        error: ifVersion === 0
          ? `${path} already exists, at version ${version}`
          : `${path} is at version ${version}, not ${ifVersion}`
      })
    )

export const make = (options: Options = {}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* ContentStore.ContentStore
    const quotaBytes = options.quotaBytes ?? Volume.defaultQuotaBytes
    const maxFileBytes = options.maxFileBytes ?? Volume.defaultMaxFileBytes
    const volumeFields = sql.literal(volumeColumns)
    const snapshotFields = sql.literal(snapshotColumns)
    const fileFields = sql.literal(fileColumns)

    const changed = yield* PubSub.unbounded<Change>()
    const publish = (change: Change) => PubSub.publish(changed, change)

    const transaction = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      effect.pipe(
        sql.withTransaction,
        Effect.catchTag("SqlError", (cause) => new PersistenceError.PersistenceError({ cause }))
      )

    /** The tenant's volume: another tenant's looks like none. */
    const findVolume = (tenantId: string, volumeId: string) =>
      sql<VolumeRow>`SELECT ${volumeFields} FROM volumes v WHERE v.id = ${volumeId} AND v.tenant_id = ${tenantId}`
        .pipe(
          PersistenceError.PersistenceError.refail,
          Effect.flatMap(([row]) => row === undefined ? Effect.fail(noVolume(volumeId)) : Effect.succeed(row))
        )

    /**
     * In a transaction: locks the tenant's usage row, which every change of its files takes first, so the
     * changes of one tenant (and their quota checks and counters) happen one at a time; then answers the
     * bytes used and the volume as of the lock. No row is made for a tenant without that volume.
     */
    const lockVolume = (tenantId: string, volumeId: string) =>
      Effect.gen(function*() {
        yield* sql`INSERT INTO file_usage (tenant_id)
          SELECT tenant_id FROM volumes WHERE id = ${volumeId} AND tenant_id = ${tenantId}
          ON CONFLICT (tenant_id) DO NOTHING`
        const [usage] = yield* sql<{ bytes: number }>`SELECT bytes::float8 AS bytes FROM file_usage
          WHERE tenant_id = ${tenantId} FOR UPDATE`
        if (usage === undefined) return yield* noVolume(volumeId)
        return { used: usage.bytes, volume: yield* findVolume(tenantId, volumeId) }
      })

    /**
     * Under `lockVolume`, for one write or removal of `file`: adds to the counters of the volume and of its
     * tenant, bumps the volume's seq and records the change, forgetting those past `Volume.maxChangesKept`.
     */
    const count = (
      tenantId: string,
      volumeId: string,
      files: number,
      bytes: number,
      change: { readonly path: string; readonly version: number | null; readonly size: number | null },
      by: string | undefined
    ) =>
      Effect.gen(function*() {
        const [volume] = yield* sql<{ seq: number }>`UPDATE volumes
          SET files = files + ${files}, bytes = bytes + ${bytes}, seq = seq + 1
          WHERE id = ${volumeId} RETURNING seq::float8 AS seq`
        yield* sql`UPDATE file_usage SET files = files + ${files}, bytes = bytes + ${bytes}
          WHERE tenant_id = ${tenantId}`
        const seq = volume!.seq
        yield* sql`INSERT INTO volume_changes (volume_id, seq, path, kind, version, size, by)
          VALUES (${volumeId}, ${seq}, ${change.path}, ${change.version === null ? "delete" : "write"},
            ${change.version}, ${change.size}, ${by ?? null})`
        yield* sql`DELETE FROM volume_changes WHERE volume_id = ${volumeId} AND seq <= ${seq - Volume.maxChangesKept}`
      })

    const overQuota = (used: number, adding: number) =>
      adding > 0 && used + adding > quotaBytes
        ? Effect.fail(
          new ApiError.TooLarge({
            error: `this would bring the tenant's files to ${used + adding} bytes, over its quota of ${quotaBytes}`
          })
        )
        : Effect.void

    /** The file at `path` of the tenant's volume, with its chunks. */
    const findFile = (tenantId: string, volumeId: string, path: string) =>
      Effect.gen(function*() {
        const relative = yield* parsed(FilePath.parse(path))
        // One query for both: no row is no volume, a row without a path no file.
        const [row] = yield* sql<StoredFile | { readonly path: null }>`SELECT ${fileFields}, f.chunks
          FROM volumes v LEFT JOIN volume_files f ON f.volume_id = v.id AND f.path = ${relative}
          WHERE v.id = ${volumeId} AND v.tenant_id = ${tenantId}`.pipe(PersistenceError.PersistenceError.refail)
        if (row === undefined) return yield* noVolume(volumeId)
        if (row.path === null) return yield* noFile(volumeId, relative)
        return row as StoredFile
      })

    const create = (tenantId: string, input: NewVolume) =>
      sql<VolumeRow>`INSERT INTO volumes AS v (id, tenant_id, name, agent_id)
        VALUES (${input.id ?? Ids.volume()}, ${tenantId}, ${input.name ?? null}, ${input.agentId ?? null})
        RETURNING ${volumeFields}`.pipe(Effect.map(([row]) => toVolume(row!)), PersistenceError.PersistenceError.refail)

    const list = (tenantId: string, page: Common.PageParams) =>
      sql<VolumeRow>`SELECT ${volumeFields} FROM volumes v
        WHERE v.tenant_id = ${tenantId} ${page.after === undefined ? sql`` : sql`AND v.id > ${page.after}`}
        ORDER BY v.id LIMIT ${Common.pageQueryLimit(page)}`.pipe(
        Effect.map((rows) => Common.toPage(rows.map(toVolume), page)),
        PersistenceError.PersistenceError.refail
      )

    const remove = (tenantId: string, volumeId: string) =>
      Effect.gen(function*() {
        const { volume } = yield* lockVolume(tenantId, volumeId)
        const [snapshots] = yield* sql<{ bytes: number }>`SELECT coalesce(sum(bytes), 0)::float8 AS bytes
          FROM volume_snapshots WHERE volume_id = ${volumeId}`
        // Its files and snapshots go with it (ON DELETE CASCADE); their chunks at the next sweep, unless named
        // elsewhere.
        yield* sql`DELETE FROM volumes WHERE id = ${volumeId}`
        yield* sql`UPDATE file_usage SET files = files - ${volume.files},
          bytes = bytes - ${volume.bytes + snapshots!.bytes} WHERE tenant_id = ${tenantId}`
        return { id: volumeId, deleted: true as const }
      }).pipe(transaction)

    /** The volume's snapshot, under `lockVolume`: one of another volume looks like none. */
    const findSnapshot = (volumeId: string, snapshotId: string) =>
      Effect.flatMap(
        sql<Volume.VolumeSnapshot>`SELECT ${snapshotFields} FROM volume_snapshots s
          WHERE s.id = ${snapshotId} AND s.volume_id = ${volumeId}`,
        ([row]) =>
          row === undefined
            ? Effect.fail(new ApiError.NotFound({ error: `no snapshot ${snapshotId} of ${volumeId}` }))
            : Effect.succeed(row)
      )

    const fork = (tenantId: string, volumeId: string, input: NewVolume & { readonly snapshot?: string | undefined }) =>
      Effect.gen(function*() {
        const locked = yield* lockVolume(tenantId, volumeId)
        const source = input.snapshot === undefined ? locked.volume : yield* findSnapshot(volumeId, input.snapshot)
        yield* overQuota(locked.used, source.bytes)
        const id = input.id ?? Ids.volume()
        const [row] = yield* sql<VolumeRow>`INSERT INTO volumes AS v
            (id, tenant_id, name, agent_id, forked_from, forked_snapshot, files, bytes)
          VALUES (${id}, ${tenantId}, ${input.name ?? null}, ${input.agentId ?? null}, ${volumeId},
            ${input.snapshot ?? null}, ${source.files}, ${source.bytes})
          RETURNING ${volumeFields}`
        // Rows naming the same chunks: the cost is one row per file, whatever the bytes.
        yield* input.snapshot === undefined
          ? sql`INSERT INTO volume_files (volume_id, path, version, size, content_type, chunks, updated_at, by)
            SELECT ${id}, path, version, size, content_type, chunks, updated_at, by
            FROM volume_files WHERE volume_id = ${volumeId}`
          : sql`INSERT INTO volume_files (volume_id, path, version, size, content_type, chunks, updated_at, by)
            SELECT ${id}, path, version, size, content_type, chunks, updated_at, by
            FROM volume_snapshot_files WHERE snapshot_id = ${input.snapshot}`
        yield* sql`UPDATE file_usage SET files = files + ${source.files}, bytes = bytes + ${source.bytes}
          WHERE tenant_id = ${tenantId}`
        return toVolume(row!)
      }).pipe(transaction)

    const snapshot = (tenantId: string, volumeId: string, input: { readonly name?: string | undefined }) =>
      Effect.gen(function*() {
        // Under the tenant's lock no write comes between the copy and the seq it is stamped with.
        const { used, volume } = yield* lockVolume(tenantId, volumeId)
        yield* overQuota(used, volume.bytes)
        const id = Ids.make("snap")
        const [row] = yield* sql<Volume.VolumeSnapshot>`INSERT INTO volume_snapshots AS s
            (id, volume_id, name, seq, files, bytes)
          VALUES (${id}, ${volumeId}, ${input.name ?? null}, ${volume.seq}, ${volume.files}, ${volume.bytes})
          RETURNING ${snapshotFields}`
        yield* sql`INSERT INTO volume_snapshot_files
            (snapshot_id, path, version, size, content_type, chunks, updated_at, by)
          SELECT ${id}, path, version, size, content_type, chunks, updated_at, by
          FROM volume_files WHERE volume_id = ${volumeId}`
        // Bytes only: `files` counts the files of volumes, which a snapshot's are not.
        yield* sql`UPDATE file_usage SET bytes = bytes + ${volume.bytes} WHERE tenant_id = ${tenantId}`
        return new Volume.VolumeSnapshot(row!)
      }).pipe(transaction)

    const snapshots = (tenantId: string, volumeId: string) =>
      Effect.zipRight(
        findVolume(tenantId, volumeId),
        sql<Volume.VolumeSnapshot>`SELECT ${snapshotFields} FROM volume_snapshots s
          WHERE s.volume_id = ${volumeId} ORDER BY s.created_at, s.id`.pipe(
          Effect.map((rows) => rows.map((row) => new Volume.VolumeSnapshot(row))),
          PersistenceError.PersistenceError.refail
        )
      )

    const removeSnapshot = (tenantId: string, volumeId: string, snapshotId: string) =>
      Effect.gen(function*() {
        yield* lockVolume(tenantId, volumeId)
        const found = yield* findSnapshot(volumeId, snapshotId)
        // Its rows go with it; the chunks only they named at the next sweep.
        yield* sql`DELETE FROM volume_snapshots WHERE id = ${snapshotId}`
        yield* sql`UPDATE file_usage SET bytes = bytes - ${found.bytes} WHERE tenant_id = ${tenantId}`
        return { id: snapshotId, deleted: true as const }
      }).pipe(transaction)

    const history = (tenantId: string, volumeId: string, since: number) =>
      Effect.gen(function*() {
        const volume = yield* findVolume(tenantId, volumeId)
        const rows = yield* sql<ChangeRow>`SELECT seq::float8 AS seq, path, kind, version, size::float8 AS size, by,
            floor(extract(epoch from at))::float8 AS at
          FROM volume_changes WHERE volume_id = ${volumeId} AND seq > ${since}
          ORDER BY seq LIMIT ${Volume.maxChangesPerPage}`.pipe(PersistenceError.PersistenceError.refail)
        // Changes after `since` were made (the volume's seq is past it) but the first kept is not the next one.
        const gap = since < volume.seq && (rows[0]?.seq ?? volume.seq + 1) > since + 1
        return new Volume.FileChanges({
          seq: volume.seq,
          changes: rows.map(toChange),
          ...(gap ? { gap: true } : {})
        })
      })

    const files = (tenantId: string, volumeId: string, options: ListOptions) =>
      Effect.gen(function*() {
        const prefix = yield* parsed(FilePath.parseDirectory(options.prefix))
        yield* findVolume(tenantId, volumeId)
        // Paths under `docs/` are those in ["docs/", "docs0") bytewise: `0` is the byte after `/`.
        const rows = yield* sql<FileRow>`SELECT ${fileFields} FROM volume_files f WHERE f.volume_id = ${volumeId}
          ${prefix === "" ? sql`` : sql`AND f.path >= ${prefix} AND f.path < ${`${prefix.slice(0, -1)}0`}`}
          ${options.after === undefined ? sql`` : sql`AND f.path > ${options.after}`}
          ${
          options.glob === undefined
            ? sql``
            : sql`AND ${options.glob.root} || substr(f.path, char_length(${options.glob.strip}) + 1)
              ~ ${options.glob.pattern}`
        }
          ORDER BY f.path LIMIT ${options.limit + 1}`.pipe(PersistenceError.PersistenceError.refail)
        const data = rows.slice(0, options.limit).map(toFile)
        return { data, next: rows.length > options.limit ? data[data.length - 1]!.path : null }
      })

    const read = (
      tenantId: string,
      volumeId: string,
      path: string,
      range?: Range
    ): Effect.Effect<Read, ApiError.NotFound | ApiError.InvalidRequest | PersistenceError.PersistenceError> =>
      Effect.gen(function*() {
        const file = yield* findFile(tenantId, volumeId, path)
        const start = Math.min(range?.offset ?? 0, file.size)
        const end = range === undefined ? file.size : Math.min(range.offset + range.length, file.size)
        if (start >= end) return { file: toFile(file), bytes: new Uint8Array(0) }
        // Only the chunks the range overlaps; every chunk but the last is chunkSize bytes.
        const first = Math.floor(start / ContentStore.chunkSize)
        const offset = first * ContentStore.chunkSize
        return yield* store.get(file.chunks.slice(first, Math.ceil(end / ContentStore.chunkSize))).pipe(
          Effect.map((chunks) => ({
            file: toFile(file),
            bytes: Buffer.concat(chunks).subarray(start - offset, end - offset)
          })),
          // Overwritten or removed since it was looked up, and its old chunks swept: look again. A chunk the file
          // still names is never swept, so one gone while named is a bug, not a failure to answer.
          Effect.catchTag("ChunkMissing", (missing) =>
            Effect.flatMap(
              findFile(tenantId, volumeId, path),
              (now) => sameChunks(now.chunks, file.chunks) ? Effect.die(missing) : read(tenantId, volumeId, path, range)
            ))
        )
      })

    const write = (
      tenantId: string,
      volumeId: string,
      path: string,
      bytes: Uint8Array,
      options: WriteOptions = {}
    ) =>
      Effect.gen(function*() {
        const relative = yield* parsed(FilePath.parse(path))
        if (bytes.length > maxFileBytes) {
          return yield* new ApiError.TooLarge({
            error: `the file is ${bytes.length} bytes, over the limit of ${maxFileBytes} bytes per file`
          })
        }
        // Before any bytes are put, so a write to no volume stores nothing.
        yield* findVolume(tenantId, volumeId)
        const contentType = options.contentType ?? ContentType.sniff(bytes, relative)
        // Outside the transaction, which then holds the tenant's lock only as long as its rows take.
        const chunks = yield* store.put(ContentStore.split(bytes))
        return yield* Effect.gen(function*() {
          const { used } = yield* lockVolume(tenantId, volumeId)
          // Under the tenant's lock: no other change of this file can come between this read and the write.
          const [current] = yield* sql<{ version: number; size: number }>`SELECT version, size::float8 AS size
            FROM volume_files WHERE volume_id = ${volumeId} AND path = ${relative}`
          yield* versionConflict(relative, current?.version ?? 0, options.ifVersion)
          const growth = bytes.length - (current?.size ?? 0)
          yield* overQuota(used, growth)
          const [row] = yield* sql<FileRow>`INSERT INTO volume_files AS f
              (volume_id, path, version, size, content_type, chunks, by)
            VALUES (${volumeId}, ${relative}, ${(current?.version ?? 0) + 1}, ${bytes.length}, ${contentType},
              ${chunks}::bytea[], ${options.by ?? null})
            ON CONFLICT (volume_id, path) DO UPDATE SET version = excluded.version, size = excluded.size,
              content_type = excluded.content_type, chunks = excluded.chunks, updated_at = now(), by = excluded.by
            RETURNING ${fileFields}`
          yield* count(tenantId, volumeId, current === undefined ? 1 : 0, growth, {
            path: relative,
            version: row!.version,
            size: bytes.length
          }, options.by)
          return toFile(row!)
        }).pipe(
          transaction,
          Effect.tap((file) =>
            publish({ tenantId, volumeId, path: file.path, version: file.version, by: options.by ?? null })
          )
        )
      })

    const removeFile = (
      tenantId: string,
      volumeId: string,
      path: string,
      options: { readonly ifVersion?: number | undefined; readonly by?: string | undefined } = {}
    ) =>
      Effect.gen(function*() {
        const relative = yield* parsed(FilePath.parse(path))
        yield* lockVolume(tenantId, volumeId)
        const [row] = yield* sql<FileRow>`SELECT ${fileFields} FROM volume_files f
          WHERE f.volume_id = ${volumeId} AND f.path = ${relative}`
        if (row === undefined) return yield* noFile(volumeId, relative)
        yield* versionConflict(relative, row.version, options.ifVersion)
        yield* sql`DELETE FROM volume_files WHERE volume_id = ${volumeId} AND path = ${relative}`
        yield* count(tenantId, volumeId, -1, -row.size, { path: relative, version: null, size: null }, options.by)
        return toFile(row)
      }).pipe(
        transaction,
        Effect.tap((file) => publish({ tenantId, volumeId, path: file.path, version: null, by: options.by ?? null }))
      )

    const pin = (tenantId: string, volumeId: string, path: string, expiresAt: number) =>
      Effect.gen(function*() {
        // Under the tenant's lock, so the row whose chunks the pin copies stays until the pin commits: a sweep
        // sees one or the other.
        yield* lockVolume(tenantId, volumeId)
        const file = yield* findFile(tenantId, volumeId, path)
        const pinned: Pinned = {
          id: Ids.make("pin"),
          name: FilePath.basename(file.path),
          size: file.size,
          contentType: file.contentType,
          expiresAt
        }
        yield* sql`INSERT INTO file_pins (id, tenant_id, name, size, content_type, chunks, expires_at)
          VALUES (${pinned.id}, ${tenantId}, ${pinned.name}, ${pinned.size}, ${pinned.contentType},
            ${file.chunks}::bytea[], to_timestamp(${expiresAt}))`
        return pinned
      }).pipe(transaction)

    const findPin = (id: string) =>
      sql<Pinned & { readonly chunks: ReadonlyArray<Uint8Array> }>`SELECT id, name, size::float8 AS size,
          content_type, chunks, extract(epoch from expires_at)::float8 AS expires_at
        FROM file_pins WHERE id = ${id} AND expires_at > now()`.pipe(
        PersistenceError.PersistenceError.refail,
        Effect.flatMap(([row]) =>
          row === undefined
            ? Effect.fail(new ApiError.NotFound({ error: `no pinned file ${id}` }))
            : Effect.succeed(row)
        )
      )

    const readPinned = (id: string) =>
      Effect.gen(function*() {
        const { chunks, ...pinned } = yield* findPin(id)
        const bytes = yield* store.get(chunks).pipe(
          // A pin's chunks are swept only once it has expired.
          Effect.catchTag("ChunkMissing", (missing) => Effect.zipRight(findPin(id), Effect.die(missing)))
        )
        return { ...pinned, bytes: Buffer.concat(bytes) }
      })

    return Volumes.of({
      create,
      list,
      get: (tenantId, volumeId) => Effect.map(findVolume(tenantId, volumeId), toVolume),
      remove,
      fork,
      files,
      stat: (tenantId, volumeId, path) => Effect.map(findFile(tenantId, volumeId, path), toFile),
      read,
      write,
      removeFile,
      pin,
      readPinned,
      changes: PubSub.subscribe(changed).pipe(Effect.map(Stream.fromQueue)),
      history,
      snapshot,
      snapshots,
      removeSnapshot
    })
  })

/**
 * Deletes the expired pins, then the chunks nothing names and not put within `grace`; answers how many chunks
 * went.
 */
export const sweep = (grace: Duration.DurationInput) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* ContentStore.ContentStore
    yield* sql`DELETE FROM file_pins WHERE expires_at <= now()`.pipe(PersistenceError.PersistenceError.refail)
    return yield* store.sweep(new Date(Date.now() - Duration.toMillis(grace)))
  })

/** The service, and a sweep every `sweepInterval` on this node (sweeps on several nodes at once are harmless). */
export const layer = (
  options: Options = {}
): Layer.Layer<Volumes, never, SqlClient.SqlClient | ContentStore.ContentStore> =>
  Layer.scoped(
    Volumes,
    Effect.gen(function*() {
      yield* sweep(sweepGrace).pipe(
        Effect.tap((swept) =>
          swept === 0 ? Effect.void : Effect.logInfo("swept file chunks").pipe(Effect.annotateLogs("chunks", swept))
        ),
        Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("sweeping file chunks failed")),
        Effect.repeat(Schedule.spaced(sweepInterval)),
        Effect.forkScoped
      )
      return yield* make(options)
    })
  )

/** The settings `layerConfig` reads. */
export const config: Config.Config<Options> = Config.all({
  quotaBytes: Config.integer("FILES_QUOTA_BYTES").pipe(Config.withDefault(Volume.defaultQuotaBytes)),
  maxFileBytes: Config.integer("FILES_MAX_FILE_BYTES").pipe(Config.withDefault(Volume.defaultMaxFileBytes))
})

/** `layer` with FILES_QUOTA_BYTES (default 10 GiB per tenant) and FILES_MAX_FILE_BYTES (default 256 MiB). */
export const layerConfig: Layer.Layer<
  Volumes,
  ConfigError.ConfigError,
  SqlClient.SqlClient | ContentStore.ContentStore
> = Layer.unwrapEffect(Effect.map(config, layer))
