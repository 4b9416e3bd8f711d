/**
 * Volumes: a tenant's file systems kept by the service. Every agent gets a
 * workspace volume (mounted at /workspace unless its mounts say otherwise);
 * other volumes are made by the tenant and mounted into agents ro or rw. The
 * spec shows only the file record (`VolumeFile`); the volume record, its
 * paths and the file routes are this service's design (docs/files.md).
 */
import { Schema } from "effect"
import { PageParams, Timestamp } from "./Common.ts"
import { VolumeFile } from "./Session.ts"

export { VolumeFile }

export const VolumeId = Schema.String.annotations({ description: "vol_..." })

export const SnapshotId = Schema.String.annotations({ description: "snap_..." })

/** Where a fork came from: the volume, and the snapshot of it when forked from one. */
export class VolumeOrigin extends Schema.Class<VolumeOrigin>("VolumeOrigin")({
  volume: VolumeId,
  snapshot: Schema.optional(SnapshotId)
}) {}

export class Volume extends Schema.Class<Volume>("Volume")({
  id: VolumeId,
  name: Schema.NullOr(Schema.String),
  createdAt: Timestamp,
  seq: Schema.Number.annotations({
    description: "its change sequence number: each write or removal of one of its files adds one"
  }),
  files: Schema.Number.annotations({ description: "how many files it holds" }),
  bytes: Schema.Number.annotations({ description: "the sum of its files' sizes" }),
  agentId: Schema.NullOr(Schema.String).annotations({ description: "the agent whose workspace it is, if any" }),
  forkedFrom: Schema.NullOr(VolumeId).annotations({ description: "the volume it is a copy-on-write fork of" }),
  origin: Schema.optional(VolumeOrigin).annotations({ description: "present on a fork: what it was forked from" })
}) {}

/** A frozen, read-only copy of a volume's files at one moment; its bytes count against the quota. */
export class VolumeSnapshot extends Schema.Class<VolumeSnapshot>("VolumeSnapshot")({
  id: SnapshotId,
  volume: VolumeId,
  name: Schema.NullOr(Schema.String),
  seq: Schema.Number.annotations({ description: "the volume's seq when it was taken" }),
  createdAt: Timestamp,
  files: Schema.Number,
  bytes: Schema.Number
}) {}

const Name = Schema.String.pipe(
  Schema.minLength(1, { message: () => "must be 1 to 80 characters" }),
  Schema.maxLength(80, { message: () => "must be 1 to 80 characters" })
)

