/**
 * The volume and agent-file wire the camelRun client speaks, over real HTTP
 * on real PostgreSQL: files named by the rest of the URL, conditional writes,
 * ranges, snapshots (kept through later writes and the chunk sweep) and forks
 * of them, the change feed with its gap, signed links used without any
 * Authorization header, and an agent's files by the paths it sees, its
 * read-only mount refusing writes. Every route is also tried by another
 * tenant, and by another agent.
 */
import { ContentStore, Volumes } from "@agent-runtime/files"
import { Database } from "@agent-runtime/store"
import type { Http } from "@agent-runtime/testing"
import { TestWorld } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"

type Api = ReturnType<typeof Http.client>

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    const other = yield* TestWorld.tenantWithModel(world, `${name}-other`)
    const volume = (json: Record<string, unknown> = {}) =>
      Effect.map(api.post("/v1/volumes", { token, json }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body as { id: string }
      })
    return { world, api, token, other, volume }
  })

/** The path as the client puts it in a URL: each segment encoded. */
const encodePath = (path: string) => path.split("/").map(encodeURIComponent).join("/")

/** Bytes, which `fetch` sends with no Content-Type of its own (a string would go as text/plain). */
const put = (api: Api, token: string, volumeId: string, path: string, body: string, headers = {}) =>
  api.put(`/v1/volumes/${volumeId}/files/${encodePath(path)}`, { token, body: Buffer.from(body), headers })

/** Runs `effect` on the test database, as the node's services would. */
const onDatabase = <A, E>(url: string, effect: Effect.Effect<A, E, SqlClient.SqlClient | ContentStore.ContentStore>) =>
  effect.pipe(
    Effect.provide(ContentStore.layer.pipe(Layer.provideMerge(Database.layerClient(Redacted.make(url))))),
    Effect.scoped
  )

/** A link's URL as sent from anywhere: no Authorization header. */
const fetchLink = (url: string, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    return { status: response.status, headers: response.headers, text: await response.text() }
  })

