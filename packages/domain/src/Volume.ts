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

export class Volume extends Schema.Class<Volume>("Volume")({
  id: VolumeId,
  name: Schema.NullOr(Schema.String),
  createdAt: Timestamp,
  files: Schema.Number.annotations({ description: "how many files it holds" }),
  bytes: Schema.Number.annotations({ description: "the sum of its files' sizes" }),
  agentId: Schema.NullOr(Schema.String).annotations({ description: "the agent whose workspace it is, if any" }),
  forkedFrom: Schema.NullOr(VolumeId).annotations({ description: "the volume it is a copy-on-write fork of" })
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
  Schema.Struct({ name: Schema.optional(Name) }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** GET /v1/volumes/{volumeId}/files: files under `prefix` (a directory), in path order. */
export const FileListParams = Schema.Struct({
  ...PageParams.fields,
  prefix: Schema.optional(Schema.String.annotations({ description: "a directory of the volume, e.g. docs/" }))
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
