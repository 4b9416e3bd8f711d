/**
 * Files over real HTTP, as a tenant's code and an agent's model use them:
 * volumes and their files, uploads, an agent's workspace and mounts, the
 * file tools called by the model, presented files' signed links, prompt
 * files (an image reaching each of the three provider protocols), and a
 * fork's copy of its workspace. Every route is also tried by another tenant.
 */
import { Http, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as NodeHttp from "node:http"

type Api = ReturnType<typeof Http.client>

/** A 1x1 PNG. */
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    world.upstream.reset()
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    const other = yield* TestWorld.tenantWithModel(world, `${name}-other`)
    const agent = (json: Record<string, unknown> = {}) =>
      Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1", ...json } }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body as { id: string }
      })
    const volume = (json: Record<string, unknown> = {}) =>
      Effect.map(api.post("/v1/volumes", { token, json }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body as { id: string }
      })
    return { world, api, token, other, agent, volume }
  })

const put = (api: Api, token: string, volumeId: string, path: string, body: string | Uint8Array, headers = {}) =>
  api.put(`/v1/volumes/${volumeId}/file?path=${encodeURIComponent(path)}`, { token, body, headers })

const get = (api: Api, token: string, volumeId: string, path: string, headers = {}) =>
  api.get(`/v1/volumes/${volumeId}/file?path=${encodeURIComponent(path)}`, { token, headers })

const paths = (api: Api, token: string, volumeId: string, query = "") =>
  Effect.map(api.get(`/v1/volumes/${volumeId}/files${query}`, { token }), (listed) => {
    expect(listed.status, listed.text).toBe(200)
    return listed.body.files.map((file: { path: string }) => file.path) as Array<string>
  })

const MiB = 1024 * 1024

/**
 * A PUT whose body goes in `mebibytes` chunks of 1 MiB with no declared length (chunked transfer): the status
 * it is answered, which may come before the whole body is sent.
 */
const putChunked = (url: string, token: string, mebibytes: number) =>
  new Promise<number>((resolve, reject) => {
    const request = NodeHttp.request(url, { method: "PUT", headers: { authorization: `Bearer ${token}` } })
    request.on("response", (response) => {
      response.resume()
      resolve(response.statusCode ?? 0)
    })
    // Cut off mid-body once answered: only the answer matters.
    request.on("error", (error) => setTimeout(() => reject(error), 1_000))
    let sent = 0
    const next = () => {
      while (sent < mebibytes) {
        sent++
        if (!request.write(new Uint8Array(MiB))) return void request.once("drain", next)
      }
      request.end()
    }
    next()
  })

/** Small limits, so the tests can reach them: 8 MiB a file, 64 MiB a tenant. */
const limits = { FILES_MAX_FILE_BYTES: String(8 * MiB), FILES_QUOTA_BYTES: String(64 * MiB) }