layer(TestWorld.layer(), { excludeTestServices: true })("volume wire", (it) => {
  it.scoped("files by path: write, read, ranges, conditions, delete, list with glob and cursor", () =>
    Effect.gen(function*() {
      const { api, other, token, volume } = yield* setup("wire-files")
      const { id } = yield* volume({ name: "docs" })

      const written = yield* put(api, token, id, "notes/a b.md", "# hello", { "content-type": "text/markdown" })
      expect(written.status, written.text).toBe(200)
      expect(written.body).toMatchObject({ path: "notes/a b.md", version: 1, size: 7, contentType: "text/markdown" })
      expect(typeof written.body.updatedAt).toBe("number")

      const read = yield* api.get(`/v1/volumes/${id}/files/notes/a%20b.md`, { token })
      expect([read.status, read.text, read.headers.get("content-type")]).toEqual([200, "# hello", "text/markdown"])
      expect(read.headers.get("x-file-version")).toBe("1")
      const ranged = yield* api.get(`/v1/volumes/${id}/files/notes/a%20b.md`, {
        token,
        headers: { range: "bytes=2-4" }
      })
      expect([ranged.status, ranged.text, ranged.headers.get("content-range")]).toEqual([206, "hel", "bytes 2-4/7"])
      // The same file by the query route.
      expect((yield* api.get(`/v1/volumes/${id}/file?path=notes/a%20b.md`, { token })).text).toBe("# hello")

      // If-None-Match: * only creates; If-Match only at that version; refusals are 409 CONFLICT.
      const exists = yield* put(api, token, id, "notes/a b.md", "x", { "if-none-match": "*" })
      expect([exists.status, exists.body.code]).toEqual([409, "CONFLICT"])
      const stale = yield* put(api, token, id, "notes/a b.md", "x", { "if-match": '"5"' })
      expect([stale.status, stale.body.code]).toEqual([409, "CONFLICT"])
      const second = yield* put(api, token, id, "notes/a b.md", "# hello again", { "if-match": '"1"' })
      expect([second.status, second.body.version]).toEqual([200, 2])
      expect((yield* put(api, token, id, "new.txt", "n", { "if-none-match": "*" })).status).toBe(200)
      // Without a Content-Type: sniffed from the name.
      expect((yield* put(api, token, id, "notes/b.md", "b")).body.contentType).toContain("markdown")
      yield* put(api, token, id, "src/deep/c.ts", "c")

      const listed = yield* api.get(`/v1/volumes/${id}/files`, { token })
      expect(listed.status).toBe(200)
      expect(Object.keys(listed.body).sort()).toEqual(["files"])
      expect(listed.body.files.map((file: { path: string }) => file.path)).toEqual([
        "new.txt",
        "notes/a b.md",
        "notes/b.md",
        "src/deep/c.ts"
      ])
      const globbed = yield* api.get(`/v1/volumes/${id}/files?glob=${encodeURIComponent("**/*.md")}`, { token })
      expect(globbed.body.files.map((file: { path: string }) => file.path)).toEqual(["notes/a b.md", "notes/b.md"])
      const top = yield* api.get(`/v1/volumes/${id}/files?glob=*.txt`, { token })
      expect(top.body.files.map((file: { path: string }) => file.path)).toEqual(["new.txt"])
      const first = yield* api.get(`/v1/volumes/${id}/files?limit=2`, { token })
      expect(first.body.next).toBe("notes/a b.md")
      const rest = yield* api.get(`/v1/volumes/${id}/files?limit=2&after=${encodeURIComponent(first.body.next)}`, {
        token
      })
      expect(rest.body).toEqual({ files: expect.any(Array) })
      expect(rest.body.files.map((file: { path: string }) => file.path)).toEqual(["notes/b.md", "src/deep/c.ts"])

      const refused = yield* api.delete(`/v1/volumes/${id}/files/new.txt`, { token, headers: { "if-match": '"9"' } })
      expect(refused.status).toBe(409)
      const removed = yield* api.delete(`/v1/volumes/${id}/files/new.txt`, { token, headers: { "if-match": '"1"' } })
      expect([removed.status, removed.body.path]).toEqual([200, "new.txt"])
      expect((yield* api.get(`/v1/volumes/${id}/files/new.txt`, { token })).status).toBe(404)

      // Another tenant sees no such volume on any route.
      const foreign = other.token
      expect((yield* api.get(`/v1/volumes/${id}`, { token: foreign })).status).toBe(404)
      expect((yield* api.get(`/v1/volumes/${id}/files/notes/b.md`, { token: foreign })).status).toBe(404)
      expect((yield* put(api, foreign, id, "x.txt", "x")).status).toBe(404)
      expect((yield* api.delete(`/v1/volumes/${id}/files/notes/b.md`, { token: foreign })).status).toBe(404)
      expect((yield* api.get(`/v1/volumes/${id}/files`, { token: foreign })).status).toBe(404)
      expect((yield* api.get(`/v1/volumes/${id}/changes`, { token: foreign })).status).toBe(404)
      expect((yield* api.get(`/v1/volumes/${id}/snapshots`, { token: foreign })).status).toBe(404)
      expect((yield* api.post(`/v1/volumes/${id}/snapshots`, { token: foreign, json: {} })).status).toBe(404)
      expect((yield* api.post(`/v1/volumes/${id}/links`, { token: foreign, json: { path: "notes/b.md" } })).status)
        .toBe(404)
    }))

  it.scoped("seq and changes: since, pages, gap; snapshots survive writes and the sweep; forks of them", () =>
    Effect.gen(function*() {
      const { api, other, token, volume, world } = yield* setup("wire-snapshots")
      const { id } = yield* volume()
      const start = yield* api.get(`/v1/volumes/${id}`, { token })
      expect([start.body.seq, start.body.origin]).toEqual([0, undefined])

      yield* put(api, token, id, "a.txt", "first a")
      yield* put(api, token, id, "b.txt", "b")
      yield* api.delete(`/v1/volumes/${id}/files/b.txt`, { token })
      const changes = yield* api.get(`/v1/volumes/${id}/changes?since=0`, { token })
      expect(changes.status, changes.text).toBe(200)
      expect(changes.body.seq).toBe(3)
      expect(changes.body.gap).toBeUndefined()
      expect(changes.body.changes).toMatchObject([
        { seq: 1, path: "a.txt", kind: "write", version: 1, size: 7, by: "api" },
        { seq: 2, path: "b.txt", kind: "write", version: 1, size: 1 },
        { seq: 3, path: "b.txt", kind: "delete" }
      ])
      expect(changes.body.changes[2].version).toBeUndefined()
      expect((yield* api.get(`/v1/volumes/${id}/changes?since=2`, { token })).body.changes).toMatchObject([{ seq: 3 }])
      expect((yield* api.get(`/v1/volumes/${id}/changes?since=3`, { token })).body).toEqual({ seq: 3, changes: [] })
      expect((yield* api.get(`/v1/volumes/${id}`, { token })).body.seq).toBe(3)

      const snapshot = yield* api.post(`/v1/volumes/${id}/snapshots`, { token, json: { name: "before" } })
      expect(snapshot.status, snapshot.text).toBe(201)
      expect(snapshot.body).toMatchObject({ volume: id, name: "before", seq: 3, files: 1, bytes: 7 })
      expect(snapshot.body.id).toMatch(/^snap_/)
      const unnamed = yield* api.post(`/v1/volumes/${id}/snapshots`, { token, json: {} })
      expect(unnamed.body.name).toBeNull()
      const listed = yield* api.get(`/v1/volumes/${id}/snapshots`, { token })
      expect(listed.body.map((entry: { id: string }) => entry.id)).toEqual([snapshot.body.id, unnamed.body.id])

      // Overwritten, and its old chunk swept with no grace: the snapshot still names it.
      yield* put(api, token, id, "a.txt", "second a")
      yield* onDatabase(world.databaseUrl, Volumes.sweep(0))
      const forked = yield* api.post(`/v1/volumes/${id}/fork`, {
        token,
        json: { name: "past", snapshot: snapshot.body.id }
      })
      expect(forked.status, forked.text).toBe(201)
      expect(forked.body).toMatchObject({ origin: { volume: id, snapshot: snapshot.body.id }, files: 1, bytes: 7 })
      expect((yield* api.get(`/v1/volumes/${forked.body.id}/files/a.txt`, { token })).text).toBe("first a")
      expect((yield* api.get(`/v1/volumes/${id}/files/a.txt`, { token })).text).toBe("second a")
      const plain = yield* api.post(`/v1/volumes/${id}/fork`, { token, json: {} })
      expect(plain.body.origin).toEqual({ volume: id })
      expect((yield* api.get(`/v1/volumes/${plain.body.id}/files/a.txt`, { token })).text).toBe("second a")
      // Another volume's snapshot, or another tenant's, is none.
      expect(
        (yield* api.post(`/v1/volumes/${plain.body.id}/fork`, { token, json: { snapshot: snapshot.body.id } }))
          .status
      ).toBe(404)
      expect((yield* api.delete(`/v1/volumes/${id}/snapshots/${snapshot.body.id}`, { token: other.token })).status)
        .toBe(404)

      // Removed, the snapshot's chunk is swept once nothing else names it.
      const deleted = yield* api.delete(`/v1/volumes/${id}/snapshots/${snapshot.body.id}`, { token })
      expect(deleted.body).toEqual({ id: snapshot.body.id, deleted: true })
      expect((yield* api.get(`/v1/volumes/${id}/snapshots`, { token })).body).toHaveLength(1)
      expect((yield* api.delete(`/v1/volumes/${id}/snapshots/${snapshot.body.id}`, { token })).status).toBe(404)

      // The history is bounded: older changes than those kept leave a gap.
      yield* onDatabase(
        world.databaseUrl,
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql`DELETE FROM volume_changes WHERE volume_id = ${id} AND seq < 3`
        )
      )
      const gap = yield* api.get(`/v1/volumes/${id}/changes?since=1`, { token })
      expect(gap.body).toMatchObject({ seq: 4, gap: true, changes: [{ seq: 3 }, { seq: 4 }] })
      expect((yield* api.get(`/v1/volumes/${id}/changes?since=2`, { token })).body.gap).toBeUndefined()
    }))

  it.scoped("signed links: GET and PUT without auth, bounds, expired and tampered links refused", () =>
    Effect.gen(function*() {
      const { api, token, volume, world } = yield* setup("wire-links")
      const { id } = yield* volume()
      yield* put(api, token, id, "report.txt", "the report", { "content-type": "text/plain" })

      const get = yield* api.post(`/v1/volumes/${id}/links`, { token, json: { path: "report.txt" } })
      expect(get.status, get.text).toBe(200)
      expect(get.body).toMatchObject({ method: "GET", path: "report.txt" })
      expect(new URL(get.body.url).origin).toBe(new URL(world.node.rest).origin)
      expect(get.body.expiresAt - Date.now() / 1000).toBeGreaterThan(890)
      const downloaded = yield* fetchLink(get.body.url)
      expect([downloaded.status, downloaded.text, downloaded.headers.get("x-file-version")]).toEqual([
        200,
        "the report",
        "1"
      ])
      // A download link does not upload, nor does a changed one open.
      expect((yield* fetchLink(get.body.url, { method: "PUT", body: "x" })).status).toBe(403)
      const tampered = new URL(get.body.url)
      tampered.searchParams.set("path", "other.txt")
      expect((yield* fetchLink(tampered.href)).status).toBe(403)
      const later = new URL(get.body.url)
      later.searchParams.set("expires", String(Number(later.searchParams.get("expires")) + 60))
      expect((yield* fetchLink(later.href)).status).toBe(403)

      const upload = yield* api.post(`/v1/volumes/${id}/links`, {
        token,
        json: { path: "in/upload.json", method: "PUT", expiresIn: 60, maxBytes: 16, contentType: "application/json" }
      })
      expect(upload.body).toMatchObject({ method: "PUT", maxBytes: 16, contentType: "application/json" })
      const sent = yield* fetchLink(upload.body.url, {
        method: "PUT",
        body: '{"a":1}',
        headers: { "content-type": "text/plain" }
      })
      expect(sent.status, sent.text).toBe(200)
      expect(JSON.parse(sent.text)).toMatchObject({
        path: "in/upload.json",
        version: 1,
        contentType: "application/json"
      })
      expect((yield* fetchLink(upload.body.url, { method: "PUT", body: "x".repeat(17) })).status).toBe(413)
      expect((yield* api.get(`/v1/volumes/${id}/files/in/upload.json`, { token })).text).toBe('{"a":1}')

      const short = yield* api.post(`/v1/volumes/${id}/links`, { token, json: { path: "report.txt", expiresIn: 1 } })
      yield* Effect.sleep("2100 millis")
      expect((yield* fetchLink(short.body.url)).status).toBe(410)
      expect((yield* api.post(`/v1/volumes/${id}/links`, { token, json: { path: "x", expiresIn: 86401 } })).status)
        .toBe(400)
    }))

  it.scoped("an agent's files by the paths it sees: list, read, write, read-only mount, links, uploads", () =>
    Effect.gen(function*() {
      const { api, other, token, volume } = yield* setup("wire-agent")
      const workspace = yield* volume({ name: "ws" })
      const shared = yield* volume({ name: "shared" })
      yield* put(api, token, shared.id, "docs/guide.md", "guide")
      yield* put(api, token, shared.id, "private.txt", "not mounted")
      yield* put(api, token, workspace.id, "report.pdf", "%PDF-1.4")
      const made = yield* api.post("/v1/agents", {
        token,
        json: {
          model: "fake/m1",
          mounts: [
            { volumeId: workspace.id, path: "/workspace", mode: "rw" },
            { volumeId: shared.id, path: "/ref", mode: "ro", subpath: "docs" }
          ]
        }
      })
      expect(made.status, made.text).toBe(201)
      const agent = made.body as { id: string; token: string }
      const own = agent.token
      expect(own).toMatch(/^aat_/)

      const all = yield* api.get(`/clients/${agent.id}/files`, { token: own })
      expect(all.status, all.text).toBe(200)
      expect(all.body.files.map((file: { path: string }) => file.path)).toEqual([
        "/ref/guide.md",
        "/workspace/report.pdf"
      ])
      const paged = yield* api.get(`/clients/${agent.id}/files?limit=1`, { token: own })
      expect(paged.body).toMatchObject({ files: [{ path: "/ref/guide.md" }], next: "/ref/guide.md" })
      const next = yield* api.get(`/clients/${agent.id}/files?limit=1&after=${encodeURIComponent(paged.body.next)}`, {
        token: own
      })
      expect(next.body.files.map((file: { path: string }) => file.path)).toEqual(["/workspace/report.pdf"])
      const under = yield* api.get(`/clients/${agent.id}/files?path=/workspace`, { token: own })
      expect(under.body.files.map((file: { path: string }) => file.path)).toEqual(["/workspace/report.pdf"])
      const globbed = yield* api.get(`/clients/${agent.id}/files?glob=${encodeURIComponent("**/*.md")}`, { token: own })
      expect(globbed.body.files.map((file: { path: string }) => file.path)).toEqual(["/ref/guide.md"])

      const read = yield* api.get(`/clients/${agent.id}/files/workspace/report.pdf`, { token: own })
      expect([read.status, read.text, read.headers.get("x-file-version")]).toEqual([200, "%PDF-1.4", "1"])
      expect(read.headers.get("content-type")).toBe("application/pdf")
      expect((yield* api.get(`/clients/${agent.id}/files/ref/guide.md`, { token: own })).text).toBe("guide")
      expect((yield* api.get(`/clients/${agent.id}/files/ref/private.txt`, { token: own })).status).toBe(404)

      const wrote = yield* api.put(`/clients/${agent.id}/files/workspace/out/summary.txt`, {
        token: own,
        body: "done",
        headers: { "content-type": "text/plain" }
      })
      expect(wrote.status, wrote.text).toBe(200)
      expect(wrote.body).toMatchObject({ path: "/workspace/out/summary.txt", version: 1, contentType: "text/plain" })
      expect((yield* api.get(`/v1/volumes/${workspace.id}/files/out/summary.txt`, { token })).text).toBe("done")
      const readOnly = yield* api.put(`/clients/${agent.id}/files/ref/guide.md`, { token: own, body: "x" })
      expect([readOnly.status, readOnly.body.code]).toEqual([403, "FORBIDDEN"])
      expect((yield* api.put(`/clients/${agent.id}/files/elsewhere/x.txt`, { token: own, body: "x" })).status).toBe(400)

      const link = yield* api.post(`/clients/${agent.id}/links`, {
        token: own,
        json: { path: "/workspace/report.pdf" }
      })
      expect(link.body.path).toBe("/workspace/report.pdf")
      expect((yield* fetchLink(link.body.url)).text).toBe("%PDF-1.4")
      const roLink = yield* api.post(`/clients/${agent.id}/links`, {
        token: own,
        json: { path: "/ref/guide.md", method: "PUT" }
      })
      expect(roLink.status).toBe(403)

      const uploaded = yield* api.put(`/clients/${agent.id}/uploads/req_wire/data.csv`, {
        token: own,
        body: Buffer.from("a,b\n")
      })
      expect(uploaded.status, uploaded.text).toBe(200)
      expect(uploaded.body).toMatchObject({
        path: "/workspace/uploads/req_wire/data.csv",
        contentType: "text/csv; charset=utf-8"
      })
      // The upload's path is what a prompt takes as a file.
      const prompt = yield* api.post(`/v1/agents/${agent.id}/prompt`, {
        token,
        json: { text: "read it", requestId: "req_wire", files: [{ path: uploaded.body.path }] }
      })
      expect(prompt.status, prompt.text).toBe(202)

      // Another agent's token, another tenant's key: no such agent here.
      const second = yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })
      const stranger = (second.body as { token: string }).token
      expect((yield* api.get(`/clients/${agent.id}/files`, { token: stranger })).status).toBeGreaterThanOrEqual(401)
      expect((yield* api.get(`/clients/${agent.id}/files/workspace/report.pdf`, { token: stranger })).status)
        .toBeGreaterThanOrEqual(401)
      expect((yield* api.get(`/clients/${agent.id}/files`, { token: other.token })).status).toBeGreaterThanOrEqual(401)
    }))
})
