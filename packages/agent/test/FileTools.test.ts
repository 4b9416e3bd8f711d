/**
 * The model's file tools against real storage (volumes on the embedded
 * PostgreSQL), called as a turn calls them: every path rule, read-only
 * mounts, subpath confinement, paging through a large file, edits that must
 * be exact, two agents editing one shared file at once, and present_file's
 * signed link.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { Agent as AgentSchemas } from "@agent-runtime/domain"
import { Downloads, FileMigrations, Volumes } from "@agent-runtime/files"
import { Database, SealedSecret } from "@agent-runtime/store"
import { AgentFixtures, TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Redacted, TestServices } from "effect"
import * as Crypto from "node:crypto"
import * as FileTools from "../src/FileTools.ts"
import type { ToolResult } from "../src/ToolResult.ts"

const FilesLive = AgentFixtures.layerFiles.pipe(
  Layer.provideMerge(SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))),
  Layer.provideMerge(Layer.unwrapEffect(
    Effect.map(TestDatabase.make, (url) =>
      Database.layerClient(Redacted.make(url), {
        migrations: [AccountsMigrations.migrations, FileMigrations.migrations]
      }))
  ))
)

const emitted: Array<Record<string, unknown>> = []
const context = (toolCallId: string) => ({
  toolCallId,
  update: () => Effect.void,
  emit: (event: Record<string, unknown>) => Effect.sync(() => void emitted.push(event)),
  aborting: () => false
})

const textOf = (result: ToolResult) => result.content.map((part) => part.text).join("")

/** A tenant with a workspace volume and a shared one, and the tools of an agent mounting them as given. */
const setup = (name: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tenantId = `tn_${name}`
    yield* sql`INSERT INTO tenants (id, name) VALUES (${tenantId}, ${name})`
    const volumes = yield* Volumes.Volumes
    const downloads = yield* Downloads.Downloads
    const workspace = yield* volumes.create(tenantId, { agentId: `client_${name}` })
    const shared = yield* volumes.create(tenantId, { name: "shared" })
    const toolsOf = (agentId: string, mounts: ReadonlyArray<AgentSchemas.Mount>) => {
      const tools = FileTools.make(volumes, downloads, { tenantId, agentId, mounts }).all
      const call = (tool: string, args: Record<string, unknown>) =>
        tools.find((candidate) => candidate.name === tool)!.execute(args, context(`call_${tool}`))
      return { tools, call }
    }
    const mounts = [
      new AgentSchemas.Mount({ volumeId: workspace.id, path: "/workspace", mode: "rw" }),
      new AgentSchemas.Mount({ volumeId: shared.id, path: "/shared", mode: "ro" })
    ]
    return { tenantId, volumes, downloads, workspace, shared, toolsOf, ...toolsOf(`client_${name}`, mounts) }
  })