layer(TestWorld.layer(() => Effect.succeed(limits)), { excludeTestServices: true })("files", (it) => {
  it.scoped("volumes: write, read (ranges), list, versions, fork isolation both ways; bad input changes nothing", () =>
    Effect.gen(function*() {
      const { api, other, token, volume } = yield* setup("vol-crud")
      const made = yield* volume({ name: "docs" })
      expect(made).toMatchObject({ name: "docs", files: 0, bytes: 0, agentId: null, forkedFrom: null })
      expect(made.id).toMatch(/^vol_/)

      const text = yield* put(api, token, made.id, "guide/intro.md", "# Intro\nhello", {
        "content-type": "text/markdown"
      })
      expect(text.status, text.text).toBe(200)
      expect(text.body).toMatchObject({ path: "guide/intro.md", version: 1, size: 13, contentType: "text/markdown" })
      const image = yield* put(api, token, made.id, "img/dot", Buffer.from(png, "base64"))
      expect(image.body.contentType).toBe("image/png")
      const read = yield* get(api, token, made.id, "guide/intro.md")
      expect(read.status).toBe(200)
      expect(read.text).toBe("# Intro\nhello")
      expect(read.headers.get("content-type")).toBe("text/markdown")
      expect(read.headers.get("etag")).toBe('"1"')
      const part = yield* get(api, token, made.id, "guide/intro.md", { range: "bytes=2-6" })
      expect(part.status).toBe(206)
      expect(part.text).toBe("Intro")
      expect(part.headers.get("content-range")).toBe("bytes 2-6/13")

      // Versions: a conditional write at an old version is refused and changes nothing.
      const second = yield* put(api, token, made.id, "guide/intro.md", "v2", { "if-match": '"1"' })
      expect(second.body.version).toBe(2)
      const stale = yield* put(api, token, made.id, "guide/intro.md", "stale", { "if-match": '"1"' })
      expect(stale.status).toBe(409)
      expect(stale.body.code).toBe("CONFLICT")
      const fresh = yield* api.put(`/v1/volumes/${made.id}/file?path=guide/intro.md&ifVersion=0`, {
        token,
        body: "only if new"
      })
      expect(fresh.status).toBe(409)
      expect((yield* get(api, token, made.id, "guide/intro.md")).text).toBe("v2")

      for (let i = 0; i < 5; i++) yield* put(api, token, made.id, `guide/page-${i}.md`, `page ${i}`)
      expect(yield* paths(api, token, made.id, "?prefix=guide/&limit=3")).toEqual([
        "guide/intro.md",
        "guide/page-0.md",
        "guide/page-1.md"
      ])
      const page = yield* api.get(`/v1/volumes/${made.id}/files?prefix=guide&limit=3`, { token })
      expect(page.body.next).toBe("guide/page-1.md")
      expect(yield* paths(api, token, made.id, `?prefix=guide&after=${page.body.next}`)).toEqual([
        "guide/page-2.md",
        "guide/page-3.md",
        "guide/page-4.md"
      ])

      // A fork: the same files; a write on either side is not seen by the other.
      const fork = yield* api.post(`/v1/volumes/${made.id}/fork`, { token, json: { name: "copy" } })
      expect(fork.status, fork.text).toBe(201)
      expect(fork.body).toMatchObject({ forkedFrom: made.id, files: 7 })
      yield* put(api, token, fork.body.id, "guide/intro.md", "fork's")
      yield* put(api, token, made.id, "img/dot", "source's")
      expect((yield* get(api, token, made.id, "guide/intro.md")).text).toBe("v2")
      expect((yield* get(api, token, fork.body.id, "img/dot")).headers.get("content-type")).toBe("image/png")
      expect((yield* get(api, token, fork.body.id, "guide/intro.md")).text).toBe("fork's")

      // Bad paths are refused before anything is written.
      for (const path of ["../x", "a/../../b", "a\u0000b", "\uFF0E\uFF0E/x", "a\\b", "a//b", "", "/"]) {
        const refused = yield* put(api, token, made.id, path, "x")
        expect(refused.status, JSON.stringify(path)).toBe(400)
        expect(refused.body.code).toBe("INVALID_REQUEST")
      }
      expect((yield* api.get(`/v1/volumes/${made.id}`, { token })).body).toMatchObject({ files: 7 })
      expect((yield* get(api, token, made.id, "nothing.md")).status).toBe(404)
      expect((yield* put(api, token, "vol_missing", "a.md", "x")).status).toBe(404)

      // Another tenant sees none of it, on every route.
      const foreign = other.token
      const refusals = [
        yield* api.get(`/v1/volumes/${made.id}`, { token: foreign }),
        yield* get(api, foreign, made.id, "guide/intro.md"),
        yield* put(api, foreign, made.id, "guide/intro.md", "theirs"),
        yield* api.get(`/v1/volumes/${made.id}/files`, { token: foreign }),
        yield* api.post(`/v1/volumes/${made.id}/fork`, { token: foreign, json: {} }),
        yield* api.delete(`/v1/volumes/${made.id}/file?path=guide/intro.md`, { token: foreign }),
        yield* api.delete(`/v1/volumes/${made.id}`, { token: foreign })
      ]
      for (const refusal of refusals) expect(refusal.status, refusal.text).toBe(404)
      expect((yield* api.get("/v1/volumes", { token: foreign })).body).toEqual([])
      expect((yield* get(api, token, made.id, "guide/intro.md")).text).toBe("v2")

      const removed = yield* api.delete(`/v1/volumes/${made.id}/file?path=guide/page-0.md`, { token })
      expect(removed.body).toMatchObject({ path: "guide/page-0.md", version: 1 })
      expect((yield* api.delete(`/v1/volumes/${made.id}`, { token })).body).toEqual({ id: made.id, deleted: true })
      expect((yield* api.get(`/v1/volumes/${made.id}`, { token })).status).toBe(404)
      expect((yield* get(api, token, fork.body.id, "guide/page-0.md")).text).toBe("page 0")
    }))

  it.scoped("an agent's workspace: uploads, and the model's file tools; a presented file's link downloads", () =>
    Effect.gen(function*() {
      const { agent, api, other, token, world } = yield* setup("workspace")
      const made = yield* agent()
      const detail = (yield* api.get(`/v1/agents/${made.id}`, { token })).body
      expect(detail.mounts).toHaveLength(1)
      expect(detail.mounts[0]).toMatchObject({ path: "/workspace", mode: "rw" })
      const workspace = detail.mounts[0].volumeId as string
      expect((yield* api.get(`/v1/volumes/${workspace}`, { token })).body.agentId).toBe(made.id)

      const uploaded = yield* api.put(`/v1/agents/${made.id}/uploads/req_up/data.csv`, {
        token,
        body: "a,b\n1,2\n",
        headers: { "content-type": "text/csv" }
      })
      expect(uploaded.status, uploaded.text).toBe(200)
      expect(uploaded.body).toMatchObject({
        path: "/workspace/uploads/req_up/data.csv",
        version: 1,
        size: 8,
        contentType: "text/csv"
      })
      expect((yield* get(api, token, workspace, "uploads/req_up/data.csv")).text).toBe("a,b\n1,2\n")
      for (const name of ["a%2Fb", "%00", "%EF%BC%8E%EF%BC%8E", "a%5Cb"]) {
        const refused = yield* api.put(`/v1/agents/${made.id}/uploads/req_up/${name}`, { token, body: "x" })
        expect(refused.status, name).toBe(400)
      }
      expect((yield* api.put(`/v1/agents/${made.id}/uploads/req_up/x.txt`, { token: other.token, body: "x" })).status)
        .toBe(404)

      world.upstream.script([
        {
          toolCalls: [
            { id: "call_read", name: "read", arguments: { path: "uploads/req_up/data.csv" } },
            { id: "call_write", name: "write", arguments: { path: "/workspace/out/report.md", content: "# Sum\n3" } }
          ]
        },
        { toolCalls: [{ id: "call_present", name: "present_file", arguments: { path: "out/report.md" } }] },
        { text: "done" }
      ])
      const done = yield* Http.prompted(api, token, made.id, {
        text: "sum the csv",
        files: [{ path: "uploads/req_up/data.csv" }]
      })
      const result = done.outcome.result
      expect(result.reply).toBe("done")
      expect(result.files).toEqual([{ path: "/workspace/out/report.md", version: 1, size: 7 }])
      expect(result.presented).toHaveLength(1)
      const presented = result.presented[0]
      expect(presented).toMatchObject({
        path: "/workspace/out/report.md",
        name: "report.md",
        size: 7,
        contentType: "text/markdown; charset=utf-8"
      })
      // The model saw the csv through read, and the prompt named it.
      const asked = world.upstream.requests().filter((request) => request.protocol === "openai-chat")
      expect(JSON.stringify(asked[1]!.body)).toContain("a,b\\n")
      expect(JSON.stringify(asked[0]!.body)).toContain("/workspace/uploads/req_up/data.csv (text/csv, 8 bytes)")

      const events = (yield* api.get(`/v1/agents/${made.id}/events?poll=1`, { token })).body.events
      const shown = events.find((entry: any) => entry.data?.event?.type === "file_presented")
      expect(shown.data.event.file).toEqual(presented)

      const url = new URL(presented.url)
      expect(url.origin).toBe(new URL(world.node.rest).origin)
      const download = yield* Effect.promise(() => fetch(url))
      expect(download.status).toBe(200)
      expect(yield* Effect.promise(() => download.text())).toBe("# Sum\n3")
      expect(download.headers.get("content-disposition")).toContain("report.md")
      const tampered = new URL(url)
      tampered.searchParams.set("expires", String(Number(url.searchParams.get("expires")) + 60))
      const refused = yield* Effect.promise(() => fetch(tampered))
      expect(refused.status).toBe(403)
      expect(((yield* Effect.promise(() => refused.json())) as { code: string }).code).toBe("FORBIDDEN")

      // Code sees the same files, through the same tools.
      const code = "const read = await tools.read({ path: 'out/report.md' })\n" +
        "await tools.write({ path: 'from-code.txt', content: 'hi' })\nreturn read"
      const ran = yield* api.post(`/v1/agents/${made.id}/execute`, { token, json: { code } })
      expect(ran.status, ran.text).toBe(202)
      const executed = yield* Http.settled(api, token, made.id, ran.body.id)
      expect(executed.outcome.result.ok).toBe(true)
      expect(JSON.stringify(executed.outcome.result.value)).toContain("# Sum")
      expect((yield* get(api, token, workspace, "from-code.txt")).text).toBe("hi")

      // fileTools: false leaves present_file alone.
      const presenter = yield* agent({ fileTools: false })
      const sources = (yield* api.get(`/v1/agents/${presenter.id}`, { token })).body.toolSources
      const files = sources.find((source: any) => source.kind === "files")
      expect(files.tools.map((tool: any) => tool.name)).toEqual(["present_file"])
    }))

  it.scoped("mounts: a shared volume read-only, no workspace unless asked; bad mounts make no agent", () =>
    Effect.gen(function*() {
      const { agent, api, other, token, volume, world } = yield* setup("mounts")
      const shared = yield* volume({ name: "shared" })
      yield* put(api, token, shared.id, "kb/faq.md", "Q: A")
      const reader = yield* agent({ mounts: [{ volumeId: shared.id, path: "/kb", mode: "ro", subpath: "kb" }] })
      const detail = (yield* api.get(`/v1/agents/${reader.id}`, { token })).body
      expect(detail.mounts).toEqual([{ volumeId: shared.id, path: "/kb", mode: "ro", subpath: "kb" }])
      world.upstream.script([
        {
          toolCalls: [
            { id: "call_read", name: "read", arguments: { path: "/kb/faq.md" } },
            { id: "call_write", name: "write", arguments: { path: "/kb/faq.md", content: "defaced" } }
          ]
        },
        { text: "ok" }
      ])
      const done = yield* Http.prompted(api, token, reader.id, { text: "read the faq" })
      expect(done.outcome.result.toolCalls).toEqual([
        { tool: "read", toolCallId: "call_read", ok: true },
        { tool: "write", toolCallId: "call_write", ok: false, code: "invalid_arguments" }
      ])
      expect((yield* get(api, token, shared.id, "kb/faq.md")).text).toBe("Q: A")
      // With no writable mount there is nowhere to put uploads.
      expect((yield* api.put(`/v1/agents/${reader.id}/uploads/r/a.txt`, { token, body: "x" })).status).toBe(400)

      const before = (yield* api.get("/v1/agents", { token })).body.length
      const bad = [
        [{ volumeId: shared.id, path: "kb", mode: "ro" }],
        [{ volumeId: shared.id, path: "/a", mode: "ro" }, { volumeId: shared.id, path: "/a/b", mode: "rw" }],
        [{ volumeId: shared.id, path: "/a/../b", mode: "ro" }],
        [{ volumeId: shared.id, path: "/a", mode: "rx" }]
      ]
      for (const mounts of bad) {
        const refused = yield* api.post("/v1/agents", { token, json: { model: "fake/m1", mounts } })
        expect(refused.status, JSON.stringify(mounts)).toBe(400)
      }
      const missing = yield* api.post("/v1/agents", {
        token,
        json: { model: "fake/m1", mounts: [{ volumeId: "vol_none", path: "/a", mode: "ro" }] }
      })
      expect(missing.status).toBe(404)
      const theirs = yield* api.post("/v1/agents", {
        token: other.token,
        json: { model: "fake/m1", mounts: [{ volumeId: shared.id, path: "/a", mode: "ro" }] }
      })
      expect(theirs.status).toBe(404)
      expect((yield* api.get("/v1/agents", { token })).body.length).toBe(before)
      expect((yield* api.get("/v1/volumes", { token })).body.map((v: any) => v.id)).toEqual([shared.id])
    }))

  it.scoped("mounts changed by configure or an upsert are what the file tools see; bad mounts change nothing", () =>
    Effect.gen(function*() {
      const { agent, api, other, token, volume, world } = yield* setup("remount")
      const first = yield* volume({ name: "first" })
      yield* put(api, token, first.id, "a.md", "from the first")
      const second = yield* volume({ name: "second" })
      yield* put(api, token, second.id, "notes/b.md", "from the second")
      const theirs = (yield* api.post("/v1/volumes", { token: other.token, json: { name: "theirs" } })).body.id
      const detailOf = (id: string) => Effect.map(api.get(`/v1/agents/${id}`, { token }), (detail) => detail.body)
      const lastAsked = () =>
        JSON.stringify(world.upstream.requests().filter((request) => request.protocol === "openai-chat").at(-1)!.body)

      // Configure: the next turn's file tools see the new mounts, and only them.
      const made = yield* agent({ mounts: [{ volumeId: first.id, path: "/data", mode: "ro" }] })
      const remounted = [
        { volumeId: second.id, path: "/data", mode: "rw", subpath: "notes" },
        { volumeId: first.id, path: "/old", mode: "ro" }
      ]
      const configured = yield* api.post(`/v1/agents/${made.id}/configure`, {
        token,
        json: { requestId: "remount", mounts: remounted }
      })
      expect(configured.status, configured.text).toBe(200)
      expect((yield* detailOf(made.id)).mounts).toEqual(remounted)
      world.upstream.script([
        {
          toolCalls: [
            { id: "call_ls", name: "ls", arguments: { path: "/data" } },
            { id: "call_read", name: "read", arguments: { path: "/data/b.md" } },
            { id: "call_old", name: "read", arguments: { path: "/old/a.md" } },
            { id: "call_gone", name: "read", arguments: { path: "/data/a.md" } }
          ]
        },
        { text: "seen" }
      ])
      const looked = yield* Http.prompted(api, token, made.id, { text: "look around" })
      expect(looked.outcome.result.toolCalls.map((call: any) => [call.toolCallId, call.ok])).toEqual([
        ["call_ls", true],
        ["call_read", true],
        ["call_old", true],
        ["call_gone", false]
      ])
      expect(lastAsked()).toContain("from the second")
      expect(lastAsked()).toContain("from the first")
      expect(lastAsked()).toContain("b.md")

      // Bad mounts are refused as at creation, through configure and upsert alike, and change nothing.
      const keyed = (yield* api.put("/v1/agents/by-key/remount", {
        token,
        json: { model: "fake/m1", name: "keyed", mounts: [{ volumeId: first.id, path: "/data", mode: "ro" }] }
      })).body
      const before = [yield* detailOf(made.id), yield* detailOf(keyed.id)]
      const bad: ReadonlyArray<readonly [unknown, number]> = [
        [[{ volumeId: second.id, path: "relative", mode: "ro" }], 400],
        [[{ volumeId: second.id, path: "/a", mode: "ro" }, { volumeId: first.id, path: "/a/b", mode: "ro" }], 400],
        [[{ volumeId: second.id, path: "/a", mode: "ro" }, { volumeId: first.id, path: "/a", mode: "rw" }], 400],
        [[{ volumeId: second.id, path: "/a/../b", mode: "ro" }], 400],
        [[{ volumeId: second.id, path: "/a", mode: "rx" }], 400],
        [[{ volumeId: second.id, path: "/a", mode: "ro", subpath: "../up" }], 400],
        [[{ volumeId: "vol_none", path: "/a", mode: "ro" }], 404],
        [[{ volumeId: theirs, path: "/a", mode: "ro" }], 404]
      ]
      const answers: Array<unknown> = []
      for (const [mounts] of bad) {
        const viaConfigure = yield* api.post(`/v1/agents/${made.id}/configure`, {
          token,
          json: { requestId: "remount-bad", mounts, systemPrompt: "changed" }
        })
        const viaUpsert = yield* api.put("/v1/agents/by-key/remount", {
          token,
          json: { model: "fake/m1", name: "renamed", mounts }
        })
        answers.push([mounts, viaConfigure.status, viaUpsert.status])
      }
      expect(answers).toEqual(bad.map(([mounts, status]) => [mounts, status, status]))
      // Not over the agent's own token: its mounts could name any of the tenant's volumes.
      const fromAgent = yield* api.post(`/clients/${made.id}/requests`, {
        token: (made as unknown as { readonly token: string }).token,
        json: { method: "configure", mounts: remounted }
      })
      expect(fromAgent.status).toBe(400)
      const after = [yield* detailOf(made.id), yield* detailOf(keyed.id)]
      for (const [index, detail] of after.entries()) {
        expect(detail).toMatchObject({
          name: before[index].name,
          systemPrompt: before[index].systemPrompt,
          mounts: before[index].mounts
        })
        expect(detail.requests.map((request: any) => request.id)).toEqual(
          before[index].requests.map((request: any) => request.id)
        )
      }
      // Nothing was recorded under the refused configure's id: it is free for the next one.
      const retried = yield* api.post(`/v1/agents/${made.id}/configure`, {
        token,
        json: { requestId: "remount-bad", mounts: [{ volumeId: first.id, path: "/data", mode: "ro" }] }
      })
      expect(retried.status, retried.text).toBe(200)

      // An upsert's mounts, likewise seen by the next turn.
      const upserted = yield* api.put("/v1/agents/by-key/remount", {
        token,
        json: { model: "fake/m1", name: "keyed", mounts: [{ volumeId: second.id, path: "/kb", mode: "ro" }] }
      })
      expect(upserted.status, upserted.text).toBeLessThan(300)
      expect((yield* detailOf(keyed.id)).mounts).toEqual([{ volumeId: second.id, path: "/kb", mode: "ro" }])
      world.upstream.script([
        { toolCalls: [{ id: "call_kb", name: "read", arguments: { path: "/kb/notes/b.md" } }] },
        { text: "read" }
      ])
      const read = yield* Http.prompted(api, token, keyed.id, { text: "read it" })
      expect(read.outcome.result.toolCalls).toEqual([{ tool: "read", toolCallId: "call_kb", ok: true }])
      expect(lastAsked()).toContain("from the second")
    }))

  it.scoped("prompt files: an inline image reaches the model as an image in each protocol; limits answer 413/400", () =>
    Effect.gen(function*() {
      const { api, token, world } = yield* setup("prompt-files")
      const types = {
        "openai-chat": "openai-completions",
        "openai-responses": "openai-responses",
        "anthropic-messages": "anthropic-messages"
      } as const
      for (const [protocol, type] of Object.entries(types)) {
        const name = `vision-${type}`
        const saved = yield* api.put(`/v1/providers/${name}`, {
          token,
          json: {
            type,
            baseUrl: type === "anthropic-messages" ? world.upstream.url : `${world.upstream.url}/v1`,
            models: [{ id: "v1", contextWindow: 100_000, input: ["text", "image"] }]
          }
        })
        expect(saved.status, saved.text).toBe(200)
        const made = yield* api.post("/v1/agents", { token, json: { model: `${name}/v1` } })
        world.upstream.reset()
        world.upstream.script({ text: "a dot" })
        const done = yield* Http.prompted(api, token, made.body.id, {
          text: "what is this?",
          requestId: "req_img",
          files: [{ data: png, name: "dot.png", contentType: "image/png" }]
        })
        expect(done.outcome.result.reply).toBe("a dot")
        const [request] = world.upstream.requests().filter((r) => r.protocol === protocol)
        const body = JSON.stringify(request!.body)
        const part = {
          "openai-chat": `"image_url":{"url":"data:image/png;base64,${png}"`,
          "openai-responses": `"type":"input_image"`,
          "anthropic-messages": `"source":{"type":"base64","media_type":"image/png","data":"${png}"}`
        }[protocol as keyof typeof types]
        expect(body, protocol).toContain(part)
        expect(body).toContain(png)
        expect(body).toContain("/workspace/uploads/req_img/dot.png (image/png, 70 bytes)")
        const workspace = (yield* api.get(`/v1/agents/${made.body.id}`, { token })).body.mounts[0].volumeId
        expect((yield* get(api, token, workspace, "uploads/req_img/dot.png")).headers.get("content-type")).toBe(
          "image/png"
        )
      }

      const made = yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })
      const agentId = made.body.id
      const workspace = (yield* api.get(`/v1/agents/${agentId}`, { token })).body.mounts[0].volumeId
      const big = Buffer.alloc(2 * 1024 * 1024 + 1, 7).toString("base64")
      const tooLarge = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "x", files: [{ data: big, name: "a.bin" }, { data: big, name: "b.bin" }] }
      })
      expect(tooLarge.status, tooLarge.text).toBe(413)
      expect(tooLarge.body.code).toBe("TOO_LARGE")
      const many = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "x", files: Array.from({ length: 21 }, (_, i) => ({ data: "eA==", name: `f${i}.txt` })) }
      })
      expect(many.status).toBe(400)
      const missing = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "x", files: [{ path: "nope.txt" }] }
      })
      expect(missing.status).toBe(404)
      const badName = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "x", files: [{ data: "eA==", name: "../escape.txt" }] }
      })
      expect(badName.status).toBe(400)
      // None of them wrote a file or queued a run.
      expect(yield* paths(api, token, workspace)).toEqual([])
      expect((yield* api.get(`/v1/agents/${agentId}`, { token })).body.requests).toEqual([])
    }))

  it.scoped("a fork gets a copy-on-write copy of the workspace; each side's writes stay its own", () =>
    Effect.gen(function*() {
      const { agent, api, token } = yield* setup("fork")
      const source = yield* agent()
      yield* api.put(`/v1/agents/${source.id}/uploads/r1/plan.md`, { token, body: "plan v1" })
      const forked = yield* api.post(`/v1/agents/${source.id}/fork`, { token, json: {} })
      expect(forked.status, forked.text).toBe(201)
      const volumeOf = (agentId: string) =>
        Effect.map(api.get(`/v1/agents/${agentId}`, { token }), (detail) => detail.body.mounts[0].volumeId as string)
      const [mine, theirs] = [yield* volumeOf(source.id), yield* volumeOf(forked.body.id)]
      expect(theirs).not.toBe(mine)
      expect((yield* api.get(`/v1/volumes/${theirs}`, { token })).body).toMatchObject({
        agentId: forked.body.id,
        forkedFrom: mine,
        files: 1
      })
      expect((yield* get(api, token, theirs, "uploads/r1/plan.md")).text).toBe("plan v1")
      yield* api.put(`/v1/agents/${forked.body.id}/uploads/r1/plan.md`, { token, body: "fork's plan" })
      yield* api.put(`/v1/agents/${source.id}/uploads/r2/notes.md`, { token, body: "source only" })
      expect((yield* get(api, token, mine, "uploads/r1/plan.md")).text).toBe("plan v1")
      expect((yield* get(api, token, theirs, "uploads/r1/plan.md")).text).toBe("fork's plan")
      expect((yield* get(api, token, theirs, "uploads/r2/notes.md")).status).toBe(404)
      // Removing an agent removes its own workspace, not the other's.
      expect((yield* api.delete(`/v1/agents/${forked.body.id}`, { token })).status).toBe(200)
      expect((yield* api.get(`/v1/volumes/${theirs}`, { token })).status).toBe(404)
      expect((yield* get(api, token, mine, "uploads/r1/plan.md")).text).toBe("plan v1")
    }))

  it.scoped("notify: an agent is prompted when others change files under its mount, never for its own writes", () =>
    Effect.gen(function*() {
      const { agent, api, token, volume, world } = yield* setup("notify")
      const team = yield* volume({ name: "team" })
      const watcher = yield* agent({ mounts: [{ volumeId: team.id, path: "/team", mode: "rw", notify: true }] })
      const writer = yield* agent({ mounts: [{ volumeId: team.id, path: "/team", mode: "rw" }] })
      const notices = (agentId: string) =>
        Effect.map(
          api.get(`/v1/agents/${agentId}`, { token }),
          (detail) => detail.body.requests.filter((request: any) => request.id.startsWith("notify_")) as Array<any>
        )
      const settledNotices = (agentId: string, count: number) =>
        Http.waitFor(
          () =>
            Effect.map(
              notices(agentId),
              (found) => found.length === count && found.every((request) => request.state === "completed")
            ),
          `${count} notices to ${agentId}`
        )

      // A burst of writes through the API is one notice, after a quiet spell too (longer than the gathering
      // moment: the burst's first write opens it).
      yield* Effect.sleep("1500 millis")
      yield* put(api, token, team.id, "plan.md", "v1")
      yield* put(api, token, team.id, "notes/a.md", "a")
      yield* settledNotices(watcher.id, 1)
      const [first] = yield* notices(watcher.id)
      expect(first.prompt).toContain("/team/plan.md (version 1, by api)")
      expect(first.prompt).toContain("/team/notes/a.md (version 1, by api)")

      // Another agent's write through its tools is news to the watcher; the watcher's own is not.
      world.upstream.script([
        { toolCalls: [{ id: "call_w", name: "write", arguments: { path: "/team/plan.md", content: "v2" } }] },
        { text: "written" }
      ])
      yield* Http.prompted(api, token, writer.id, { text: "update the plan" })
      yield* settledNotices(watcher.id, 2)
      const second = (yield* notices(watcher.id)).find((request) => request.id !== first.id)
      expect(second.prompt).toContain(`/team/plan.md (version 2, by agent:${writer.id})`)
      world.upstream.script([
        { toolCalls: [{ id: "call_own", name: "write", arguments: { path: "/team/own.md", content: "mine" } }] },
        { text: "saved" }
      ])
      yield* Http.prompted(api, token, watcher.id, { text: "save a note" })
      // Past the gathering moment: still two, and the writer (no notify) was never told.
      yield* Effect.sleep("2500 millis")
      expect(yield* notices(watcher.id)).toHaveLength(2)
      expect(yield* notices(writer.id)).toEqual([])
    }))

  it.scoped("limits: a file over the size limit (declared or streamed) and a write over the quota answer 413", () =>
    Effect.gen(function*() {
      const { agent, api, token, volume, world } = yield* setup("limits")
      const made = yield* agent()
      const workspace = (yield* api.get(`/v1/agents/${made.id}`, { token })).body.mounts[0].volumeId
      const over = new Uint8Array(8 * MiB + 1)
      const declared = yield* api.put(`/v1/agents/${made.id}/uploads/r1/big.bin`, { token, body: over })
      expect(declared.status, declared.text).toBe(413)
      expect(declared.body.code).toBe("TOO_LARGE")
      // Sent in chunks with no length declared: refused once past the limit.
      const chunked = yield* Effect.promise(() =>
        putChunked(`${world.node.rest}/v1/volumes/${workspace}/file?path=streamed.bin`, token, 9)
      )
      expect(chunked).toBe(413)
      expect(yield* paths(api, token, workspace)).toEqual([])

      // The quota: 64 MiB across the tenant's volumes, its forks counted in full.
      const store = yield* volume({ name: "store" })
      const eight = new Uint8Array(8 * MiB)
      for (let i = 0; i < 8; i++) {
        eight[0] = i
        expect((yield* put(api, token, store.id, `part-${i}`, eight)).status).toBe(200)
      }
      const beyond = yield* put(api, token, store.id, "one-more", new Uint8Array(1))
      expect(beyond.status).toBe(413)
      expect(beyond.body.error).toContain("quota")
      expect((yield* api.post(`/v1/volumes/${store.id}/fork`, { token, json: {} })).status).toBe(413)
      // A write that does not grow usage still passes; removing frees room.
      expect((yield* put(api, token, store.id, "part-0", new Uint8Array(8 * MiB))).status).toBe(200)
      yield* api.delete(`/v1/volumes/${store.id}/file?path=part-7`, { token })
      expect((yield* put(api, token, store.id, "one-more", new Uint8Array(1))).status).toBe(200)
      expect((yield* api.get(`/v1/volumes/${store.id}`, { token })).body).toMatchObject({
        files: 8,
        bytes: 7 * 8 * MiB + 1
      })
    }))

  it.scoped("upload names and request ids up to 255 bytes route; longer ones and slash look-alikes answer 400", () =>
    Effect.gen(function*() {
      const { agent, api, token, volume, world } = yield* setup("segments")
      const made = yield* agent()
      // 100, 101, 255 and 256 bytes of UTF-8, in one-byte and in two- and four-byte characters.
      const sized = [
        ["a".repeat(100), "a".repeat(101), "a".repeat(255), "a".repeat(256)],
        ["\u00e9".repeat(50), "\u00e9".repeat(50) + "a", "\u00e9".repeat(127) + "a", "\u00e9".repeat(128)],
        ["\u{1F642}".repeat(25), "\u{1F642}".repeat(25) + "a", "\u{1F642}".repeat(63) + "abc", "\u{1F642}".repeat(64)]
      ]
      for (const sizes of sized) {
        expect(sizes.map((segment) => Buffer.byteLength(segment))).toEqual([100, 101, 255, 256])
        for (const segment of sizes.slice(0, 3)) {
          const named = yield* api.put(`/v1/agents/${made.id}/uploads/req_len/${encodeURIComponent(segment)}`, {
            token,
            body: "x"
          })
          expect(named.status, `${Buffer.byteLength(segment)}-byte name: ${named.text}`).toBe(200)
          expect(named.body.path).toBe(`/workspace/uploads/req_len/${segment}`)
          const id = yield* api.put(`/v1/agents/${made.id}/uploads/${encodeURIComponent(segment)}/x.txt`, {
            token,
            body: "x"
          })
          expect(id.status, `${Buffer.byteLength(segment)}-byte request id: ${id.text}`).toBe(200)
          expect(id.body.path).toBe(`/workspace/uploads/${segment}/x.txt`)
        }
        const over = sizes[3]!
        const longName = yield* api.put(`/v1/agents/${made.id}/uploads/req_len/${encodeURIComponent(over)}`, {
          token,
          body: "x"
        })
        expect({ status: longName.status, code: longName.body.code }).toEqual({ status: 400, code: "INVALID_REQUEST" })
        expect(longName.body.error).toContain("is over 255 bytes")
        const longId = yield* api.put(`/v1/agents/${made.id}/uploads/${encodeURIComponent(over)}/x.txt`, {
          token,
          body: "x"
        })
        expect({ status: longId.status, code: longId.body.code }).toEqual({ status: 400, code: "INVALID_REQUEST" })
        expect(longId.body.error).toContain("is over 255 bytes")
      }

      // A request id of any of these lengths is read back on every request route, hot or not.
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", mounts: [] } })).body
      for (const requestId of sized.flat()) {
        const accepted = yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "hi", requestId } })
        expect(accepted.status, accepted.text).toBe(202)
        const path = `requests/${encodeURIComponent(requestId)}?wait=20`
        for (
          const [where, options] of [
            [`/v1/agents/${created.id}/${path}`, { token }],
            [`/v1/agents/${created.id}/${path}`, { token, headers: { origin: "https://app.example" } }],
            [`/clients/${created.id}/${path}`, { token: created.token }]
          ] as const
        ) {
          const read = yield* Http.request(world.node.rest, "GET", where, options)
          expect(read.status, `${Buffer.byteLength(requestId)}-byte request id at ${where}: ${read.text}`).toBe(200)
          expect(read.body.id).toBe(requestId)
        }
      }

      // Characters that read as a slash are refused naming the character: in a name, a request id, a volume path.
      const fractionSlash = "U+2044 FRACTION SLASH"
      for (const upload of ["req_up/a\u2044b.txt", "a\u2044b/x.txt"]) {
        const refused = yield* api.put(
          `/v1/agents/${made.id}/uploads/${upload.split("/").map(encodeURIComponent).join("/")}`,
          { token, body: "x" }
        )
        expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 400, code: "INVALID_REQUEST" })
        expect(refused.body.error).toContain(fractionSlash)
      }
      const { id } = yield* volume()
      for (const path of ["a\u2044b.txt", "docs/a\u29f8b", "a\uff3cb"]) {
        const refused = yield* put(api, token, id, path, "x")
        expect({ status: refused.status, code: refused.body.code }, path).toEqual({
          status: 400,
          code: "INVALID_REQUEST"
        })
        expect(refused.body.error).toContain("reads as a slash")
      }
      expect((yield* put(api, token, id, "a\u2044b.txt", "x")).body.error).toContain(fractionSlash)
      expect(yield* paths(api, token, id)).toEqual([])
    }))
})
