/**
 * The camelRun client's wire against a node started as the README says
 * (CamelWire speaks it: its headers, envelopes, frames, ids and shapes):
 * every operation that client offers, so a change that breaks a camelRun
 * application fails here. docs/moving-from-camelrun.md lists them.
 */
import { CamelWire, FakeUpstream, TestCluster, TestDatabase, TestWorld } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"

const weather: CamelWire.McpTool = {
  name: "get_weather",
  description: "The weather in a city",
  inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  _meta: { "agent-runtime/executionMode": "parallel" }
}

const weatherResult = (city: string) => ({
  content: [{ type: "text", text: JSON.stringify({ city, sky: "clear" }) }],
  structuredContent: { city, sky: "clear" }
})

const promise = <A>(f: () => Promise<A>) => Effect.promise(f)

/** A tenant with the fake model, and the camelRun transport with its API key. */
const tenant = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    const { token } = yield* TestWorld.tenantWithModel(world, name)
    return { world, apiKey: token, wire: CamelWire.transport(world.node.rest) }
  })

layer(TestWorld.layer(), { excludeTestServices: true, timeout: 120_000 })("the camelRun client's wire", (it) => {
  it.scoped("upsert declares the tools; the application serves them; the model's call arrives once", () =>
    Effect.gen(function*() {
      const { apiKey, wire, world } = yield* tenant("camel-serve")
      const key = "support-bot"
      const body = {
        mcp: { tools: [weather] },
        runLimits: { maxResponses: 6, maxSeconds: 120 },
        model: "fake/m1",
        systemPrompt: "Answer about the weather."
      }
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, { method: "POST", body, headers: { "idempotency-key": key } })
      )
      expect(created.id).toMatch(CamelWire.agentIdPattern)
      expect(created.token).toEqual(expect.any(String))
      expect(created.expiresAt).toBeNull()
      expect(created).not.toHaveProperty("reconfigured")

      // The tools are the agent's before any application connects.
      const detail = yield* promise(() => wire.json(`/v1/agents/${created.id}?schemas=true&refresh=true`, apiKey))
      expect(detail.tools.map((tool: any) => tool.name)).toEqual(["get_weather"])
      expect(detail.toolSources.find((source: any) => source.kind === "application")?.tools).toEqual([
        expect.objectContaining({ name: "get_weather", parameters: weather.inputSchema })
      ])

      // A retry of the same body is the same agent, unchanged.
      const retried = yield* promise(() =>
        wire.json("/v1/agents", apiKey, { method: "POST", body, headers: { "idempotency-key": key } })
      )
      expect(retried.id).toBe(created.id)
      expect(retried).not.toHaveProperty("reconfigured")

      // Agents.upsert connects without the tool sync: the upsert declared them.
      const app = CamelWire.connect(wire, created, {
        attach: true,
        tools: [weather],
        syncTools: false,
        call: async (_, args) => weatherResult(String(args.city))
      })
      yield* Effect.addFinalizer(() => promise(() => app.close(0)))
      yield* promise(() => app.ready)
      const ready = app.frames.find((frame) => frame.event === "ready")!
      expect(ready.data.connection).toEqual(expect.any(String))
      expect(ready.data.toolsHash).toBe(CamelWire.toolsHash([weather]))

      world.upstream.script([
        { toolCalls: [{ id: "call_w1", name: "get_weather", arguments: { city: "Lisbon" } }] },
        { text: "Clear skies in Lisbon." }
      ])
      const runId = Crypto.randomUUID()
      const result = yield* promise(() => app.request("prompt", { text: "Weather in Lisbon?" }, runId))
      expect(result).toMatchObject({ reply: "Clear skies in Lisbon.", error: null })
      expect(result.toolCalls).toEqual([expect.objectContaining({ tool: "get_weather", ok: true })])
      expect(app.calls.map((call) => call.params.arguments)).toEqual([{ city: "Lisbon" }])
      // Its answer reached the model.
      const second = world.upstream.requests().filter((request) => request.protocol === "openai-chat").at(-1)!
      expect(JSON.stringify((second.body as any).messages)).toContain('\\"sky\\":\\"clear\\"')
      // The outcome came on the stream as a response frame, with the events of the run before it.
      const response = app.events.find((event) => event.data.type === "response" && event.data.id === runId)
      expect(response).toBeDefined()
      const runEvents = app.events.filter((event) => event.data.type === "event" && event.data.requestId === runId)
      expect(runEvents.map((event) => event.data.event.type)).toContain("tool_execution_start")
      expect(Math.max(...runEvents.map((event) => event.id))).toBeLessThan(response!.id)
      expect(app.errors).toEqual([])

      // The same key with another configuration reconfigures the agent in place.
      const changed = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { ...body, systemPrompt: "Answer in French.", runLimits: { maxResponses: 2 } },
          headers: { "idempotency-key": key }
        })
      )
      expect(changed.id).toBe(created.id)
      expect(changed.reconfigured).toEqual({ id: expect.any(String) })
      const after = yield* promise(() => wire.json(`/v1/agents/${created.id}`, apiKey))
      expect(after.systemPrompt).toBe("Answer in French.")
      const listed = yield* promise(() => wire.json("/v1/agents", apiKey))
      expect(Array.isArray(listed)).toBe(true)
      expect(listed.filter((agent: any) => agent.id === created.id)).toEqual([
        expect.objectContaining({ key, connected: true })
      ])
    }))

  it.scoped("createAgent and connectAgent: tools that differ from the declared ones are synced by a configure", () =>
    Effect.gen(function*() {
      const { apiKey, wire } = yield* tenant("camel-sync")
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [] }, model: "fake/m1", ttlSeconds: 86400 },
          headers: { "idempotency-key": Crypto.randomUUID() }
        })
      )
      expect(created.id).toMatch(CamelWire.agentIdPattern)
      expect(created.expiresAt).toEqual(expect.any(Number))
      const app = CamelWire.connect(wire, created, {
        attach: true,
        tools: [weather],
        call: async (_, args) => weatherResult(String(args.city))
      })
      yield* Effect.addFinalizer(() => promise(() => app.close(0)))
      yield* promise(() => app.ready)
      yield* Effect.promise(async () => {
        for (let i = 0; i < 100 && app.syncs.length === 0; i++) await new Promise((r) => setTimeout(r, 50))
      })
      expect(app.syncs).toHaveLength(1)
      yield* promise(() => app.outcome(app.syncs[0]!))
      const detail = yield* promise(() => wire.json(`/v1/agents/${created.id}`, apiKey))
      expect(detail.tools.map((tool: any) => tool.name)).toEqual(["get_weather"])

      // The application restarts: the next client, the same tools, finds the hash equal and sends nothing; the
      // connection the first left behind does not keep it out.
      yield* promise(() => app.close(0))
      const again = CamelWire.connect(wire, created, {
        attach: true,
        tools: [weather],
        call: async (_, args) => weatherResult(String(args.city))
      })
      yield* Effect.addFinalizer(() => promise(() => again.close(0)))
      yield* promise(() => again.ready)
      const ready = again.frames.find((frame) => frame.event === "ready")!
      expect(ready.data.toolsHash).toBe(CamelWire.toolsHash([weather]))
      expect(again.syncs).toEqual([])
    }))

  it.scoped("a second application is refused with APPLICATION_CONNECTED; takeover replaces the first", () =>
    Effect.gen(function*() {
      const { apiKey, wire } = yield* tenant("camel-takeover")
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [weather] }, model: "fake/m1" },
          headers: { "idempotency-key": "takeover-bot" }
        })
      )
      const options = { attach: true, tools: [weather], call: async () => weatherResult("x") }
      const first = CamelWire.connect(wire, created, options)
      yield* Effect.addFinalizer(() => promise(() => first.close(0)))
      yield* promise(() => first.ready)
      // The connection serves once its handshake is done.
      yield* Effect.promise(async () => {
        for (let i = 0; i < 100; i++) {
          if ((await wire.json(`/v1/agents/${created.id}`, apiKey)).connected === true) return
          await new Promise((r) => setTimeout(r, 50))
        }
      })
      const second = CamelWire.connect(wire, created, options)
      yield* Effect.addFinalizer(() => promise(() => second.close(0)))
      const refused = yield* Effect.promise(() => second.ready.then(() => undefined, (error) => error))
      expect(refused).toMatchObject({ status: 409, code: "APPLICATION_CONNECTED" })

      const third = CamelWire.connect(wire, created, { ...options, takeover: true })
      yield* Effect.addFinalizer(() => promise(() => third.close(0)))
      yield* promise(() => third.ready)
      yield* Effect.promise(async () => {
        for (let i = 0; i < 200 && first.attached(); i++) await new Promise((r) => setTimeout(r, 50))
      })
      expect(first.attached()).toBe(false)
      expect(first.errors.some((error) => (error as CamelWire.WireError).code === "APPLICATION_REPLACED")).toBe(true)
      expect(first.frames.some((frame) => frame.event === "closed")).toBe(true)
    }))

  it.scoped("a long reply with NUL and non-ASCII text reaches every follower in frames the client takes", () =>
    Effect.gen(function*() {
      const { apiKey, wire, world } = yield* tenant("camel-large")
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [] }, model: "fake/m1" },
          headers: { "idempotency-key": "large-bot" }
        })
      )
      const follower = CamelWire.connect(wire, created, { attach: false })
      yield* Effect.addFinalizer(() => promise(() => follower.close(0)))
      yield* promise(() => follower.ready)
      const reply = "Ünïcode reply \u0000 with a NUL. ".repeat(4_000)
      world.upstream.script({ text: reply })
      const runId = Crypto.randomUUID()
      const result = yield* promise(() => follower.request("prompt", { text: "write a lot" }, runId))
      // NUL becomes U+FFFD, as everywhere text enters (docs/agents.md).
      const stored = reply.replaceAll("\u0000", "\ufffd")
      expect(result.reply).toBe(stored)
      // A follower joining late gets the turn as a snapshot it can read, then goes on.
      const late = CamelWire.connect(wire, created, { attach: false })
      yield* Effect.addFinalizer(() => promise(() => late.close(0)))
      yield* promise(() => late.ready)
      yield* Effect.sleep("500 millis")
      expect(follower.errors).toEqual([])
      expect(late.errors).toEqual([])
      expect(follower.events.some((event) => event.data.type === "response" && event.data.id === runId)).toBe(true)
      const history = yield* promise(() => wire.json(`/clients/${created.id}/history?limit=50`, created.token))
      expect(history.entries.at(-1).message.content[0].text).toBe(stored)
    }))

  it.scoped("status, configure, continue with an actor, execute with its timeout, abort, history", () =>
    Effect.gen(function*() {
      const { apiKey, wire, world } = yield* tenant("camel-requests")
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [] }, model: "fake/m1" },
          headers: { "idempotency-key": "requests-bot" }
        })
      )
      const watcher = CamelWire.connect(wire, created, { attach: false })
      yield* Effect.addFinalizer(() => promise(() => watcher.close(0)))
      yield* promise(() => watcher.ready)

      const status = yield* promise(() => watcher.request("status", {}))
      expect(status).toMatchObject({ running: false })
      const configured = yield* promise(() =>
        watcher.request("configure", { systemPrompt: "Be terse.", thinkingLevel: "low" })
      )
      expect(configured).toBeDefined()
      expect((yield* promise(() => wire.json(`/v1/agents/${created.id}`, apiKey))).systemPrompt).toBe("Be terse.")

      world.upstream.script({ text: "first" })
      const first = yield* promise(() => watcher.request("prompt", { text: "hello", from: { id: "u1", name: "Ana" } }))
      expect(first.reply).toBe("first")
      world.upstream.script({ text: "continued" })
      const continued = yield* promise(() => watcher.request("continue", { actor: "ops-bot" }))
      expect(continued.reply).toBe("continued")

      const executed = yield* promise(() =>
        watcher.request("execute", { code: "return 6 * 7", timeoutMs: 5000, actor: "ops-bot" })
      )
      expect(executed).toMatchObject({ ok: true, value: 42 })
      const slow = yield* promise(() =>
        watcher.request("execute", { code: "await new Promise((r) => setTimeout(r, 5000)); return 1", timeoutMs: 1000 })
      )
      expect(slow.ok).toBe(false)
      expect(String(slow.limit ?? slow.error)).toMatch(/wall|time/i)

      const refused = yield* promise(() =>
        watcher.send("execute", { code: "return 1", timeoutMs: 10 }).then(() => undefined, (error) => error)
      )
      expect(refused).toMatchObject({ status: 400, code: "INVALID_REQUEST" })

      const aborted = yield* promise(() => watcher.request("abort", {}))
      expect(aborted).toBeDefined()

      const history = yield* promise(() => wire.json(`/clients/${created.id}/history`, created.token))
      expect(history.messages.map((message: any) => message.role)).toEqual(["user", "assistant", "assistant"])
      const page = yield* promise(() => wire.json(`/clients/${created.id}/history?limit=50`, created.token))
      expect(page).toMatchObject({ next: null, total: 3 })
      expect(page.entries.map((entry: any) => entry.index)).toEqual([0, 1, 2])
      expect(watcher.errors).toEqual([])
    }))

  it.scoped("the operator calls: me, providers, definitions by key, agents, tool sources, mounts, inbox", () =>
    Effect.gen(function*() {
      const { apiKey, wire } = yield* tenant("camel-operator")
      const me = yield* promise(() => wire.json("/v1/me", apiKey))
      expect(me).toMatchObject({ via: expect.any(String), tenant: expect.anything() })
      const providers = yield* promise(() => wire.json("/v1/providers", apiKey))
      expect(Array.isArray(providers)).toBe(true)
      expect(providers.map((provider: any) => provider.id)).toContain("fake")

      // upsertDefinition(key, input): the same key is the same definition, a new revision when it changed.
      const input = { name: "triage", model: "fake/m1", systemPrompt: "Sort the tickets." }
      const made = yield* promise(() =>
        wire.json("/v1/definitions", apiKey, { method: "POST", body: input, headers: { "idempotency-key": "triage" } })
      )
      const again = yield* promise(() =>
        wire.json("/v1/definitions", apiKey, { method: "POST", body: input, headers: { "idempotency-key": "triage" } })
      )
      expect(again).toMatchObject({ id: made.id, revision: made.revision })
      const changed = yield* promise(() =>
        wire.json("/v1/definitions", apiKey, {
          method: "POST",
          body: { ...input, systemPrompt: "Sort the tickets by urgency." },
          headers: { "idempotency-key": "triage" }
        })
      )
      expect(changed).toMatchObject({ id: made.id, revision: made.revision + 1 })
      const definitions = yield* promise(() => wire.json("/v1/definitions", apiKey))
      expect(definitions.map((definition: any) => definition.id)).toEqual([made.id])
      const updated = yield* promise(() =>
        wire.json(`/v1/definitions/${made.id}`, apiKey, { method: "PATCH", body: { description: "the desk" } })
      )
      expect(updated.description).toBe("the desk")
      expect((yield* promise(() => wire.json(`/v1/definitions/${made.id}`, apiKey))).id).toBe(made.id)

      // An agent from the definition, declared with no tools, as Agents.upsert sends it.
      const agent = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [] }, definition: made.id },
          headers: { "idempotency-key": "triage-agent" }
        })
      )
      expect(agent.id).toMatch(CamelWire.agentIdPattern)
      const listed = yield* promise(() => wire.json("/v1/agents", apiKey))
      expect(listed).toEqual([expect.objectContaining({ id: agent.id, key: "triage-agent" })])
      const detail = yield* promise(() => wire.json(`/v1/agents/${agent.id}?schemas=true`, apiKey))
      expect(Array.isArray(detail.toolSources)).toBe(true)

      // Mounts: read, then a volume of the tenant's mounted read-only beside the workspace.
      const mounts = yield* promise(() => wire.json(`/v1/agents/${agent.id}/mounts`, apiKey))
      expect(mounts).toEqual([expect.objectContaining({ path: "/workspace", mode: "rw" })])
      const volume = yield* promise(() => wire.json("/v1/volumes", apiKey, { method: "POST", body: { name: "docs" } }))
      expect(volume.id).toMatch(CamelWire.volumeIdPattern)
      const set = yield* promise(() =>
        wire.json(`/v1/agents/${agent.id}/mounts`, apiKey, {
          method: "PUT",
          body: { mounts: [...mounts, { volumeId: volume.id, path: "/docs", mode: "ro" }] }
        })
      )
      expect(set.map((mount: any) => mount.path)).toEqual(["/workspace", "/docs"])
      expect((yield* promise(() => wire.json(`/v1/agents/${agent.id}/mounts`, apiKey))).length).toBe(2)

      const token = yield* promise(() =>
        wire.json(`/v1/agents/${agent.id}/browser-tokens`, apiKey, { method: "POST", body: {} })
      )
      expect(token).toMatchObject({ token: expect.any(String), agentId: agent.id, expiresAt: expect.any(Number) })
      expect(yield* promise(() => wire.json("/v1/inputs?state=pending", apiKey))).toEqual([])

      const removed = yield* promise(() => wire.json(`/v1/definitions/${made.id}`, apiKey, { method: "DELETE" }))
      expect(removed.deleted).toBe(true)
      const provider = yield* promise(() => wire.json("/v1/providers/fake", apiKey, { method: "DELETE" }))
      expect(provider).toBeDefined()
    }))

  it.scoped("the agent's own calls: inputs answered by id, schedules, metadata, uploads, files, links, delete", () =>
    Effect.gen(function*() {
      const { apiKey, wire, world } = yield* tenant("camel-agent")
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [] }, model: "fake/m1", builtins: ["ask_user", "schedule"] },
          headers: { "idempotency-key": "agent-calls" }
        })
      )
      const client = CamelWire.connect(wire, created, { attach: false })
      yield* Effect.addFinalizer(() => promise(() => client.close(0)))
      yield* promise(() => client.ready)
      const own = (path: string, options?: Parameters<CamelWire.Transport["json"]>[2]) =>
        promise(() => wire.json(`/clients/${created.id}${path}`, created.token, options))

      // A question: the run stops input_required; the answer posted to the input resumes it.
      world.upstream.script({
        toolCalls: [{
          id: "call_q",
          name: "ask_user",
          arguments: { questions: [{ question: "Which color?", options: [{ label: "red" }, { label: "blue" }] }] }
        }]
      })
      const stopped = yield* promise(() => client.request("prompt", { text: "paint it", from: { id: "u1" } }))
      expect(stopped.stopped).toBe("input_required")
      const pending = yield* own("/inputs?state=pending")
      expect(pending).toEqual([expect.objectContaining({ kind: "question", state: "pending" })])
      expect(yield* promise(() => wire.json("/v1/inputs?state=pending", apiKey))).toEqual([
        expect.objectContaining({ id: pending[0].id })
      ])
      world.upstream.script({ text: "Blue it is." })
      const answered = yield* own(`/inputs/${pending[0].id}`, {
        method: "POST",
        body: { action: "accept", content: { answers: { "Which color?": "blue" } }, from: { id: "u1" } }
      })
      expect(answered.input.state).toBe("answered")
      const resumed = yield* promise(() => client.outcome(answered.request.id))
      expect(resumed.result.reply).toBe("Blue it is.")

      // Schedules.
      const scheduled = yield* own("/schedules", { method: "POST", body: { text: "check in", inSeconds: 3600 } })
      expect(scheduled).toMatchObject({ id: expect.any(String), agent: created.id, text: "check in" })
      expect((yield* own("/schedules")).map((schedule: any) => schedule.id)).toEqual([scheduled.id])
      expect(yield* own(`/schedules/${scheduled.id}`, { method: "DELETE" })).toBeDefined()
      expect(yield* own("/schedules")).toEqual([])

      // Metadata names the agent.
      yield* own("/metadata", { method: "POST", body: { name: "Painter", type: "helper" } })
      expect(yield* promise(() => wire.json(`/v1/agents/${created.id}`, apiKey))).toMatchObject({
        name: "Painter",
        type: "helper"
      })

      // An attachment: uploaded bytes, then named in the prompt by the path the upload answered.
      const runId = Crypto.randomUUID()
      const uploaded = yield* promise(() =>
        wire.raw(`/clients/${created.id}/uploads/${runId}/notes.txt`, created.token, {
          method: "PUT",
          body: new TextEncoder().encode("the notes"),
          headers: { "content-type": "text/plain" }
        }).then((response): Promise<any> => response.json())
      )
      expect(uploaded.path).toEqual(expect.any(String))
      world.upstream.script({ text: "read them" })
      const withFile = yield* promise(() =>
        client.request("prompt", { text: "read my notes", files: [{ path: uploaded.path }] }, runId)
      )
      expect(withFile.reply).toBe("read them")

      // Files: listed, written, read back with their version; a link read without a token.
      const written = yield* promise(() =>
        wire.raw(`/clients/${created.id}/files/workspace/report.md`, created.token, {
          method: "PUT",
          body: new TextEncoder().encode("# Report"),
          headers: { "content-type": "text/markdown" }
        }).then((response): Promise<any> => response.json())
      )
      expect(written).toMatchObject({ path: "/workspace/report.md", version: expect.any(Number), size: 8 })
      const listed = yield* own("/files")
      expect(listed.files.map((file: any) => file.path)).toContain("/workspace/report.md")
      const read = yield* promise(() => wire.raw(`/clients/${created.id}/files/workspace/report.md`, created.token))
      expect(Number(read.headers.get("x-file-version"))).toBe(written.version)
      expect(yield* promise(() => read.text())).toBe("# Report")
      const link = yield* own("/links", { method: "POST", body: { path: "/workspace/report.md" } })
      expect(link).toMatchObject({ method: "GET", path: "/workspace/report.md", url: expect.any(String) })
      const viaLink = yield* promise(() => fetch(link.url).then((response) => response.text()))
      expect(viaLink).toBe("# Report")

      // Delete: afterwards its stream is final for the client (not a 404 it would try again for ever).
      const deleted = yield* own("", { method: "DELETE" })
      expect(deleted).toBeDefined()
      const after = yield* promise(() =>
        fetch(`${world.node.rest}/clients/${created.id}/events?snapshot=1&watch=1`, {
          headers: { authorization: `Bearer ${created.token}`, accept: "text/event-stream", "last-event-id": "0" }
        })
      )
      expect([401, 403, 410]).toContain(after.status)
      yield* promise(() => after.body?.cancel() ?? Promise.resolve())
    }))

  it.scoped("volumes: snapshots, forks, changes, files with versions and ranges, links both ways", () =>
    Effect.gen(function*() {
      const { apiKey, wire } = yield* tenant("camel-volumes")
      const volume = yield* promise(() => wire.json("/v1/volumes", apiKey, { method: "POST", body: {} }))
      expect(volume.id).toMatch(CamelWire.volumeIdPattern)
      const base = `/v1/volumes/${volume.id}`
      const put = (path: string, text: string, headers: Record<string, string> = {}) =>
        promise(() =>
          wire.raw(`${base}/files/${path}`, apiKey, {
            method: "PUT",
            body: new TextEncoder().encode(text),
            headers: { "content-type": "text/plain", ...headers }
          }).then((response): Promise<any> => response.json())
        )
      const first = yield* put("docs/a.txt", "alpha", { "if-none-match": "*" })
      expect(first).toMatchObject({ path: "docs/a.txt", version: expect.any(Number), size: 5 })
      const refused = yield* Effect.promise(() =>
        wire.raw(`${base}/files/docs/a.txt`, apiKey, {
          method: "PUT",
          body: new TextEncoder().encode("again"),
          headers: { "if-none-match": "*" }
        }).then(() => undefined, (error) => error)
      )
      expect(refused).toBeInstanceOf(CamelWire.WireError)
      const second = yield* put("docs/a.txt", "alphabet", { "if-match": `"${first.version}"` })
      expect(second.version).toBeGreaterThan(first.version)

      const ranged = yield* promise(() =>
        wire.raw(`${base}/files/docs/a.txt`, apiKey, { headers: { range: "bytes=0-4" } })
      )
      expect(ranged.status).toBe(206)
      expect(yield* promise(() => ranged.text())).toBe("alpha")
      expect(Number(ranged.headers.get("x-file-version"))).toBe(second.version)

      const listing = yield* promise(() => wire.json(`${base}/files?prefix=docs/`, apiKey))
      expect(listing.files.map((file: any) => file.path)).toEqual(["docs/a.txt"])

      const snapshot = yield* promise(() =>
        wire.json(`${base}/snapshots`, apiKey, { method: "POST", body: { name: "v1" } })
      )
      expect(snapshot).toMatchObject({ id: expect.any(String), volume: volume.id, name: "v1" })
      expect((yield* promise(() => wire.json(`${base}/snapshots`, apiKey))).map((s: any) => s.id)).toEqual([
        snapshot.id
      ])
      yield* put("docs/a.txt", "changed after the snapshot")
      const fork = yield* promise(() =>
        wire.json(`${base}/fork`, apiKey, { method: "POST", body: { name: "from v1", snapshot: snapshot.id } })
      )
      expect(fork.id).toMatch(CamelWire.volumeIdPattern)
      const forked = yield* promise(() =>
        wire.raw(`/v1/volumes/${fork.id}/files/docs/a.txt`, apiKey).then((response) => response.text())
      )
      expect(forked).toBe("alphabet")

      const changes = yield* promise(() => wire.json(`${base}/changes?since=0`, apiKey))
      expect(changes.changes.map((change: any) => [change.path, change.kind])).toEqual([
        ["docs/a.txt", "write"],
        ["docs/a.txt", "write"],
        ["docs/a.txt", "write"]
      ])
      expect(changes.seq).toBe(changes.changes.at(-1).seq)

      // A link to write, then one to read, both without a token.
      const upload = yield* promise(() =>
        wire.json(`${base}/links`, apiKey, { method: "POST", body: { path: "in/b.txt", method: "PUT", maxBytes: 100 } })
      )
      const sent = yield* promise(() => fetch(upload.url, { method: "PUT", body: "from a link" }))
      expect(sent.status).toBeLessThan(300)
      const download = yield* promise(() =>
        wire.json(`${base}/links`, apiKey, { method: "POST", body: { path: "in/b.txt" } })
      )
      expect(yield* promise(() => fetch(download.url).then((response) => response.text()))).toBe("from a link")

      const removed = yield* promise(() =>
        wire.raw(`${base}/files/in/b.txt`, apiKey, { method: "DELETE" }).then((response): Promise<any> =>
          response.json()
        )
      )
      expect(removed).toBeDefined()
      expect(yield* promise(() => wire.json(`${base}/snapshots/${snapshot.id}`, apiKey, { method: "DELETE" })))
        .toBeDefined()
      expect((yield* promise(() => wire.json("/v1/volumes", apiKey))).map((v: any) => v.id)).toEqual(
        expect.arrayContaining([volume.id, fork.id])
      )
      expect(yield* promise(() => wire.json(base, apiKey, { method: "DELETE" }))).toBeDefined()
    }))
})