layer(FilesLive, { timeout: 60_000 })("file tools", (it) => {
  it.effect("paths that leave a mount or could mean another are refused, and nothing is written", () =>
    Effect.gen(function*() {
      const { call, tenantId, volumes, workspace } = yield* setup("paths")
      const refused = [
        "../etc/passwd",
        "/workspace/../etc/passwd",
        "/workspace/a/../../b",
        "/etc/passwd",
        "/",
        "/workspace",
        "/workspace/a\u0000b",
        "/workspace/\uFF0E\uFF0E/x",
        "/workspace/a\u2215b",
        "/workspace/a\\b",
        "/workspace//x",
        "/workspace/./x",
        "/workspacex/y",
        "a\nb"
      ]
      for (const path of refused) {
        const written = yield* call("write", { path, content: "x" })
        expect(written.isError, `${JSON.stringify(path)}: ${textOf(written)}`).toBe(true)
        expect(written.code).toBe("invalid_arguments")
        const read = yield* call("read", { path })
        expect(read.isError).toBe(true)
      }
      expect((yield* volumes.files(tenantId, workspace.id, { prefix: "", limit: 100 })).data).toEqual([])
      // A name made of decomposed characters is the same file as its composed form.
      yield* call("write", { path: "cafe\u0301.txt", content: "one" })
      const read = yield* call("read", { path: "/workspace/caf\u00e9.txt" })
      expect(textOf(read)).toContain("one")
    }))

  it.effect("a read-only mount refuses writes and edits; a subpath mount sees only its directory", () =>
    Effect.gen(function*() {
      const { call, shared, tenantId, toolsOf, volumes } = yield* setup("modes")
      yield* volumes.write(tenantId, shared.id, "docs/guide.md", new TextEncoder().encode("hello"))
      yield* volumes.write(tenantId, shared.id, "secret/key.txt", new TextEncoder().encode("s3cret"))
      expect(textOf(yield* call("read", { path: "/shared/docs/guide.md" }))).toContain("hello")
      const write = yield* call("write", { path: "/shared/docs/guide.md", content: "changed" })
      expect(write.isError).toBe(true)
      expect(textOf(write)).toContain("read-only")
      const edit = yield* call("edit", { path: "/shared/docs/guide.md", old_string: "hello", new_string: "bye" })
      expect(edit.isError).toBe(true)
      expect(new TextDecoder().decode((yield* volumes.read(tenantId, shared.id, "docs/guide.md")).bytes)).toBe("hello")

      const confined = toolsOf("client_confined", [
        new AgentSchemas.Mount({ volumeId: shared.id, path: "/docs", mode: "rw", subpath: "docs" })
      ])
      expect(textOf(yield* confined.call("read", { path: "/docs/guide.md" }))).toContain("hello")
      for (const path of ["/docs/../secret/key.txt", "/secret/key.txt", "/docs/secret/key.txt"]) {
        const read = yield* confined.call("read", { path })
        expect(read.isError, path).toBe(true)
        expect(textOf(read)).not.toContain("s3cret")
      }
      expect(textOf(yield* confined.call("ls", { path: "/docs" }))).not.toContain("secret")
      expect(textOf(yield* confined.call("grep", { pattern: "s3cret", path: "/docs" }))).toContain("no line matches")
      const wrote = yield* confined.call("write", { path: "/docs/new.md", content: "n" })
      expect(wrote.written?.path).toBe("/docs/new.md")
      expect((yield* volumes.stat(tenantId, shared.id, "docs/new.md")).size).toBe(1)
    }))

  it.effect("a large file is read in pages of lines; write, edit, ls, glob and grep", () =>
    Effect.gen(function*() {
      const { call } = yield* setup("tools")
      // About 3.3 MB: more than one chunk, so pages are read by ranges.
      const lines = Array.from({ length: 60_000 }, (_, i) => `line ${i + 1} ${"x".repeat(48)}`)
      const wrote = yield* call("write", { path: "big.txt", content: lines.join("\n") })
      expect(wrote.written).toMatchObject({ path: "/workspace/big.txt", version: 1 })
      const first = textOf(yield* call("read", { path: "big.txt" }))
      expect(first).toContain("lines 1-2000; more follow: read with offset 2001")
      expect(first).toContain("     1\tline 1 ")
      expect(first).not.toContain("line 2001 ")
      const deep = textOf(yield* call("read", { path: "big.txt", offset: 59_990, limit: 20 }))
      expect(deep).toContain("lines 59990-60000")
      expect(deep).toContain(" 60000\tline 60000 ")
      expect(deep).not.toContain("more follow")

      yield* call("write", { path: "src/a.ts", content: "export const a = 1\nexport const b = 2\n" })
      yield* call("write", { path: "src/lib/b.ts", content: "const b = 2\n" })
      yield* call("write", { path: "notes.md", content: "b is two" })
      const missing = yield* call("edit", { path: "src/a.ts", old_string: "const c", new_string: "const d" })
      expect(missing.isError).toBe(true)
      expect(textOf(missing)).toContain("not found")
      const twice = yield* call("edit", { path: "src/a.ts", old_string: "export const", new_string: "const" })
      expect(twice.isError).toBe(true)
      expect(textOf(twice)).toContain("found 2 times")
      const edited = yield* call("edit", { path: "src/a.ts", old_string: "a = 1", new_string: "a = 10" })
      expect(edited.written).toMatchObject({ path: "/workspace/src/a.ts", version: 2 })
      const all = yield* call("edit", {
        path: "src/a.ts",
        old_string: "export const",
        new_string: "const",
        replace_all: true
      })
      expect(textOf(all)).toContain("2 replacements")
      expect(textOf(yield* call("read", { path: "src/a.ts" }))).toContain("const a = 10")

      const listing = textOf(yield* call("ls", {}))
      expect(listing).toContain("big.txt")
      expect(listing).toContain("notes.md\t8 bytes")
      expect(listing).toContain("src/")
      expect(listing).not.toContain("a.ts")
      expect(textOf(yield* call("ls", { path: "/" }))).toContain("/shared (ro)")
      expect(textOf(yield* call("glob", { pattern: "**/*.ts" })).split("\n")).toEqual([
        "/workspace/src/a.ts",
        "/workspace/src/lib/b.ts"
      ])
      const found = textOf(yield* call("grep", { pattern: "b = 2", glob: "**/*.ts" }))
      expect(found).toContain("/workspace/src/a.ts:2: const b = 2")
      expect(found).toContain("/workspace/src/lib/b.ts:1: const b = 2")
      expect(found).not.toContain("notes.md")
    }))

  it.effect("two agents editing one shared file at once: every edit lands, by version", () =>
    Effect.gen(function*() {
      const { shared, tenantId, toolsOf, volumes } = yield* setup("shared")
      const rows = Array.from({ length: 40 }, (_, i) => `row ${i}: todo`)
      yield* volumes.write(tenantId, shared.id, "board.txt", new TextEncoder().encode(rows.join("\n")))
      const mount = [new AgentSchemas.Mount({ volumeId: shared.id, path: "/shared", mode: "rw" })]
      const agents = [toolsOf("client_one", mount), toolsOf("client_two", mount)]
      // Each agent marks its own 20 rows done, one edit after another (edit is a sequential tool), both at once.
      // Live: an edit that meets a newer version waits a few real milliseconds before it tries again.
      const results = (yield* TestServices.provideLive(Effect.forEach(
        agents,
        (agent, which) =>
          Effect.forEach(rows.map((_, i) => i).filter((i) => i % 2 === which), (i) =>
            agent.call("edit", {
              path: "/shared/board.txt",
              old_string: `row ${i}: todo`,
              new_string: `row ${i}: done by ${which}`
            })),
        { concurrency: "unbounded" }
      ))).flat()
      for (const result of results) expect(result.isError, textOf(result)).toBe(false)
      const board = new TextDecoder().decode((yield* volumes.read(tenantId, shared.id, "board.txt")).bytes)
      expect(board.split("\n")).toEqual(rows.map((_, i) => `row ${i}: done by ${i % 2}`))
      expect((yield* volumes.stat(tenantId, shared.id, "board.txt")).version).toBe(41)
    }))

  it.effect("present_file pins the content and emits file_presented with a signed link that opens once", () =>
    Effect.gen(function*() {
      const { call, downloads, tenantId, volumes, workspace } = yield* setup("present")
      yield* call("write", { path: "report.csv", content: "a,b\n1,2\n" })
      emitted.length = 0
      const presented = yield* call("present_file", { path: "report.csv" })
      expect(presented.presented).toMatchObject({ path: "/workspace/report.csv", name: "report.csv", size: 8 })
      expect(emitted).toEqual([{ type: "file_presented", toolCallId: "call_present_file", file: presented.presented }])
      // Written again after it was presented: the link still gives what was presented.
      yield* volumes.write(tenantId, workspace.id, "report.csv", new TextEncoder().encode("changed"))
      const url = new URL(presented.presented!.url)
      const id = decodeURIComponent(url.pathname.split("/").pop()!)
      const expires = url.searchParams.get("expires")!
      const signature = url.searchParams.get("signature")!
      const opened = yield* downloads.open(id, expires, signature)
      expect(new TextDecoder().decode(opened.bytes)).toBe("a,b\n1,2\n")
      // Any change to the link is refused.
      const tampered = [
        downloads.open(id, String(Number(expires) + 1), signature),
        downloads.open(`${id}x`, expires, signature),
        downloads.open(id, expires, `${signature.slice(0, -2)}AA`),
        downloads.open(id, expires, "")
      ]
      for (const attempt of tampered) expect((yield* Effect.flip(attempt))._tag).toBe("Forbidden")
      // A link past its time is refused even when genuine.
      const past = yield* volumes.pin(tenantId, workspace.id, "report.csv", Math.floor(Date.now() / 1000) - 1)
      const old = new URL((yield* downloads.link(past)).url)
      const gone = yield* Effect.flip(
        downloads.open(past.id, old.searchParams.get("expires")!, old.searchParams.get("signature")!)
      )
      expect(gone._tag).toBe("Gone")
      const outside = yield* call("present_file", { path: "/etc/passwd" })
      expect(outside.isError).toBe(true)
    }))

  it.effect("a database fault is no refusal: the call dies (the turn resumes from the journal), the model reads nothing", () =>
    Effect.gen(function*() {
      const { call } = yield* setup("dbfault")
      const sql = yield* SqlClient.SqlClient
      yield* sql`ALTER TABLE volume_files RENAME TO volume_files_away`
      const outcomes = yield* Effect.forEach(
        [
          call("write", { path: "notes.md", content: "hello" }),
          call("read", { path: "notes.md" }),
          call("ls", { path: "/workspace" })
        ],
        (attempt) => Effect.exit(attempt)
      ).pipe(Effect.ensuring(Effect.orDie(sql`ALTER TABLE volume_files_away RENAME TO volume_files`)))
      for (const exit of outcomes) {
        expect(Exit.isFailure(exit) && Cause.isDie(exit.cause), JSON.stringify(exit)).toBe(true)
      }
      // And once the database answers again, the same call is a plain answer.
      expect((yield* call("write", { path: "notes.md", content: "hello" })).isError).toBe(false)
    }))
})
