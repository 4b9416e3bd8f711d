/**
 * The model's file tools over the agent's mounts: read (a window of lines,
 * so a large file is read in pages), write, edit (one exact replacement,
 * refused when the text is missing or ambiguous), ls, glob, grep, and
 * present_file (a signed, expiring link in a `file_presented` event). Every
 * path goes through `Workspace.resolve`; writes to a read-only mount are
 * refused. An edit is a conditional write at the version it read, tried
 * again on a fresh read when another writer got there first, so two agents
 * editing one file never lose an update. With `fileTools: false` the model
 * keeps present_file alone.
 */
import type { Agent as AgentSchemas, ApiError, Volume } from "@agent-runtime/domain"
import type { Downloads, Volumes } from "@agent-runtime/files"
import { FilePath } from "@agent-runtime/files"
import { PersistenceError } from "@agent-runtime/store"
import { Duration, Effect, Either, Option } from "effect"
import * as Path from "node:path"
import { text, type ToolContext, type ToolResult } from "./ToolResult.ts"
import * as Workspace from "./Workspace.ts"

/** A tool as `Tools` offers them, before its exposure is decided. */
export interface FileTool {
  readonly name: string
  readonly description: string
  readonly parameters: Record<string, unknown>
  readonly executionMode: "parallel" | "sequential"
  readonly execute: (args: Record<string, unknown>, context: ToolContext) => Effect.Effect<ToolResult>
}

/** Lines one read gives unless asked for fewer; longer lines are cut. */
const defaultReadLines = 2000
const maxLineChars = 2000
/** Bytes fetched per step while paging through a large file for lines. */
const readStep = 1024 * 1024
/** What glob and grep look through, and how much they answer. */
const maxScannedFiles = 5000
const maxMatches = 200
const maxGrepFileBytes = 4 * 1024 * 1024
/** How long a presented file's link works. */
const presentSeconds = 7 * 24 * 3600
/** Tries of an edit that keeps meeting newer versions, apart by a random wait that doubles (10 ms to 5 s). */
const editTries = 10

const failed = (message: string, code = "failed") => text(message, true, code)

const refusal = (error: ApiError.NotFound | ApiError.InvalidRequest | ApiError.Conflict | ApiError.TooLarge) =>
  failed(error.error, error._tag === "InvalidRequest" ? "invalid_arguments" : "failed")

/**
 * What the volumes refused, told to the model. A database fault is no refusal (a write may have happened):
 * the turn stops with it, and resumes from the journal, where the call is known as sent.
 */
const refused = <A, R>(
  effect: Effect.Effect<
    A,
    | ApiError.NotFound
    | ApiError.InvalidRequest
    | ApiError.Conflict
    | ApiError.TooLarge
    | PersistenceError.PersistenceError,
    R
  >
) => effect.pipe(PersistenceError.orDie, Effect.catchAll((error) => Effect.succeed(refusal(error))))

const isText = (contentType: string) =>
  /^text\/|json|xml|javascript|typescript|yaml|toml|csv|x-sh|sql|svg/.test(contentType)

const stringArg = (args: Record<string, unknown>, name: string) =>
  typeof args[name] === "string" ? args[name] as string : undefined

const numberArg = (args: Record<string, unknown>, name: string) =>
  typeof args[name] === "number" && Number.isFinite(args[name]) ? Math.floor(args[name] as number) : undefined

const pathParameter = {
  type: "string",
  description: "absolute (/workspace/notes.md) or relative to /workspace"
}

