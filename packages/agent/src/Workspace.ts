/**
 * An agent's file system: its mounts, each a volume (or one directory of it,
 * `subpath`) seen at an absolute path, read-only or writable. Every agent
 * made since volumes came gets a workspace volume of its own at /workspace
 * unless its mounts say otherwise. File tools, uploads and prompt files all
 * name files the way the agent sees them (`/workspace/notes.md`, or
 * `notes.md` relative to the workspace) and go through `resolve`, the one
 * place a path is checked against the mounts.
 */
import type { Agent as AgentSchemas } from "@agent-runtime/domain"
import { ApiError } from "@agent-runtime/domain"
import type { Volumes } from "@agent-runtime/files"
import { FilePath } from "@agent-runtime/files"
import { Effect, Either } from "effect"

/** Where the agent's own workspace volume is mounted by default, and what relative paths start from. */
export const workspacePath = "/workspace"

export const maxMounts = 16

/** A file as the agent names it, and where it lives. */
export interface Resolved {
  readonly mount: AgentSchemas.Mount
  readonly volumeId: string
  /** The path in the volume. */
  readonly path: string
  /** The path as the agent sees it, normalized. */
  readonly shown: string
}

/** A mount point without its leading slash (`workspace`), as `FilePath.parse` gives paths. */
const pointOf = (mount: AgentSchemas.Mount) => mount.path.replace(/^\/+/, "").replace(/\/+$/, "")

const under = (path: string, point: string) => point === "" || path === point || path.startsWith(`${point}/`)

/** The mount at /workspace, else the first writable one: what relative paths start from. */
export const workspaceOf = (mounts: ReadonlyArray<AgentSchemas.Mount>) =>
  mounts.find((mount) => pointOf(mount) === "workspace") ?? mounts.find((mount) => mount.mode === "rw")

/** Where an upload (or an inline prompt file) goes: uploads/<requestId>/<name> in the writable workspace. */
export const uploadPath = (
  mounts: ReadonlyArray<AgentSchemas.Mount>,
  requestId: string,
  name: string
): Either.Either<Resolved, string> => {
  const nameProblem = FilePath.parseName(name)
  if (Either.isLeft(nameProblem)) {
    return Either.left(`name ${JSON.stringify(name)} is not a file name: it ${nameProblem.left}`)
  }
  const requestProblem = FilePath.parseName(requestId)
  if (Either.isLeft(requestProblem)) {
    return Either.left(`request id ${JSON.stringify(requestId)} cannot name a directory: it ${requestProblem.left}`)
  }
  const workspace = workspaceOf(mounts)
  if (workspace?.mode !== "rw") return Either.left("the agent has no writable workspace to save files in")
  return resolve([workspace], `${workspace.path}/uploads/${requestId}/${name}`)
}

/**
 * Where `path` (absolute, or relative to the workspace) lives: the mount
 * holding it (the deepest, should mount points nest) and its path there.
 * Refused when a path rule refuses it, when no mount holds it, or when it
 * names a mount point itself.
 */
export const resolve = (
  mounts: ReadonlyArray<AgentSchemas.Mount>,
  path: string
): Either.Either<Resolved, string> => {
  const workspace = workspaceOf(mounts)
  const absolute = path.startsWith("/") ? path : `${workspace?.path ?? workspacePath}/${path}`
  return Either.flatMap(FilePath.parse(absolute), (normal) => {
    const mount = mounts
      .filter((candidate) => under(normal, pointOf(candidate)))
      .sort((a, b) => pointOf(b).length - pointOf(a).length)[0]
    if (mount === undefined) {
      return Either.left(
        `${path} is in no mount; the mounts are ${mounts.map((candidate) => candidate.path).join(", ") || "none"}`
      )
    }
    const point = pointOf(mount)
    const rest = point === "" ? normal : normal.slice(point.length + 1)
    if (rest === "") return Either.left(`${path} is a mount point, not a file`)
    const subpath = mount.subpath === undefined
      ? ""
      : Either.getOrElse(FilePath.parseDirectory(mount.subpath), () => "")
    return Either.right({ mount, volumeId: mount.volumeId, path: subpath + rest, shown: `/${normal}` })
  })
}

/** A directory as the agent names it (`/workspace/docs`, `docs`, or `/`), resolved like a file. */
export const resolveDirectory = (
  mounts: ReadonlyArray<AgentSchemas.Mount>,
  path: string
): Either.Either<{ readonly mount: AgentSchemas.Mount; readonly prefix: string; readonly shown: string }, string> => {
  const trimmed = path.replace(/\/+$/, "")
  const workspace = workspaceOf(mounts)
  const absolute = trimmed === "" || trimmed === "." ? (workspace?.path ?? "/") : trimmed
  const asMount = mounts.find((mount) =>
    `/${pointOf(mount)}` === (absolute.startsWith("/") ? absolute : `/${absolute}`)
  )
  if (asMount !== undefined) {
    const subpath = asMount.subpath === undefined
      ? ""
      : Either.getOrElse(FilePath.parseDirectory(asMount.subpath), () => "")
    return Either.right({ mount: asMount, prefix: subpath, shown: `/${pointOf(asMount)}` })
  }
  return Either.map(resolve(mounts, absolute), (resolved) => ({
    mount: resolved.mount,
    prefix: `${resolved.path}/`,
    shown: resolved.shown
  }))
}

/** The agent's path of a file found in a mount's volume. */
export const shownPath = (mount: AgentSchemas.Mount, volumePath: string) => {
  const subpath = mount.subpath === undefined ? "" : Either.getOrElse(FilePath.parseDirectory(mount.subpath), () => "")
  const point = pointOf(mount)
  return `/${point === "" ? "" : `${point}/`}${volumePath.slice(subpath.length)}`
}

/**
 * Checks mounts given at creation before anything is written: at most 16,
 * absolute paths the path rules take, none inside another, subpaths that
 * are directories by the same rules, and volumes of the tenant.
 */
export const validate = (
  volumes: Volumes.Volumes["Type"],
  tenantId: string,
  mounts: ReadonlyArray<AgentSchemas.Mount>
) =>
  Effect.gen(function*() {
    const invalid = (error: string) => new ApiError.InvalidRequest({ error: `invalid request: mounts: ${error}` })
    if (mounts.length > maxMounts) return yield* invalid(`at most ${maxMounts}`)
    const points: Array<string> = []
    for (const mount of mounts) {
      if (!mount.path.startsWith("/")) return yield* invalid(`path ${mount.path} must be absolute`)
      const point = FilePath.parse(mount.path)
      if (Either.isLeft(point)) return yield* invalid(point.left)
      if (mount.subpath !== undefined && Either.isLeft(FilePath.parseDirectory(mount.subpath))) {
        return yield* invalid(`subpath ${mount.subpath} is not a directory path`)
      }
      const clash = points.find((other) => under(point.right, other) || under(other, point.right))
      if (clash !== undefined) return yield* invalid(`${mount.path} overlaps /${clash}`)
      points.push(point.right)
    }
    yield* Effect.forEach(new Set(mounts.map((mount) => mount.volumeId)), (volumeId) =>
      Effect.mapError(volumes.get(tenantId, volumeId), () =>
        new ApiError.NotFound({ error: `mounts: no volume ${volumeId}` })), { discard: true })
  })
