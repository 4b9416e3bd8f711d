/**
 * Volumes on a real database: bytes across chunks and ranges, versions and
 * conditional writes (also raced), the path rules, tenants kept apart,
 * copy-on-write forks, the quota and its counters, listings, content types,
 * pins, and the sweep of chunks nothing names.
 */
import { ContentStore, ContentType, FileMigrations, Volumes } from "@agent-runtime/files"
import { Database, DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Redacted } from "effect"
import * as Crypto from "node:crypto"

const tenantId = "tn_files"
const otherTenant = "tn_other"
const MiB = ContentStore.chunkSize

/** What the service asked of the content store, and a step to run before its next `get`. */
const spy: { gets: Array<number>; beforeGet: Effect.Effect<void> | undefined } = { gets: [], beforeGet: undefined }

const spiedStore = Layer.effect(
  ContentStore.ContentStore,
  Effect.map(ContentStore.make, (store) =>
    ContentStore.ContentStore.of({
      ...store,
      get: (hashes) =>
        Effect.suspend(() => {
          spy.gets.push(hashes.length)
          const before = spy.beforeGet ?? Effect.void
          spy.beforeGet = undefined
          return Effect.zipRight(before, store.get(hashes))
        })
    }))
)

const layerFor = (databaseUrl: string, options: Volumes.Options) =>
  Volumes.layer(options).pipe(
    Layer.provideMerge(spiedStore),
    Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
      migrations: [TestDatabase.tenantsStandIn, FileMigrations.migrations]
    }))
  )