export const make = (
  volumes: Volumes.Volumes["Type"],
  downloads: Downloads.Downloads["Type"],
  scope: { readonly tenantId: string; readonly agentId: string; readonly mounts: ReadonlyArray<AgentSchemas.Mount> }
) => {
  const { agentId, mounts, tenantId } = scope
  const by = `agent:${agentId}`
  const where = (path: unknown) =>
    typeof path !== "string" || path === ""
      ? Either.left("path must be a non-empty string")
      : Workspace.resolve(mounts, path)
  const writable = (resolved: Workspace.Resolved) =>
    resolved.mount.mode === "rw"
      ? Either.right(resolved)
      : Either.left(`${resolved.shown} is on a read-only mount (${resolved.mount.path})`)
  const wrote = (resolved: Workspace.Resolved, file: Volume.VolumeFile, message: string): ToolResult => ({
    ...text(message),
    written: { path: resolved.shown, version: file.version, size: file.size }
  })

  /** Lines `from` (1-based) to `from + count - 1`, paging through the file a step at a time. */
  const readLines = (resolved: Workspace.Resolved, from: number, count: number) =>
    Effect.gen(function*() {
      const file = yield* volumes.stat(tenantId, resolved.volumeId, resolved.path)
      if (!isText(file.contentType)) return { file, binary: true as const }
      const decoder = new TextDecoder()
      const lines: Array<string> = []
      let line = 1
      let partial = ""
      let offset = 0
      while (offset < file.size && lines.length < count) {
        const { bytes } = yield* volumes.read(tenantId, resolved.volumeId, resolved.path, { offset, length: readStep })
        offset += bytes.length
        if (bytes.length === 0) break
        const pieces = (partial + decoder.decode(bytes, { stream: offset < file.size })).split("\n")
        partial = pieces.pop()!
        for (const piece of pieces) {
          if (line >= from && lines.length < count) lines.push(piece)
          line++
        }
      }
      if (lines.length < count && partial !== "" && line >= from) lines.push(partial)
      return { file, binary: false as const, lines, more: offset < file.size || lines.length === count }
    })

  const read: FileTool = {
    name: "read",
    description: "Read a text file, with line numbers. Large files come in pages: pass offset (the first line, " +
      "from 1) and limit (how many lines, default 2000).",
    parameters: {
      type: "object",
      properties: {
        path: pathParameter,
        offset: { type: "integer", minimum: 1, description: "the first line to read (default 1)" },
        limit: { type: "integer", minimum: 1, maximum: 10000, description: "how many lines (default 2000)" }
      },
      required: ["path"],
      additionalProperties: false
    },
    executionMode: "parallel",
    execute: (args) =>
      Either.match(where(args.path), {
        onLeft: (error) => Effect.succeed(failed(error, "invalid_arguments")),
        onRight: (resolved) => {
          const from = Math.max(1, numberArg(args, "offset") ?? 1)
          const count = Math.min(10_000, Math.max(1, numberArg(args, "limit") ?? defaultReadLines))
          return readLines(resolved, from, count).pipe(
            Effect.map((found) => {
              if (found.binary) {
                return text(
                  `${resolved.shown} is a ${found.file.contentType} file of ${found.file.size} bytes, not text; ` +
                    "present it with present_file to show it"
                )
              }
              const last = from + found.lines.length - 1
              const header = found.lines.length === 0
                ? `${resolved.shown} (version ${found.file.version}, ${found.file.size} bytes) has no line ${from}`
                : `${resolved.shown} (version ${found.file.version}, ${found.file.size} bytes), lines ${from}-${last}` +
                  (found.more ? `; more follow: read with offset ${last + 1}` : "")
              const body = found.lines.map((content, i) =>
                `${String(from + i).padStart(6)}\t${
                  content.length > maxLineChars ? `${content.slice(0, maxLineChars)}… (line cut)` : content
                }`
              ).join("\n")
              return text(body === "" ? header : `${header}\n${body}`)
            }),
            refused
          )
        }
      })
  }

  const write: FileTool = {
    name: "write",
    description: "Write a text file whole (made if missing, replaced if there).",
    parameters: {
      type: "object",
      properties: { path: pathParameter, content: { type: "string", description: "the file's whole text" } },
      required: ["path", "content"],
      additionalProperties: false
    },
    executionMode: "sequential",
    execute: (args) => {
      const content = stringArg(args, "content")
      if (content === undefined) return Effect.succeed(failed("content must be a string", "invalid_arguments"))
      return Either.match(Either.flatMap(where(args.path), writable), {
        onLeft: (error) => Effect.succeed(failed(error, "invalid_arguments")),
        onRight: (resolved) =>
          volumes.write(tenantId, resolved.volumeId, resolved.path, new TextEncoder().encode(content), { by }).pipe(
            Effect.map((file) =>
              wrote(resolved, file, `wrote ${resolved.shown} (version ${file.version}, ${file.size} bytes)`)
            ),
            refused
          )
      })
    }
  }

  /** Counts of `needle` in `haystack`, not overlapping. */
  const occurrences = (haystack: string, needle: string) => haystack.split(needle).length - 1

  const edit: FileTool = {
    name: "edit",
    description: "Replace exact text in a file: old_string must appear exactly once (give more surrounding text " +
      "to make it unique), unless replace_all is true.",
    parameters: {
      type: "object",
      properties: {
        path: pathParameter,
        old_string: { type: "string", minLength: 1, description: "the exact text to replace" },
        new_string: { type: "string", description: "what replaces it" },
        replace_all: { type: "boolean", description: "replace every occurrence (default false)" }
      },
      required: ["path", "old_string", "new_string"],
      additionalProperties: false
    },
    executionMode: "sequential",
    execute: (args) => {
      const oldString = stringArg(args, "old_string")
      const newString = stringArg(args, "new_string")
      if (oldString === undefined || oldString === "" || newString === undefined) {
        return Effect.succeed(failed("old_string (not empty) and new_string must be strings", "invalid_arguments"))
      }
      if (oldString === newString) {
        return Effect.succeed(failed("old_string and new_string are the same", "invalid_arguments"))
      }
      const all = args.replace_all === true
      return Either.match(Either.flatMap(where(args.path), writable), {
        onLeft: (error) => Effect.succeed(failed(error, "invalid_arguments")),
        onRight: (resolved) => {
          const attempt = (left: number): Effect.Effect<ToolResult> =>
            Effect.gen(function*() {
              const { bytes, file } = yield* volumes.read(tenantId, resolved.volumeId, resolved.path)
              const current = new TextDecoder().decode(bytes)
              const found = occurrences(current, oldString)
              if (found === 0) return failed(`old_string was not found in ${resolved.shown}`)
              if (found > 1 && !all) {
                return failed(
                  `old_string was found ${found} times in ${resolved.shown}; give more surrounding text to make ` +
                    "it unique, or set replace_all"
                )
              }
              const next = all ? current.split(oldString).join(newString) : current.replace(oldString, () => newString)
              const saved = yield* volumes.write(
                tenantId,
                resolved.volumeId,
                resolved.path,
                new TextEncoder().encode(next),
                { by, ifVersion: file.version, contentType: file.contentType }
              )
              return wrote(
                resolved,
                saved,
                `edited ${resolved.shown}: ${all ? found : 1} replacement${all && found > 1 ? "s" : ""} ` +
                  `(version ${saved.version})`
              )
            }).pipe(
              // Another writer saved a newer version between the read and the write: apply the edit to it.
              Effect.catchTag("Conflict", (conflict) =>
                left > 1
                  ? Effect.zipRight(
                    Effect.sleep(Duration.millis(Math.random() * 10 * 2 ** (editTries - left))),
                    attempt(left - 1)
                  )
                  : Effect.succeed(failed(`${conflict.error}; try again`))),
              refused
            )
          return attempt(editTries)
        }
      })
    }
  }

  /** Every file under a directory, up to `maxScannedFiles`, as the agent sees them. */
  const filesUnder = (mount: AgentSchemas.Mount, prefix: string) =>
    Effect.gen(function*() {
      const found: Array<Volume.VolumeFile & { readonly shown: string }> = []
      let after: string | undefined
      while (found.length < maxScannedFiles) {
        const page = yield* volumes.files(tenantId, mount.volumeId, { prefix, after, limit: 100 })
        for (const file of page.data) found.push({ ...file, shown: Workspace.shownPath(mount, file.path) })
        if (page.next === null) return { files: found, cut: false }
        after = page.next
      }
      return { files: found, cut: true }
    })

  /** The directory named by `path` (default the workspace), or every mount for `/`. */
  const directories = (path: string | undefined) => {
    if (path === "/") return Either.right(mounts.map((mount) => ({ mount, prefix: "", shown: mount.path })))
    return Either.map(Workspace.resolveDirectory(mounts, path ?? ""), (one) => [one])
  }

  const ls: FileTool = {
    name: "ls",
    description: "List a directory: its files (with sizes) and subdirectories. `/` lists the mounts.",
    parameters: {
      type: "object",
      properties: { path: { ...pathParameter, description: "a directory (default /workspace)" } },
      additionalProperties: false
    },
    executionMode: "parallel",
    execute: (args) =>
      Either.match(directories(stringArg(args, "path")), {
        onLeft: (error) => Effect.succeed(failed(error, "invalid_arguments")),
        onRight: (dirs) =>
          Effect.forEach(dirs, (dir) =>
            Effect.map(filesUnder(dir.mount, dir.prefix), ({ cut, files }) => {
              const entries = new Map<string, string>()
              for (const file of files) {
                const rest = file.path.slice(dir.prefix.length)
                const slash = rest.indexOf("/")
                if (slash === -1) entries.set(rest, `${rest}\t${file.size} bytes`)
                else entries.set(rest.slice(0, slash + 1), rest.slice(0, slash + 1))
              }
              const listing = [...entries.keys()].sort().map((name) => entries.get(name)!).join("\n")
              return `${dir.shown} (${dir.mount.mode})${cut ? `, the first ${maxScannedFiles} files` : ""}:\n` +
                (listing === "" ? "(empty)" : listing)
            })).pipe(
              Effect.map((parts) => text(parts.join("\n\n"))),
              refused
            )
      })
  }

  const glob: FileTool = {
    name: "glob",
    description: "Find files by a glob pattern (e.g. **/*.ts), matched against their full paths under `path`.",
    parameters: {
      type: "object",
      properties: {
        pattern: { type: "string", minLength: 1, description: "a glob: * within a segment, ** across them" },
        path: { ...pathParameter, description: "where to look (default /workspace)" }
      },
      required: ["pattern"],
      additionalProperties: false
    },
    executionMode: "parallel",
    execute: (args) => {
      const pattern = stringArg(args, "pattern")
      if (pattern === undefined || pattern === "") {
        return Effect.succeed(failed("pattern must be a non-empty string", "invalid_arguments"))
      }
      return Either.match(directories(stringArg(args, "path")), {
        onLeft: (error) => Effect.succeed(failed(error, "invalid_arguments")),
        onRight: (dirs) =>
          Effect.forEach(dirs, (dir) => filesUnder(dir.mount, dir.prefix)).pipe(
            Effect.map((scans) => {
              const base = dirs.length === 1 ? dirs[0]!.shown : "/"
              const full = pattern.startsWith("/") ? pattern : `${base.replace(/\/$/, "")}/${pattern}`
              const matches = scans.flatMap((scan) => scan.files)
                .filter((file) => Path.posix.matchesGlob(file.shown, full))
              const cut = scans.some((scan) => scan.cut)
              return text(
                matches.length === 0
                  ? `no file matches ${full}`
                  : matches.slice(0, maxMatches).map((file) => file.shown).join("\n") +
                    (matches.length > maxMatches ? `\n(${matches.length - maxMatches} more not shown)` : "") +
                    (cut ? `\n(only the first ${maxScannedFiles} files were looked at)` : "")
              )
            }),
            refused
          )
      })
    }
  }

  const grep: FileTool = {
    name: "grep",
    description: "Search text files for a regular expression; answers path:line: text for each matching line.",
    parameters: {
      type: "object",
      properties: {
        pattern: { type: "string", minLength: 1, description: "a JavaScript regular expression" },
        path: { ...pathParameter, description: "a file or directory to search (default /workspace)" },
        glob: { type: "string", description: "only files whose path matches this glob (e.g. **/*.md)" },
        ignoreCase: { type: "boolean" }
      },
      required: ["pattern"],
      additionalProperties: false
    },
    executionMode: "parallel",
    execute: (args) => {
      const pattern = stringArg(args, "pattern")
      let regex: RegExp
      try {
        regex = new RegExp(pattern ?? "", args.ignoreCase === true ? "i" : "")
      } catch (error) {
        return Effect.succeed(failed(`pattern is not a regular expression: ${(error as Error).message}`))
      }
      if (pattern === undefined || pattern === "") {
        return Effect.succeed(failed("pattern must be a non-empty string", "invalid_arguments"))
      }
      const only = stringArg(args, "glob")
      const path = stringArg(args, "path")
      const single = path === undefined ? Option.none() : Either.getRight(Workspace.resolve(mounts, path))
      return Effect.gen(function*() {
        const targets: Array<{ readonly volumeId: string; readonly path: string; readonly shown: string }> = []
        let cut = false
        // A path naming a file searches that file; otherwise it is a directory.
        const isFile = Option.isSome(single) &&
          Option.isSome(
            yield* Effect.option(
              PersistenceError.orDie(volumes.stat(tenantId, single.value.volumeId, single.value.path))
            )
          )
        if (isFile) {
          targets.push(Option.getOrThrow(single))
        } else {
          const dirs = directories(path)
          if (Either.isLeft(dirs)) return failed(dirs.left, "invalid_arguments")
          for (const dir of dirs.right) {
            const scan = yield* filesUnder(dir.mount, dir.prefix)
            cut ||= scan.cut
            for (const found of scan.files) {
              if (!isText(found.contentType) || found.size > maxGrepFileBytes) continue
              if (
                only !== undefined && !Path.posix.matchesGlob(found.shown, only) &&
                !Path.posix.matchesGlob(FilePath.basename(found.shown), only)
              ) continue
              targets.push({ volumeId: dir.mount.volumeId, path: found.path, shown: found.shown })
            }
          }
        }
        const matches: Array<string> = []
        for (const target of targets) {
          if (matches.length >= maxMatches) break
          const { bytes } = yield* volumes.read(tenantId, target.volumeId, target.path)
          const lines = new TextDecoder().decode(bytes).split("\n")
          for (let i = 0; i < lines.length && matches.length < maxMatches; i++) {
            if (regex.test(lines[i]!)) matches.push(`${target.shown}:${i + 1}: ${lines[i]!.slice(0, maxLineChars)}`)
          }
        }
        return text(
          (matches.length === 0 ? `no line matches /${pattern}/` : matches.join("\n")) +
            (matches.length >= maxMatches ? `\n(stopped at ${maxMatches} matches)` : "") +
            (cut ? `\n(only the first ${maxScannedFiles} files were searched)` : "")
        )
      }).pipe(refused)
    }
  }

  const present: FileTool = {
    name: "present_file",
    description: "Show a file to the person you work for: they get a link to download it (it works for 7 days).",
    parameters: {
      type: "object",
      properties: { path: pathParameter },
      required: ["path"],
      additionalProperties: false
    },
    executionMode: "parallel",
    execute: (args, context) =>
      Either.match(where(args.path), {
        onLeft: (error) => Effect.succeed(failed(error, "invalid_arguments")),
        onRight: (resolved) =>
          Effect.gen(function*() {
            const expiresAt = Math.floor(Date.now() / 1000) + presentSeconds
            const pin = yield* volumes.pin(tenantId, resolved.volumeId, resolved.path, expiresAt)
            const link = yield* downloads.link(pin)
            const presented = {
              path: resolved.shown,
              name: pin.name,
              size: pin.size,
              contentType: pin.contentType,
              url: link.url,
              expiresAt: link.expiresAt
            }
            yield* context.emit({ type: "file_presented", toolCallId: context.toolCallId, file: presented })
            const result: ToolResult = {
              ...text(`presented ${resolved.shown} (${pin.contentType}, ${pin.size} bytes)`),
              presented
            }
            return result
          }).pipe(refused)
      })
  }

  return { all: [read, write, edit, ls, glob, grep, present], presentOnly: [present] } as const
}
