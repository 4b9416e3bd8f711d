/**
 * MCP tool sources against a real MCP server (the official SDK's) over HTTP
 * on loopback, identity tokens on a real database: listing and its cache,
 * filters, bearer and runtime auth, failures and their backoff, list
 * changes, and calls that are sent once whatever happens to them (progress,
 * deadlines, dropped connections, interruption, ended sessions, egress
 * refusals).
 */
import { McpTestServer } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Redacted } from "effect"
import type { ToolSources } from "../src/index.ts"
import { caller, closedPort, eventually, IdentityLive, issuer, makeSources, serveJwks } from "./fixtures.ts"

const source = (url: string, extra: Partial<ToolSources.McpSource> = {}): ToolSources.McpSource => ({
  kind: "mcp",
  name: "tests",
  url,
  auth: { type: "none" },
  ...extra
})

const names = (listing: ToolSources.Listing) => listing.tools.map((tool) => tool.name)

const textOf = (result: ToolSources.CallResult) => result.content.map((part) => part.text).join("\n")

layer(IdentityLive, { excludeTestServices: true })("MCP tool sources", (it) => {
  it.scoped("lists the tools with their schemas and settings, and calls them", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      const before = Math.floor(Date.now() / 1000)
      const listing = yield* sources.list(source(server.url), caller)
      expect(listing.status).toBe("listed")
      expect(listing.listedAt).toBeGreaterThanOrEqual(before)
      expect(listing.tools).toEqual([
        {
          name: "add",
          description: "Adds two numbers.",
          parameters: {
            type: "object",
            properties: { a: { type: "number" }, b: { type: "number" } },
            required: ["a", "b"]
          },
          executionMode: "parallel"
        },
        {
          name: "echo",
          description: "Answers the text it is given.",
          parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
          executionMode: "sequential"
        },
        {
          name: "slow",
          description: "Waits, reporting progress.",
          parameters: {
            type: "object",
            properties: { ms: { type: "number" }, progressEveryMs: { type: "number" } },
            required: ["ms"]
          },
          deadlineMs: 1000,
          executionMode: "parallel"
        },
        {
          name: "fail",
          description: "Always fails.",
          parameters: { type: "object", properties: {} },
          executionMode: "sequential"
        }
      ])

      expect(yield* sources.call(source(server.url), caller, "add", { a: 2, b: 3 })).toEqual({
        content: [{ type: "text", text: "5" }],
        isError: false
      })
      expect(yield* sources.call(source(server.url), caller, "fail", {})).toEqual({
        content: [{ type: "text", text: "it failed, as it always does" }],
        isError: true,
        code: "failed"
      })
      const unknown = yield* sources.call(source(server.url), caller, "nope", {})
      expect(unknown).toMatchObject({ isError: true, code: "unavailable" })
      expect(textOf(unknown)).toContain("offers no tool nope")

      // Listed once, on one session that served every call.
      expect(server.received.filter((message) => message.method === "tools/list")).toHaveLength(1)
      expect(server.received.filter((message) => message.method === "initialize")).toHaveLength(1)
      expect(server.count("add")).toBe(1)
      expect(server.count("nope")).toBe(0)
    }))

  it.scoped("include and exclude filter the tools by name; a filtered tool is never called", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      const filtered = source(server.url, { tools: { include: ["add", "echo", "fail"], exclude: ["echo"] } })
      expect(names(yield* sources.list(filtered, caller))).toEqual(["add", "fail"])
      expect(yield* sources.call(filtered, caller, "echo", { text: "hi" })).toMatchObject({ code: "unavailable" })
      expect(server.count("echo")).toBe(0)
      // Another filter is another source: its own listing.
      expect(names(yield* sources.list(source(server.url, { tools: { exclude: ["slow"] } }), caller)))
        .toEqual(["add", "echo", "fail"])
    }))

  it.scoped("bearer auth: the right token lists and calls; a wrong one is an error status saying 401", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start({ auth: { bearer: "s3cret" } })
      const sources = yield* makeSources()
      const right = source(server.url, { auth: { type: "bearer", token: Redacted.make("s3cret") } })
      expect((yield* sources.list(right, caller)).status).toBe("listed")
      expect(textOf(yield* sources.call(right, caller, "echo", { text: "hi" }))).toBe("hi")

      const wrong = source(server.url, { auth: { type: "bearer", token: Redacted.make("guess") } })
      expect(yield* sources.list(wrong, caller)).toEqual({
        status: "error",
        tools: [],
        error: "the MCP server answered 401"
      })
      const refused = yield* sources.call(wrong, caller, "echo", { text: "hi" })
      expect(refused).toMatchObject({ isError: true, code: "unavailable" })
      expect(textOf(refused)).toContain("the MCP server answered 401")
      expect(server.count("echo")).toBe(1)
    }))

  it.scoped("runtime auth: each agent lists with its own identity; the server verifies every token", () =>
    Effect.gen(function*() {
      const jwksUrl = yield* serveJwks
      const server = yield* McpTestServer.start({ auth: { runtime: { jwksUrl, issuer } } })
      const sources = yield* makeSources()
      const runtime = source(server.url, { auth: { type: "runtime" } })
      const alice: ToolSources.Caller = {
        tenantId: "tn_1",
        agentId: "client_1",
        subject: "user_42",
        actor: "alice@example.com",
        context: { ticket: "T-1" },
        definition: "support",
        origin: "prompt"
      }
      expect((yield* sources.list(runtime, alice)).status).toBe("listed")
      expect(textOf(yield* sources.call(runtime, { ...alice, actor: "bob@example.com" }, "echo", { text: "hi" })))
        .toBe("hi")
      const call = server.received.find((message) => message.method === "tools/call")!
      expect(call.claims).toMatchObject({
        iss: issuer,
        aud: server.url,
        sub: "user_42",
        act: "bob@example.com",
        ctx: { ticket: "T-1" },
        tenant: "tn_1",
        agent: "client_1",
        definition: "support",
        origin: "prompt"
      })

      // Another agent of the tenant: its own listing and session, under its own identity.
      expect((yield* sources.list(runtime, { ...caller, agentId: "client_2" })).status).toBe("listed")
      const listings = server.received.filter((message) => message.method === "tools/list")
      expect(listings.map((message) => message.claims?.agent)).toEqual(["client_1", "client_2"])
      expect(listings[1]!.claims).toMatchObject({ sub: "client_2", tenant: "tn_1" })
      expect(server.sessions()).toBe(2)
      // Every message carried a token that verified: none was refused.
      expect(server.received.every((message) => message.claims?.aud === server.url)).toBe(true)
    }))

  it.scoped("peek answers unlisted before the first listing and starts it; later peeks answer the cache", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      expect(yield* sources.peek(source(server.url), caller)).toEqual({ status: "unlisted", tools: [] })
      const listed = yield* eventually(sources.peek(source(server.url), caller), (l) => l.status === "listed")
      expect(names(listed)).toEqual(["add", "echo", "slow", "fail"])
      expect(yield* sources.list(source(server.url), caller, { wait: Duration.zero })).toEqual(listed)
      expect(server.received.filter((message) => message.method === "tools/list")).toHaveLength(1)
    }))

  it.scoped("list waits at most `wait`, answering unlisted while the listing goes on", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      expect(yield* sources.list(source(server.url), caller, { wait: Duration.zero })).toEqual({
        status: "unlisted",
        tools: []
      })
      expect((yield* sources.list(source(server.url), caller)).status).toBe("listed")
      expect(server.received.filter((message) => message.method === "tools/list")).toHaveLength(1)
    }))

  it.scoped("a server answering 500 is an error status, retried only after the backoff, then listed", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources({ retryAfter: Duration.seconds(1) })
      yield* server.failRequests(500)
      const failed = yield* sources.list(source(server.url), caller)
      expect(failed).toEqual({ status: "error", tools: [], error: "the MCP server answered 500" })
      const call = yield* sources.call(source(server.url), caller, "add", { a: 1, b: 2 })
      expect(call).toMatchObject({ isError: true, code: "unavailable" })
      expect(textOf(call)).toBe(
        "the tool source tests could not be listed (the MCP server answered 500), so the call was not sent."
      )

      // The server is well again, but within the backoff nothing is tried: the error stands.
      yield* server.failRequests(undefined)
      expect(yield* sources.list(source(server.url), caller)).toEqual(failed)
      expect(yield* sources.peek(source(server.url), caller)).toEqual(failed)
      expect(server.received).toHaveLength(0)

      yield* Effect.sleep(Duration.millis(1100))
      expect((yield* sources.list(source(server.url), caller)).status).toBe("listed")
      expect(textOf(yield* sources.call(source(server.url), caller, "add", { a: 1, b: 2 }))).toBe("3")
    }))

  it.scoped("a refused connection is an error status in plain words", () =>
    Effect.gen(function*() {
      const sources = yield* makeSources()
      const port = yield* closedPort
      expect(yield* sources.list(source(`http://127.0.0.1:${port}/mcp`), caller)).toEqual({
        status: "error",
        tools: [],
        error: "could not connect: ECONNREFUSED"
      })
    }))

  it.scoped("notifications/tools/list_changed re-lists: added and removed tools show in the cache", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      const tests = source(server.url)
      expect(names(yield* sources.list(tests, caller))).toEqual(["add", "echo", "slow", "fail"])
      yield* server.addTool({
        name: "multiply",
        description: "Multiplies.",
        inputSchema: { type: "object", properties: { a: { type: "number" } } }
      })
      const added = yield* eventually(sources.peek(tests, caller), (l) => names(l).includes("multiply"))
      expect(names(added)).toEqual(["add", "echo", "slow", "fail", "multiply"])
      expect(textOf(yield* sources.call(tests, caller, "multiply", { a: 6 }))).toBe('{"a":6}')

      yield* server.removeTool("echo")
      const removed = yield* eventually(sources.peek(tests, caller), (l) => !names(l).includes("echo"))
      expect(names(removed)).toEqual(["add", "slow", "fail", "multiply"])
      expect(server.received.filter((message) => message.method === "tools/list")).toHaveLength(3)
    }))

  it.scoped("progress reaches onProgress and keeps a call alive past its deadline", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      const progress: Array<unknown> = []
      const started = Date.now()
      // slow's deadline is 1 s; a report every 200 ms restarts it.
      const result = yield* sources.call(source(server.url), caller, "slow", { ms: 2500, progressEveryMs: 200 }, {
        onProgress: (report) => Effect.sync(() => progress.push(report))
      })
      expect(result.isError).toBe(false)
      expect(textOf(result)).toMatch(/^slept \d+ ms$/)
      expect(Date.now() - started).toBeGreaterThanOrEqual(2500)
      expect(progress.length).toBeGreaterThanOrEqual(5)
      expect(progress[0]).toEqual({ progress: 1 })
      expect(server.count("slow")).toBe(1)
    }))

  it.scoped("no answer before the deadline: timeout, outcome unknown, sent exactly once", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      yield* sources.list(source(server.url), caller)
      const started = Date.now()
      const result = yield* sources.call(source(server.url), caller, "slow", { ms: 3000, progressEveryMs: 0 })
      const elapsed = Date.now() - started
      expect(result).toMatchObject({ isError: true, code: "timeout" })
      expect(textOf(result)).toBe(
        "No answer within 1000 ms; the call may or may not have taken effect. It was not sent again."
      )
      expect(elapsed).toBeGreaterThanOrEqual(1000)
      expect(elapsed).toBeLessThan(2000)
      // The server hears the call was given up.
      const call = server.received.find((message) => message.method === "tools/call")!
      yield* eventually(Effect.sync(() => server.cancelled), (cancelled) => cancelled.length > 0)
      expect(server.cancelled).toEqual([call.id])
      yield* Effect.sleep(Duration.millis(2500))
      expect(server.count("slow")).toBe(1)
    }))

  it.scoped("a connection dropped mid-call: connection_lost at once, sent once; the next call works", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      const tests = source(server.url)
      yield* sources.list(tests, caller)
      const call = yield* Effect.fork(sources.call(tests, caller, "slow", { ms: 5000, progressEveryMs: 0 }))
      yield* eventually(Effect.sync(() => server.count("slow")), (count) => count === 1)
      const dropped = Date.now()
      yield* server.dropConnections
      const result = yield* Fiber.join(call)
      expect(Date.now() - dropped).toBeLessThan(500)
      expect(result).toMatchObject({ isError: true, code: "connection_lost" })
      expect(textOf(result)).toBe(
        "The connection to the tool's server was lost while the call was out; it may or may not have taken effect. " +
          "It was not sent again."
      )
      expect(textOf(yield* sources.call(tests, caller, "echo", { text: "still here" }))).toBe("still here")
      expect(server.count("slow")).toBe(1)
    }))

  it.scoped("interrupting a call sends notifications/cancelled for it", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      yield* sources.list(source(server.url), caller)
      const call = yield* Effect.fork(
        sources.call(source(server.url), caller, "slow", { ms: 5000, progressEveryMs: 0 })
      )
      yield* eventually(Effect.sync(() => server.count("slow")), (count) => count === 1)
      yield* Fiber.interrupt(call)
      const sent = server.received.find((message) => message.method === "tools/call")!
      yield* eventually(Effect.sync(() => server.cancelled), (cancelled) => cancelled.length > 0)
      expect(server.cancelled).toEqual([sent.id])
      expect(server.count("slow")).toBe(1)
    }))

  it.scoped("a session the server ended: that call is not sent; the next one opens a new session", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources()
      const tests = source(server.url)
      expect(textOf(yield* sources.call(tests, caller, "echo", { text: "one" }))).toBe("one")
      yield* server.endSessions
      const refused = yield* sources.call(tests, caller, "echo", { text: "two" })
      expect(refused).toMatchObject({ isError: true, code: "unavailable" })
      expect(textOf(refused)).toContain("ended the session")
      expect(textOf(yield* sources.call(tests, caller, "echo", { text: "three" }))).toBe("three")
      expect(server.received.filter((message) => message.method === "initialize")).toHaveLength(2)
      expect(server.received.filter((message) => message.method === "tools/call").map((m) => m.params?.arguments))
        .toEqual([{ text: "one" }, { text: "two" }, { text: "three" }])
    }))

  it.scoped("an old listing is served while it is refreshed, on a new session when the server ended the old one", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources({ refreshAfter: Duration.seconds(1) })
      const tests = source(server.url)
      const first = yield* sources.list(tests, caller)
      yield* server.endSessions
      yield* server.addTool({ name: "later", inputSchema: { type: "object" } })
      yield* Effect.sleep(Duration.millis(1100))
      // Old: answered from the cache at once, refreshed behind it.
      expect(yield* sources.list(tests, caller, { wait: Duration.zero })).toEqual(first)
      const refreshed = yield* eventually(sources.peek(tests, caller), (l) => names(l).includes("later"))
      expect(refreshed.status).toBe("listed")
      expect(refreshed.listedAt).toBeGreaterThan(first.listedAt!)
      expect(server.received.filter((message) => message.method === "initialize")).toHaveLength(2)
    }))

  it.scoped("egress refuses a private address: an error listing, calls not sent, nothing reaches the server", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      const sources = yield* makeSources({}, { allowPrivate: false })
      const privateSource = source(server.url.replace("http:", "https:"))
      const listing = yield* sources.list(privateSource, caller)
      expect(listing.status).toBe("error")
      expect(listing.error).toContain("127.0.0.1 is not a public address")
      const call = yield* sources.call(privateSource, caller, "add", { a: 1, b: 2 })
      expect(call).toMatchObject({ isError: true, code: "unavailable" })
      expect(server.received).toHaveLength(0)
    }))

  it.scoped("sessions end with the layer, and after the idle timeout", () =>
    Effect.gen(function*() {
      const server = yield* McpTestServer.start()
      yield* Effect.scoped(Effect.gen(function*() {
        const sources = yield* makeSources()
        yield* sources.list(source(server.url), caller)
        expect(server.sessions()).toBe(1)
      }))
      expect(server.sessions()).toBe(0)

      const sources = yield* makeSources({ idleTimeout: Duration.millis(300) })
      yield* sources.list(source(server.url), caller)
      expect(server.sessions()).toBe(1)
      yield* eventually(Effect.sync(() => server.sessions()), (sessions) => sessions === 0, Duration.seconds(3))
      expect(server.sessions()).toBe(0)
      // Forgotten, so listed again on its next use.
      expect(yield* sources.peek(source(server.url), caller)).toEqual({ status: "unlisted", tools: [] })
    }))
})