/** POST /v1/volumes. */
export class VolumeInput extends Schema.Class<VolumeInput>("VolumeInput")(
  Schema.Struct({ name: Schema.optional(Name) }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** POST /v1/volumes/{volumeId}/fork: a copy-on-write copy, as cheap whatever its size. */
export class VolumeForkInput extends Schema.Class<VolumeForkInput>("VolumeForkInput")(
  Schema.Struct({
    name: Schema.optional(Name),
    snapshot: Schema.optional(SnapshotId.annotations({ description: "fork that snapshot's files, not today's" }))
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** POST /v1/volumes/{volumeId}/snapshots. */
export class SnapshotInput extends Schema.Class<SnapshotInput>("SnapshotInput")(
  Schema.Struct({ name: Schema.optional(Name) }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** Changes kept per volume: `since` older than the oldest kept answers `gap: true`. */
export const maxChangesKept = 10_000

/** Changes in one answer of GET .../changes; the caller asks again from the last seq for more. */
export const maxChangesPerPage = 1_000

/** One write or removal of a file, numbered by the volume's seq. */
export class FileChange extends Schema.Class<FileChange>("FileChange")({
  seq: Schema.Number,
  path: Schema.String,
  kind: Schema.Literal("write", "delete"),
  version: Schema.optional(Schema.Number.annotations({ description: "the version written" })),
  size: Schema.optional(Schema.Number.annotations({ description: "bytes written" })),
  by: Schema.optional(Schema.String),
  at: Timestamp
}) {}

/** GET /v1/volumes/{volumeId}/changes: what changed after `since`, oldest first. */
export class FileChanges extends Schema.Class<FileChanges>("FileChanges")({
  seq: Schema.Number.annotations({ description: "the volume's seq now" }),
  changes: Schema.Array(FileChange),
  gap: Schema.optional(
    Schema.Boolean.annotations({ description: "true: changes after `since` are no longer kept; list the files again" })
  )
}) {}

export const ChangesParams = Schema.Struct({
  since: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative()).annotations({
      description: "the seq the caller has seen (default 0)"
    })
  )
})

/** A glob over paths: `*` and `?` within a segment, `**` across any. */
const Glob = Schema.String.pipe(Schema.maxLength(1024)).annotations({
  description: "only paths matching this glob: * and ? within a segment, ** any segments, e.g. **/*.md"
})

/** GET /v1/volumes/{volumeId}/files: files under `prefix` (a directory), in path order. */
export const FileListParams = Schema.Struct({
  ...PageParams.fields,
  prefix: Schema.optional(Schema.String.annotations({ description: "a directory of the volume, e.g. docs/" })),
  glob: Schema.optional(Glob)
})

/** A page of a volume's files: `next` is the `after` of the next page, absent on the last. */
export class FileList extends Schema.Class<FileList>("FileList")({
  files: Schema.Array(VolumeFile),
  next: Schema.optional(Schema.String)
}) {}

/** A file of an agent's mounts, `path` where the agent sees it (/workspace/report.pdf). */
export class AgentFile extends Schema.Class<AgentFile>("AgentFile")({
  ...VolumeFile.fields
}) {}

/** GET /clients/{id}/files: `path` a directory the agent sees (default every mount). */
export const AgentFileListParams = Schema.Struct({
  ...PageParams.fields,
  path: Schema.optional(
    Schema.String.annotations({ description: "a directory as the agent sees it, e.g. /workspace" })
  ),
  glob: Schema.optional(Glob)
})

export class AgentFileList extends Schema.Class<AgentFileList>("AgentFileList")({
  files: Schema.Array(AgentFile),
  next: Schema.optional(Schema.String)
}) {}

/** Seconds a link lives: 900 unless asked, at most a day. */
export const defaultLinkSeconds = 900
export const maxLinkSeconds = 86400

/** POST .../links: a signed URL for one file, used without any Authorization header. */
export class FileLinkInput extends Schema.Class<FileLinkInput>("FileLinkInput")(
  Schema.Struct({
    path: Schema.String,
    method: Schema.optional(Schema.Literal("GET", "PUT")),
    expiresIn: Schema.optional(
      Schema.Int.pipe(Schema.between(1, maxLinkSeconds)).annotations({
        description: `seconds, default ${defaultLinkSeconds}, at most ${maxLinkSeconds}`
      })
    ),
    maxBytes: Schema.optional(
      Schema.Int.pipe(Schema.positive()).annotations({ description: "PUT: the most bytes the upload may hold" })
    ),
    contentType: Schema.optional(
      Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)).annotations({
        description: "PUT: the content type the file gets, whatever the upload sends"
      })
    )
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

export class FileLink extends Schema.Class<FileLink>("FileLink")({
  url: Schema.String.annotations({ description: "absolute; the signature in it is the credential" }),
  method: Schema.Literal("GET", "PUT"),
  path: Schema.String,
  expiresAt: Timestamp,
  maxBytes: Schema.optional(Schema.Number),
  contentType: Schema.optional(Schema.String)
}) {}

/** The query of a signed file link, as `Downloads` makes it. */
export const FileLinkParams = Schema.Struct({
  tenant: Schema.String,
  path: Schema.String,
  expires: Schema.String,
  maxBytes: Schema.optional(Schema.String),
  contentType: Schema.optional(Schema.String),
  signature: Schema.String
})

/** The file routes' query: which file. */
export const FileParams = Schema.Struct({
  path: Schema.String.annotations({ description: "the file's path in the volume, e.g. docs/readme.md" })
})

/** PUT .../file: `ifVersion` makes the write conditional (0: only when the file does not exist yet). */
export const FileWriteParams = Schema.Struct({
  ...FileParams.fields,
  ifVersion: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative()).annotations({
      description: "write only if the file is at this version now; 0 = only if it does not exist"
    })
  )
})

/** Bytes of a volume, per tenant and per file; see docs/files.md. */
export const defaultQuotaBytes = 10 * 1024 * 1024 * 1024
export const defaultMaxFileBytes = 256 * 1024 * 1024