it.scopedLive(
  "across a drain: the application follows its agent and serves the next call; a follower misses nothing",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({
        size: 2,
        databaseUrl,
        env: { ALLOW_PRIVATE_URLS: "true", RUNNER_LEASE_SECONDS: "4" }
      })
      const { token: apiKey } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "drain")
      // One base URL, each call sent to a node that is up, as through a load balancer.
      const wire = CamelWire.transport(cluster.members[0]!.node.rest, cluster.fetchThroughLive)
      const slow: CamelWire.McpTool = {
        name: "slow",
        description: "answers after a while",
        inputSchema: { type: "object", properties: { n: { type: "number" } } }
      }
      const created = yield* promise(() =>
        wire.json("/v1/agents", apiKey, {
          method: "POST",
          body: { mcp: { tools: [slow] }, model: "fake/m1" },
          headers: { "idempotency-key": "drain-bot" }
        })
      )
      const called: Array<number> = []
      const app = CamelWire.connect(wire, created, {
        attach: true,
        tools: [slow],
        syncTools: false,
        call: async (_, args) => {
          called.push(Number(args.n))
          await new Promise((resolve) => setTimeout(resolve, 2_000))
          return { content: [{ type: "text", text: `slow done ${args.n}` }] }
        }
      })
      yield* Effect.addFinalizer(() => promise(() => app.close(0)))
      const follower = CamelWire.connect(wire, created, { attach: false })
      yield* Effect.addFinalizer(() => promise(() => follower.close(0)))
      yield* promise(() => Promise.all([app.ready, follower.ready]))
      yield* Effect.promise(async () => {
        for (let i = 0; i < 200; i++) {
          if ((await wire.json(`/v1/agents/${created.id}`, apiKey)).connected === true) return
          await new Promise((r) => setTimeout(r, 50))
        }
      })

      upstream.script({ toolCalls: [{ id: "call_d1", name: "slow", arguments: { n: 1 } }] })
      upstream.script({ toolCalls: [{ id: "call_d2", name: "slow", arguments: { n: 2 } }] })
      upstream.script({ text: "done after the move" })
      const runId = Crypto.randomUUID()
      yield* promise(() => app.send("prompt", { text: "go" }, runId))
      yield* Effect.promise(async () => {
        for (let i = 0; i < 200 && called.length === 0; i++) await new Promise((r) => setTimeout(r, 50))
      })
      // Drain the node running the turn, mid-call.
      const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${created.id}'`)
      const owner = cluster.members.findIndex((member) => member.runnerAddress === row?.owner)
      expect(owner).toBeGreaterThanOrEqual(0)
      yield* cluster.stop(owner, "SIGTERM")

      const outcome = yield* promise(() => app.outcome(runId))
      expect(outcome.result).toMatchObject({ reply: "done after the move", error: null })
      expect(called).toEqual([1, 2])
      // Both followed: the application over a new stream, the follower (on whichever node its stream reached,
      // the one stopped or the one left) without a gap or a repeat.
      yield* Effect.promise(async () => {
        for (let i = 0; i < 200; i++) {
          if (follower.events.some((event) => event.data.type === "response" && event.data.id === runId)) return
          await new Promise((r) => setTimeout(r, 50))
        }
      })
      expect(app.streams.length).toBeGreaterThan(1)
      expect(follower.frames.filter((frame) => frame.data.type === "snapshot")).toEqual([])
      const ids = follower.events.map((event) => event.id)
      expect(ids).toEqual([...ids].sort((a, b) => a - b))
      const types = follower.events.filter((event) => event.data.requestId === runId).map((event) =>
        event.data.event.type
      )
      expect(types).toContain("turn_resumed")
      expect(types.filter((type) => type === "tool_execution_start")).toHaveLength(2)
      // What the application was told went wrong: at most an answer posted under its old connection once the
      // agent had moved (404 NOT_FOUND: that call's outcome is unknown to the model, never sent again), and 503s
      // while the node drained.
      expect(
        app.errors.filter((error) =>
          !(error instanceof CamelWire.WireError && (error.status === 503 || error.code === "NOT_FOUND"))
        )
      ).toEqual([])
    }),
  { timeout: 120_000 }
)