/** Runs `body` on a fresh database holding two tenants. */
const scenario = <A, E>(
  options: Volumes.Options,
  body: (services: {
    readonly volumes: Volumes.Volumes["Type"]
    readonly store: ContentStore.ContentStore["Type"]
    readonly sql: SqlClient.SqlClient
  }) => Effect.Effect<A, E, SqlClient.SqlClient | ContentStore.ContentStore>
) =>
  Effect.gen(function*() {
    spy.gets = []
    spy.beforeGet = undefined
    const databaseUrl = yield* TestDatabase.make
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO tenants (id, name) VALUES (${tenantId}, 'files'), (${otherTenant}, 'other')`
      return yield* body({ volumes: yield* Volumes.Volumes, store: yield* ContentStore.ContentStore, sql })
    }).pipe(Effect.provide(layerFor(databaseUrl, options)))
  })

const text = (value: string) => new TextEncoder().encode(value)
const decoded = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

const chunkCount = (sql: SqlClient.SqlClient) =>
  Effect.map(sql<{ count: number }>`SELECT count(*)::int AS count FROM file_chunks`, ([row]) => row!.count)

const usage = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ files: number; bytes: number }>`SELECT files::float8 AS files, bytes::float8 AS bytes FROM file_usage
      WHERE tenant_id = ${tenantId}`,
    ([row]) => row ?? { files: 0, bytes: 0 }
  )

it.live("a file reads back whole and by ranges, across chunk boundaries, fetching only the chunks a range covers", () =>
  scenario({}, ({ volumes }) =>
    Effect.gen(function*() {
      const volume = yield* volumes.create(tenantId, { name: "data" })
      const small = yield* volumes.write(tenantId, volume.id, "/notes/hello.txt", text("hello"), { by: "api" })
      expect(small).toMatchObject({ path: "notes/hello.txt", version: 1, size: 5, by: "api" })
      expect(decoded((yield* volumes.read(tenantId, volume.id, "notes/hello.txt")).bytes)).toBe("hello")
      expect(yield* volumes.stat(tenantId, volume.id, "/notes/hello.txt")).toEqual(small)

      const big = Crypto.randomBytes(5 * MiB + 123)
      const file = yield* volumes.write(tenantId, volume.id, "big.bin", big)
      expect(file.size).toBe(big.length)
      spy.gets = []
      expect(Buffer.compare((yield* volumes.read(tenantId, volume.id, "big.bin")).bytes, big)).toBe(0)
      const ranges: ReadonlyArray<readonly [offset: number, length: number, chunks: number]> = [
        [0, MiB, 1],
        [MiB - 10, 20, 2],
        [MiB, MiB, 1],
        [MiB - 1, MiB + 2, 3],
        [2 * MiB + 7, 3, 1],
        [5 * MiB, 1000, 1],
        [big.length - 5, 100, 1]
      ]
      for (const [offset, length] of ranges) {
        const { bytes } = yield* volumes.read(tenantId, volume.id, "big.bin", { offset, length })
        expect(Buffer.compare(bytes, big.subarray(offset, offset + length)), `${offset}+${length}`).toBe(0)
      }
      expect(spy.gets).toEqual([6, ...ranges.map(([, , chunks]) => chunks)])
      for (const [offset, length] of [[big.length, 10], [big.length + 100, 10], [3, 0]]) {
        expect((yield* volumes.read(tenantId, volume.id, "big.bin", { offset: offset!, length: length! })).bytes.length)
          .toBe(0)
      }
      const empty = yield* volumes.write(tenantId, volume.id, "empty", new Uint8Array(0))
      expect(empty.size).toBe(0)
      expect((yield* volumes.read(tenantId, volume.id, "empty")).bytes.length).toBe(0)
      expect(yield* volumes.get(tenantId, volume.id)).toMatchObject({ files: 3, bytes: 5 + big.length })
    })))

it.live("every write makes the next version; ifVersion makes it conditional", () =>
  scenario({}, ({ volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      expect((yield* volumes.write(tenantId, id, "a.md", text("1"), { ifVersion: 0 })).version).toBe(1)
      expect((yield* volumes.write(tenantId, id, "a.md", text("2"))).version).toBe(2)
      expect((yield* volumes.write(tenantId, id, "a.md", text("3"), { ifVersion: 2 })).version).toBe(3)
      expect(yield* Effect.flip(volumes.write(tenantId, id, "a.md", text("x"), { ifVersion: 0 }))).toMatchObject({
        _tag: "Conflict",
        error: "a.md already exists, at version 3"
      })
      expect(yield* Effect.flip(volumes.write(tenantId, id, "a.md", text("x"), { ifVersion: 2 }))).toMatchObject({
        _tag: "Conflict",
        error: "a.md is at version 3, not 2"
      })
      expect(yield* Effect.flip(volumes.write(tenantId, id, "new.md", text("x"), { ifVersion: 1 }))).toMatchObject({
        _tag: "Conflict",
        error: "new.md is at version 0, not 1"
      })
      expect(decoded((yield* volumes.read(tenantId, id, "a.md")).bytes)).toBe("3")
      expect(yield* Effect.flip(volumes.stat(tenantId, id, "new.md"))).toMatchObject({ _tag: "NotFound" })
      expect(yield* Effect.flip(volumes.removeFile(tenantId, id, "a.md", { ifVersion: 2 }))).toMatchObject({
        _tag: "Conflict"
      })
      expect((yield* volumes.removeFile(tenantId, id, "a.md", { ifVersion: 3 })).version).toBe(3)
      expect((yield* volumes.write(tenantId, id, "a.md", text("again"), { ifVersion: 0 })).version).toBe(1)
    })))

it.live("two writers with the same ifVersion: exactly one wins, the other is a Conflict", () =>
  scenario({}, ({ volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, id, "race.txt", text("start"))
      for (let round = 1; round <= 10; round++) {
        const results = yield* Effect.all(
          ["left", "right"].map((writer) =>
            Effect.either(volumes.write(tenantId, id, "race.txt", text(`${writer} ${round}`), { ifVersion: round }))
          ),
          { concurrency: "unbounded" }
        )
        expect(results.filter(Either.isRight)).toHaveLength(1)
        expect(results.filter(Either.isLeft).map((result) => result.left._tag)).toEqual(["Conflict"])
        const winner = results.find(Either.isRight)!.right
        expect(winner.version).toBe(round + 1)
        expect(decoded((yield* volumes.read(tenantId, id, "race.txt")).bytes)).toMatch(new RegExp(` ${round}$`))
      }
      expect(yield* volumes.get(tenantId, id)).toMatchObject({ files: 1 })
    })))

it.live("paths that could mean something else are refused and write nothing", () =>
  scenario({}, ({ sql, volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      // U+2024 (one dot leader) is "." under NFKC, U+2025 (two dot leader) "..": both read as dots to some tools.
      expect("\u2024\u2024".normalize("NFKC")).toBe("..")
      const refused = [
        "..",
        "/../x",
        "a/../../x",
        "./x",
        "//x",
        "a//b",
        "a/",
        "",
        "/",
        "a\u0000b",
        "a\\b",
        "\uFF0E\uFF0E/x",
        "\u2024\u2024/x",
        "\u2025",
        "a\u2215b",
        "a\u2044b",
        "a\uFF0Fb",
        "line\nbreak",
        "x".repeat(256)
      ]
      for (const path of refused) {
        const write = yield* Effect.flip(volumes.write(tenantId, id, path, text("x")))
        expect(write, JSON.stringify(path)).toMatchObject({
          _tag: "InvalidRequest",
          error: expect.stringMatching(/^path /)
        })
        expect((yield* Effect.flip(volumes.read(tenantId, id, path)))._tag).toBe("InvalidRequest")
      }
      expect((yield* Effect.flip(volumes.files(tenantId, id, { prefix: "../", limit: 10 })))._tag).toBe(
        "InvalidRequest"
      )
      expect(yield* sql`SELECT 1 FROM volume_files`).toEqual([])
      expect(yield* chunkCount(sql)).toBe(0)
      // Only a name: a leading slash is dropped, and a name that looks like a link or device is one.
      expect((yield* volumes.write(tenantId, id, "/dev/null", text("x"))).path).toBe("dev/null")
      // Stored in NFC: the decomposed é names the same file as the composed one.
      yield* volumes.write(tenantId, id, "cafe\u0301.txt", text("1"))
      expect((yield* volumes.write(tenantId, id, "caf\u00e9.txt", text("2"))).version).toBe(2)
    })))

it.live("another tenant's volume looks like none, whatever it asks", () =>
  scenario({}, ({ sql, volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, id, "secret.txt", text("mine"))
      const chunks = yield* chunkCount(sql)
      const notFound = { _tag: "NotFound", error: `no volume ${id}` }
      expect(yield* Effect.flip(volumes.get(otherTenant, id))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.stat(otherTenant, id, "secret.txt"))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.read(otherTenant, id, "secret.txt"))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.write(otherTenant, id, "secret.txt", text("theirs")))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.write(otherTenant, id, "new.txt", text("new bytes")))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.files(otherTenant, id, { prefix: "", limit: 10 }))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.fork(otherTenant, id, {}))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.removeFile(otherTenant, id, "secret.txt"))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.pin(otherTenant, id, "secret.txt", 2_000_000_000))).toMatchObject(notFound)
      expect(yield* Effect.flip(volumes.remove(otherTenant, id))).toMatchObject(notFound)
      expect((yield* volumes.list(otherTenant, {})).data).toEqual([])
      // Nothing changed, nothing stored, no usage row made for the other tenant.
      expect(decoded((yield* volumes.read(tenantId, id, "secret.txt")).bytes)).toBe("mine")
      expect(yield* chunkCount(sql)).toBe(chunks)
      expect(yield* sql`SELECT tenant_id FROM file_usage`).toEqual([{ tenantId }])
      expect(yield* sql`SELECT 1 FROM volumes`).toHaveLength(1)
    })))

it.live("a fork shares its source's bytes and is apart from it both ways", () =>
  scenario({}, ({ sql, volumes }) =>
    Effect.gen(function*() {
      const source = yield* volumes.create(tenantId, { name: "source" })
      yield* volumes.write(tenantId, source.id, "a.txt", text("a"))
      yield* volumes.write(tenantId, source.id, "b.txt", text("b"), { by: "agent:ag_1" })
      yield* volumes.write(tenantId, source.id, "big.bin", Crypto.randomBytes(3 * MiB))
      const chunks = yield* chunkCount(sql)
      const before = yield* usage(sql)

      const fork = yield* volumes.fork(tenantId, source.id, { name: "copy", agentId: "ag_2" })
      expect(fork).toMatchObject({ name: "copy", agentId: "ag_2", forkedFrom: source.id, files: 3 })
      expect(fork.bytes).toBe((yield* volumes.get(tenantId, source.id)).bytes)
      expect(yield* chunkCount(sql)).toBe(chunks)
      expect(yield* usage(sql)).toEqual({ files: before.files * 2, bytes: before.bytes * 2 })
      const listed = (yield* volumes.files(tenantId, fork.id, { prefix: "", limit: 10 })).data
      expect(listed).toEqual((yield* volumes.files(tenantId, source.id, { prefix: "", limit: 10 })).data)

      yield* volumes.write(tenantId, fork.id, "a.txt", text("fork's a"))
      yield* volumes.write(tenantId, fork.id, "only-fork.txt", text("f"))
      yield* volumes.write(tenantId, source.id, "b.txt", text("source's b"))
      yield* volumes.removeFile(tenantId, source.id, "big.bin")
      expect(decoded((yield* volumes.read(tenantId, source.id, "a.txt")).bytes)).toBe("a")
      expect(decoded((yield* volumes.read(tenantId, fork.id, "a.txt")).bytes)).toBe("fork's a")
      expect(decoded((yield* volumes.read(tenantId, fork.id, "b.txt")).bytes)).toBe("b")
      expect((yield* volumes.stat(tenantId, fork.id, "a.txt")).version).toBe(2)
      expect((yield* Effect.flip(volumes.stat(tenantId, source.id, "only-fork.txt")))._tag).toBe("NotFound")
      expect((yield* volumes.read(tenantId, fork.id, "big.bin")).bytes.length).toBe(3 * MiB)
      expect(yield* volumes.get(tenantId, source.id)).toMatchObject({ files: 2, bytes: 1 + 10 })
      expect(yield* volumes.get(tenantId, fork.id)).toMatchObject({ files: 4, bytes: 8 + 1 + 3 * MiB + 1 })
    })))

it.live("the quota and the file size limit refuse a write, or a fork, and change nothing", () =>
  scenario({ quotaBytes: 2 * MiB, maxFileBytes: MiB + 200 }, ({ sql, volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      const tooBig = yield* Effect.flip(volumes.write(tenantId, id, "huge", new Uint8Array(MiB + 201)))
      expect(tooBig).toMatchObject({ _tag: "TooLarge", error: expect.stringContaining(`${MiB + 200}`) })
      expect(yield* chunkCount(sql)).toBe(0)

      yield* volumes.write(tenantId, id, "one", new Uint8Array(MiB).fill(1))
      const other = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, other.id, "two", new Uint8Array(MiB - 100).fill(2))
      const chunks = yield* chunkCount(sql)
      const over = yield* Effect.flip(volumes.write(tenantId, other.id, "three", new Uint8Array(101).fill(3)))
      expect(over).toMatchObject({ _tag: "TooLarge", error: expect.stringContaining(`quota of ${2 * MiB}`) })
      expect((yield* Effect.flip(volumes.stat(tenantId, other.id, "three")))._tag).toBe("NotFound")
      // Its chunk was put before the quota refused it; nothing names it, so the sweep takes it.
      expect(yield* chunkCount(sql)).toBe(chunks + 1)
      expect(yield* usage(sql)).toEqual({ files: 2, bytes: 2 * MiB - 100 })
      // Growing a file over the quota is refused too; the same size or smaller is not.
      expect((yield* Effect.flip(volumes.write(tenantId, id, "one", new Uint8Array(MiB + 101))))._tag).toBe("TooLarge")
      expect((yield* volumes.write(tenantId, id, "one", new Uint8Array(MiB + 100))).version).toBe(2)
      expect((yield* Effect.flip(volumes.fork(tenantId, other.id, {})))._tag).toBe("TooLarge")
      expect((yield* volumes.write(tenantId, id, "one", text("small"))).version).toBe(3)
      expect((yield* volumes.list(tenantId, {})).data).toHaveLength(2)
      expect(yield* usage(sql)).toEqual({ files: 2, bytes: MiB - 100 + 5 })
      expect((yield* volumes.fork(tenantId, other.id, {})).bytes).toBe(MiB - 100)
    })))

it.live("removing a file or a volume gives its bytes back", () =>
  scenario({}, ({ sql, volumes }) =>
    Effect.gen(function*() {
      const first = yield* volumes.create(tenantId, {})
      const second = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, first.id, "a", new Uint8Array(1000))
      yield* volumes.write(tenantId, first.id, "b", new Uint8Array(200))
      yield* volumes.write(tenantId, second.id, "c", new Uint8Array(30))
      expect(yield* usage(sql)).toEqual({ files: 3, bytes: 1230 })
      expect(yield* volumes.removeFile(tenantId, first.id, "/a")).toMatchObject({ path: "a", size: 1000, version: 1 })
      expect(yield* Effect.flip(volumes.removeFile(tenantId, first.id, "a"))).toMatchObject({
        _tag: "NotFound",
        error: `no file a in ${first.id}`
      })
      expect(yield* usage(sql)).toEqual({ files: 2, bytes: 230 })
      expect(yield* volumes.get(tenantId, first.id)).toMatchObject({ files: 1, bytes: 200 })
      expect(yield* volumes.remove(tenantId, first.id)).toEqual({ id: first.id, deleted: true })
      expect((yield* Effect.flip(volumes.remove(tenantId, first.id)))._tag).toBe("NotFound")
      expect((yield* Effect.flip(volumes.read(tenantId, first.id, "b")))._tag).toBe("NotFound")
      expect(yield* usage(sql)).toEqual({ files: 1, bytes: 30 })
      expect(yield* sql`SELECT volume_id FROM volume_files`).toEqual([{ volumeId: second.id }])
    })))

it.live("files list under a directory in byte order, by pages; volumes list by id, by pages", () =>
  scenario({}, ({ volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      const paths = [
        "docs",
        "docs-old/x.md",
        "docs/a.md",
        "docs/b/c.md",
        "docs/z\u00e9.md",
        "docs/\u{1F600}.md",
        "docs/\uFFFD.md",
        "docs/\u{10FFFF}",
        "docs0/y.md",
        "docsa.md",
        "readme.md"
      ]
      for (const path of paths) yield* volumes.write(tenantId, id, path, text(path))
      const under = (prefix: string, after?: string, limit = 100) =>
        Effect.map(volumes.files(tenantId, id, { prefix, after, limit }), (page) => ({
          paths: page.data.map((file) => file.path),
          next: page.next
        }))
      const docs = [
        "docs/a.md",
        "docs/b/c.md",
        "docs/z\u00e9.md",
        "docs/\uFFFD.md",
        "docs/\u{1F600}.md",
        "docs/\u{10FFFF}"
      ]
      expect(yield* under("docs/")).toEqual({ paths: docs, next: null })
      expect(yield* under("/docs")).toEqual({ paths: docs, next: null })
      expect(yield* under("docs/b")).toEqual({ paths: ["docs/b/c.md"], next: null })
      expect(yield* under("nothing")).toEqual({ paths: [], next: null })
      const bytewise = [...paths].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      expect(yield* under("")).toEqual({ paths: bytewise, next: null })
      expect(yield* under("", undefined, 4)).toEqual({ paths: bytewise.slice(0, 4), next: bytewise[3] })
      const first = yield* under("docs/", undefined, 4)
      expect(first).toEqual({ paths: docs.slice(0, 4), next: docs[3] })
      expect(yield* under("docs/", first.next!, 4)).toEqual({ paths: docs.slice(4), next: null })
      expect(yield* under("docs/", docs[5], 4)).toEqual({ paths: [], next: null })

      const made = [id]
      for (let i = 0; i < 4; i++) made.push((yield* volumes.create(tenantId, { name: `v${i}` })).id)
      yield* volumes.create(otherTenant, {})
      // In id order: ids made within one millisecond sort by their random part.
      made.sort()
      const page = yield* volumes.list(tenantId, { limit: 3 })
      expect(page.data.map((volume) => volume.id)).toEqual(made.slice(0, 3))
      expect(page.next).toBe(made[2])
      const rest = yield* volumes.list(tenantId, { limit: 3, after: page.next! })
      expect(rest.data.map((volume) => volume.id)).toEqual(made.slice(3))
      expect(rest.next).toBeNull()
      expect([...page.data, ...rest.data].find((volume) => volume.name === "v2")).toMatchObject({
        files: 0,
        bytes: 0,
        agentId: null,
        forkedFrom: null
      })
    })))

it.live("a content type is kept as given, else sniffed from the first bytes and the name", () =>
  scenario({}, ({ volumes }) =>
    Effect.gen(function*() {
      const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13])
      const { id } = yield* volumes.create(tenantId, {})
      expect((yield* volumes.write(tenantId, id, "notes.md", text("# Hi"))).contentType).toBe(
        "text/markdown; charset=utf-8"
      )
      expect((yield* volumes.write(tenantId, id, "image.txt", png)).contentType).toBe("image/png")
      expect((yield* volumes.write(tenantId, id, "x.bin", png, { contentType: "application/x-mine" })).contentType)
        .toBe("application/x-mine")
      const cases: ReadonlyArray<readonly [name: string, bytes: Uint8Array, type: string]> = [
        ["a.png", png, "image/png"],
        ["photo", Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10]), "image/jpeg"],
        ["anim.gif", Buffer.from("GIF89a\x01\x00", "latin1"), "image/gif"],
        ["pic", Buffer.concat([Buffer.from("RIFF\x10\x00\x00\x00WEBPVP8 ", "latin1")]), "image/webp"],
        ["paper.txt", Buffer.from("%PDF-1.7\n%\xe2\xe3\xcf\xd3", "latin1"), "application/pdf"],
        ["archive", Buffer.from([0x50, 0x4b, 0x03, 0x04, 0x14, 0]), "application/zip"],
        [
          "report.docx",
          Buffer.from([0x50, 0x4b, 0x03, 0x04, 0x14, 0]),
          "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
        ],
        ["logs.gz", Buffer.from([0x1f, 0x8b, 0x08, 0]), "application/gzip"],
        ["data.json", text('{"a": "é"}'), "application/json; charset=utf-8"],
        ["table.csv", text("a,b\n1,2\n"), "text/csv; charset=utf-8"],
        ["page.html", text("<p>hi</p>"), "text/html; charset=utf-8"],
        ["main.py", text("print('hi')"), "text/x-python; charset=utf-8"],
        ["icon.svg", text("<svg/>"), "image/svg+xml; charset=utf-8"],
        ["Makefile", text("all:\n\ttrue\n"), "text/plain; charset=utf-8"],
        ["fake.png", text("not really a png"), "text/plain; charset=utf-8"],
        ["x.constructor", text("hi"), "text/plain; charset=utf-8"],
        ["latin1.txt", Buffer.from("caf\xe9", "latin1"), "application/octet-stream"],
        ["nul.txt", Buffer.from("a\u0000b"), "application/octet-stream"],
        ["song.mp3", Buffer.from([0xff, 0xfb, 0x90, 0x00]), "audio/mpeg"],
        ["blob", Buffer.from([0, 1, 2, 0xff]), "application/octet-stream"]
      ]
      for (const [name, bytes, type] of cases) expect(ContentType.sniff(bytes, `dir/${name}`), name).toBe(type)
    })))

it.live("a pin keeps the content it was given, whatever is written after, until it expires", () =>
  scenario({}, ({ sql, volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, id, "out/report.csv", text("v1"))
      const expiresAt = Math.floor(Date.now() / 1000) + 3600
      const pinned = yield* volumes.pin(tenantId, id, "out/report.csv", expiresAt)
      expect(pinned).toMatchObject({ name: "report.csv", size: 2, contentType: "text/csv; charset=utf-8", expiresAt })
      expect(pinned.id).toMatch(/^pin_/)
      yield* volumes.write(tenantId, id, "out/report.csv", text("version two"))
      yield* Volumes.sweep(0)
      const read = yield* volumes.readPinned(pinned.id)
      expect(decoded(read.bytes)).toBe("v1")
      expect(read).toMatchObject({ id: pinned.id, name: "report.csv", size: 2, expiresAt })
      expect((yield* Effect.flip(volumes.pin(tenantId, id, "out/missing.csv", expiresAt)))._tag).toBe("NotFound")

      yield* sql`UPDATE file_pins SET expires_at = now() - interval '1 second'`
      expect(yield* Effect.flip(volumes.readPinned(pinned.id))).toMatchObject({
        _tag: "NotFound",
        error: `no pinned file ${pinned.id}`
      })
      yield* Volumes.sweep(0)
      expect(yield* sql`SELECT 1 FROM file_pins`).toEqual([])
      expect(decoded((yield* volumes.read(tenantId, id, "out/report.csv")).bytes)).toBe("version two")
    })))

it.live("the sweep removes the chunks nothing names, and only those", () =>
  scenario({}, ({ sql, store, volumes }) =>
    Effect.gen(function*() {
      const chunkRows = Effect.map(
        sql<{ hash: Buffer }>`SELECT hash FROM file_chunks`,
        (rows) => new Set(rows.map((row) => row.hash.toString("hex")))
      )
      const hashOf = (value: string) => ContentStore.hash(text(value)).toString("hex")
      const { id } = yield* volumes.create(tenantId, {})
      const other = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, id, "kept", text("kept"))
      yield* volumes.write(tenantId, id, "overwritten", text("old"))
      yield* volumes.write(tenantId, id, "overwritten", text("new"))
      yield* volumes.write(tenantId, id, "removed", text("gone"))
      yield* volumes.removeFile(tenantId, id, "removed")
      yield* volumes.write(tenantId, other.id, "shared", text("kept"))
      yield* volumes.write(tenantId, other.id, "pinned", text("pinned"))
      yield* volumes.pin(tenantId, other.id, "pinned", Math.floor(Date.now() / 1000) + 60)
      yield* volumes.write(tenantId, other.id, "pinned", text("after the pin"))
      yield* volumes.write(tenantId, other.id, "in the removed volume", text("volume"))
      yield* volumes.remove(tenantId, other.id)

      // With the usual grace, chunks put just now stay.
      expect(yield* Volumes.sweep(Volumes.sweepGrace)).toBe(0)
      expect(yield* store.sweep(new Date())).toBe(4)
      expect(yield* chunkRows).toEqual(new Set(["kept", "new", "pinned"].map(hashOf)))
      expect(decoded((yield* volumes.read(tenantId, id, "kept")).bytes)).toBe("kept")
      // A chunk put again is fresh again: the sweep's grace counts from its last put.
      yield* store.put([text("kept")])
      expect(yield* store.sweep(new Date(Date.now() - 60_000))).toBe(0)
    })))

it.live("a read racing an overwrite whose old chunks are swept reads the file anew", () =>
  scenario({}, ({ store, volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, id, "racy", text("before"))
      spy.beforeGet = volumes.write(tenantId, id, "racy", text("after")).pipe(
        Effect.zipRight(store.sweep(new Date())),
        Effect.asVoid,
        Effect.orDie
      )
      const read = yield* volumes.read(tenantId, id, "racy")
      expect(decoded(read.bytes)).toBe("after")
      expect(read.file.version).toBe(2)
    })))

it.live("a database fault is a PersistenceError, and a write it stops changes nothing", () =>
  scenario({}, ({ sql, store, volumes }) =>
    Effect.gen(function*() {
      const { id } = yield* volumes.create(tenantId, {})
      yield* volumes.write(tenantId, id, "kept.txt", text("version 1"))
      const before = yield* usage(sql)

      // The tenant's lock is taken inside the write's transaction: the write fails there, whole.
      yield* sql`ALTER TABLE file_usage RENAME TO file_usage_away`
      const stopped = yield* Effect.flip(volumes.write(tenantId, id, "kept.txt", text("version 2")))
      yield* sql`ALTER TABLE file_usage_away RENAME TO file_usage`
      expect(stopped).toBeInstanceOf(PersistenceError.PersistenceError)
      expect(DatabaseHealth.isPermanent(stopped)).toBe(true)
      const read = yield* volumes.read(tenantId, id, "kept.txt")
      expect([decoded(read.bytes), read.file.version]).toEqual(["version 1", 1])
      expect(yield* usage(sql)).toEqual(before)

      yield* sql`ALTER TABLE file_chunks RENAME TO file_chunks_away`
      yield* sql`ALTER TABLE file_pins RENAME TO file_pins_away`
      const failures = [
        yield* Effect.flip(volumes.read(tenantId, id, "kept.txt")),
        yield* Effect.flip(store.put([text("bytes")])),
        yield* Effect.flip(Volumes.sweep(Volumes.sweepGrace))
      ]
      yield* sql`ALTER TABLE volumes RENAME TO volumes_away`
      failures.push(
        yield* Effect.flip(volumes.get(tenantId, id)),
        yield* Effect.flip(volumes.list(tenantId, {})),
        yield* Effect.flip(volumes.create(tenantId, {}))
      )
      for (const failure of failures) expect(failure).toBeInstanceOf(PersistenceError.PersistenceError)
    })))
