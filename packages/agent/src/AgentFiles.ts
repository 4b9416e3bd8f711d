/**
 * An agent's files as its application sees them over the agent's own token
 * (`/clients/{id}/files`): the files of every mount, named the way the agent
 * names them (`/workspace/report.pdf`), found through `Workspace`, the one
 * place a path meets the mounts. Reads and writes then go to the mount's
 * volume; a read-only mount refuses writes.
 */
import { ApiError, Volume } from "@agent-runtime/domain"
import { FilePath, Volumes } from "@agent-runtime/files"
import type { PersistenceError } from "@agent-runtime/store"
import { Context, Effect, Either, Layer } from "effect"
import { AgentStore, findLive } from "./AgentStore.ts"
import * as Workspace from "./Workspace.ts"

export interface ListOptions {
  /** A directory as the agent sees it; every mount when absent or `/`. */
  readonly path?: string | undefined
  /** Over the paths the agent sees; a relative glob is relative to `path`. */
  readonly glob?: string | undefined
  /** The last path of the previous page. */
  readonly after?: string | undefined
  readonly limit: number
}

export class AgentFiles extends Context.Tag("@agent-runtime/agent/AgentFiles")<AgentFiles, {
  /** The files of the agent's mounts under `path`, in the order of the paths the agent sees. */
  readonly list: (
    tenantId: string,
    agentId: string,
    options: ListOptions
  ) => Effect.Effect<
    Volume.AgentFileList,
    ApiError.NotFound | ApiError.Gone | ApiError.InvalidRequest | PersistenceError.PersistenceError
  >
  /**
   * Where the agent's `path` lives: InvalidRequest when no mount holds it, Forbidden when `access` is write
   * and its mount is read-only.
   */
  readonly locate: (
    tenantId: string,
    agentId: string,
    path: string,
    access: "read" | "write"
  ) => Effect.Effect<
    Workspace.Resolved,
    ApiError.NotFound | ApiError.Gone | ApiError.InvalidRequest | ApiError.Forbidden | PersistenceError.PersistenceError
  >
}>() {}

/** A mount point as the start of the paths under it: `/workspace/`, or `/` for a mount at the root. */
const rootOf = (mount: { readonly path: string }) => `${mount.path.replace(/\/+$/, "")}/`

const subpathOf = (mount: { readonly subpath?: string | undefined }) =>
  mount.subpath === undefined ? "" : Either.getOrElse(FilePath.parseDirectory(mount.subpath), () => "")

const invalid = (error: string) => new ApiError.InvalidRequest({ error: `invalid request: ${error}` })

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const volumes = yield* Volumes.Volumes

  const mountsOf = (tenantId: string, agentId: string) =>
    Effect.map(findLive(store, tenantId, agentId), (agent) => agent.config.mounts ?? [])

  const locate = (tenantId: string, agentId: string, path: string, access: "read" | "write") =>
    Effect.gen(function*() {
      const resolved = Workspace.resolve(yield* mountsOf(tenantId, agentId), path)
      if (Either.isLeft(resolved)) return yield* invalid(resolved.left)
      if (access === "write" && resolved.right.mount.mode !== "rw") {
        return yield* new ApiError.Forbidden({ error: `${resolved.right.mount.path} is mounted read-only` })
      }
      return resolved.right
    })

  const list = (tenantId: string, agentId: string, options: ListOptions) =>
    Effect.gen(function*() {
      const mounts = yield* mountsOf(tenantId, agentId)
      const everything = options.path === undefined || /^\/*$/.test(options.path)
      // Each mount with the directory listed in its volume and where the listing starts as the agent sees it.
      const listed = everything
        ? mounts.map((mount) => ({ mount, prefix: subpathOf(mount), shown: rootOf(mount) }))
        : yield* Either.match(Workspace.resolveDirectory(mounts, options.path!), {
          onLeft: (error) => Effect.fail(invalid(error)),
          onRight: (found) => Effect.succeed([{ ...found, shown: `${found.shown.replace(/\/+$/, "")}/` }])
        })
      const glob = options.glob === undefined
        ? undefined
        : FilePath.globPattern(
          options.glob.startsWith("/") ? options.glob : `${everything ? "/" : listed[0]!.shown}${options.glob}`
        )
      // Mount points are never inside one another, so in the order of their roots their files follow on.
      const ordered = [...listed].sort((a, b) =>
        Buffer.compare(Buffer.from(rootOf(a.mount)), Buffer.from(rootOf(b.mount)))
      )
      const files: Array<Volume.AgentFile> = []
      let more = false
      for (const { mount, prefix } of ordered) {
        const root = rootOf(mount)
        const subpath = subpathOf(mount)
        const after = options.after
        // Where the previous page ended, in this mount's volume; a mount wholly before it is passed over.
        if (after !== undefined && !after.startsWith(root) && after > root) continue
        if (files.length === options.limit) {
          more = true
          break
        }
        const page = yield* volumes.files(tenantId, mount.volumeId, {
          prefix,
          after: after !== undefined && after.startsWith(root) ? subpath + after.slice(root.length) : undefined,
          limit: options.limit - files.length,
          glob: glob === undefined ? undefined : { pattern: glob, strip: subpath, root }
        }).pipe(
          // A mounted volume since deleted holds no files.
          Effect.catchTag("NotFound", () => Effect.succeed({ data: [], next: null }))
        )
        for (const file of page.data) {
          files.push(new Volume.AgentFile({ ...file, path: Workspace.shownPath(mount, file.path) }))
        }
        if (page.next !== null) {
          more = true
          break
        }
      }
      return new Volume.AgentFileList({
        files,
        ...(more && files.length > 0 ? { next: files[files.length - 1]!.path } : {})
      })
    })

  return AgentFiles.of({ list, locate })
})

export const layer: Layer.Layer<AgentFiles, never, AgentStore | Volumes.Volumes> = Layer.effect(AgentFiles, make)
