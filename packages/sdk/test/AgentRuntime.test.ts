/**
 * The Promise API's transport, against a local server standing in for the
 * network: retries with the same request id, Retry-After, redirects refused,
 * errors thrown as ApiError, https required. The API itself against a real
 * node is Rest.test.ts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentRuntime, connectAgent } from "../src/AgentRuntime.ts"
import { ApiError, InvalidOptions, TransportError } from "../src/SdkError.ts"
import * as Local from "./fixtures/LocalServer.ts"

const record = { id: "req_1", method: "prompt", state: "running", fingerprint: "f" }

const withServer = <A>(f: (server: Local.LocalServer) => Promise<A>) =>
  Effect.scoped(Effect.flatMap(Local.start, (server) => Effect.promise(() => f(server))))

const gaps = (seen: ReadonlyArray<Local.Seen>) => seen.slice(1).map((request, i) => request.at - seen[i]!.at)

describe("AgentRuntime transport", () => {
  it.live("a prompt is retried with the same request id on 5xx and a cut connection, honouring Retry-After", () =>
    withServer(async (server) => {
      server.script(
        Local.json(503, { error: "draining", code: "UNAVAILABLE" }, { "retry-after": "1" }),
        (_request, response) => response.destroy(),
        Local.json(202, record)
      )
      const runtime = new AgentRuntime({ baseUrl: server.url, apiKey: "art_key" })
      expect(await runtime.prompt("client_1", { text: "hi" })).toEqual(record)
      expect(server.seen).toHaveLength(3)
      const bodies = server.seen.map((request) => JSON.parse(request.body))
      expect(bodies[0].requestId).toMatch(/^req_[0-9a-f]{32}$/)
      expect(bodies.every((body) => body.requestId === bodies[0].requestId && body.text === "hi")).toBe(true)
      expect(server.seen[0]!.url.pathname).toBe("/v1/agents/client_1/prompt")
      expect(server.seen[0]!.headers.authorization).toBe("Bearer art_key")
      const waits = gaps(server.seen)
      expect(waits[0]).toBeGreaterThanOrEqual(990)
      expect(waits[1]).toBeGreaterThanOrEqual(190) // the second failure: 200 ms
    }))

  it.live("429 is retried as Retry-After says; a caller's request id is kept", () =>
    withServer(async (server) => {
      server.script(
        Local.json(429, { error: "slow down", code: "RATE_LIMITED" }, { "retry-after": "0" }),
        Local.json(429, { error: "slow down", code: "RATE_LIMITED" }, { "retry-after": "0" }),
        Local.json(200, record)
      )
      const agent = connectAgent({ baseUrl: server.url, agentId: "client_1", token: "aat_token" })
      await agent.prompt({ text: "hi", requestId: "mine" })
      expect(server.seen.map((request) => JSON.parse(request.body))).toEqual(
        Array(3).fill({ method: "prompt", text: "hi", requestId: "mine" })
      )
      expect(server.seen[0]!.url.pathname).toBe("/clients/client_1/requests")
    }))

  it.live("refusals are thrown as ApiError with status, code and message, and not retried", () =>
    withServer(async (server) => {
      server.script(Local.json(409, { error: "requestId reused with another input", code: "IDEMPOTENCY_CONFLICT" }))
      const agent = connectAgent({ baseUrl: server.url, agentId: "client_1", token: "aat_token" })
      const error = await agent.prompt({ text: "hi" }).catch((error) => error)
      expect(error).toBeInstanceOf(ApiError)
      expect(error).toBeInstanceOf(Error)
      expect(error).toMatchObject({
        status: 409,
        code: "IDEMPOTENCY_CONFLICT",
        message: "requestId reused with another input"
      })
      expect(server.seen).toHaveLength(1)
    }))

  it.live("a 5xx that never ends is given up after three retries; a body that is not the runtime's is HTTP_<status>", () =>
    withServer(async (server) => {
      server.script((_request, response) =>
        response.writeHead(502, { "content-type": "text/html" }).end("<h1>bad</h1>")
      )
      const runtime = new AgentRuntime({ baseUrl: server.url, apiKey: "art_key" })
      const error = await runtime.getAgent("client_1").catch((error) => error)
      expect(error).toMatchObject({ _tag: "ApiError", status: 502, code: "HTTP_502", message: "<h1>bad</h1>" })
      expect(server.seen).toHaveLength(4)
      const waits = gaps(server.seen)
      expect(waits[0]).toBeGreaterThanOrEqual(90)
      expect(waits[1]).toBeGreaterThanOrEqual(190)
      expect(waits[2]).toBeGreaterThanOrEqual(390)
    }))

  it.live("creating an agent is sent once unless it has an idempotency key", () =>
    withServer(async (server) => {
      server.script(Local.json(503, { error: "busy", code: "UNAVAILABLE" }))
      const runtime = new AgentRuntime({ baseUrl: server.url, apiKey: "art_key" })
      await expect(runtime.createAgent({ name: "a" })).rejects.toMatchObject({ status: 503 })
      expect(server.seen).toHaveLength(1)
      server.script(
        Local.json(503, { error: "busy", code: "UNAVAILABLE" }),
        Local.json(201, { id: "client_1", token: "aat_x", expiresAt: null })
      )
      expect(await runtime.createAgent({ name: "a" }, { idempotencyKey: "agent-a" })).toMatchObject({ id: "client_1" })
      expect(server.seen.slice(1).map((request) => request.headers["idempotency-key"])).toEqual(["agent-a", "agent-a"])
    }))

  it.live("redirects are refused, never followed", () =>
    withServer(async (server) => {
      server.script((_request, response) => response.writeHead(307, { location: `${server.url}/v2/agents` }).end())
      const runtime = new AgentRuntime({ baseUrl: server.url, apiKey: "art_key" })
      const error = await runtime.getAgent("client_1").catch((error) => error)
      expect(error).toMatchObject({ status: 307, code: "REDIRECT" })
      expect(error.message).toContain("/v2/agents")
      expect(server.seen).toHaveLength(1)
    }))

  it.live("a connection refused is a TransportError after the retries", () =>
    Effect.promise(async () => {
      const runtime = new AgentRuntime({ baseUrl: "http://127.0.0.1:9", apiKey: "art_key" })
      const error = await runtime.getAgent("client_1").catch((error) => error)
      expect(error).toBeInstanceOf(TransportError)
    }))

  it.live("request(wait) long-polls in steps of at most 25 s until the request settles", () =>
    withServer(async (server) => {
      server.script(Local.json(200, record), Local.json(200, { ...record, state: "completed" }))
      const agent = connectAgent({ baseUrl: server.url, agentId: "client_1", token: "aat_token" })
      expect(await agent.request("req_1", { wait: 60 })).toMatchObject({ state: "completed" })
      expect(server.seen.map((request) => request.url.search)).toEqual(["?wait=25", "?wait=25"])
      expect(server.seen[0]!.url.pathname).toBe("/clients/client_1/requests/req_1")
      server.script(Local.json(200, record))
      expect(await agent.request("req_1")).toMatchObject({ state: "running" })
      expect(server.seen[2]!.url.search).toBe("")
    }))

  it.live("a signal aborts a call", () =>
    withServer(async (server) => {
      server.script((_request, response) => setTimeout(() => response.writeHead(200).end("{}"), 2000))
      const runtime = new AgentRuntime({ baseUrl: server.url, apiKey: "art_key" })
      const controller = new AbortController()
      setTimeout(() => controller.abort(new Error("user gave up")), 100)
      await expect(runtime.getAgent("client_1", { signal: controller.signal })).rejects.toThrow("user gave up")
    }))

  it("requires https, except for localhost and 127.0.0.1", () => {
    expect(() => new AgentRuntime({ baseUrl: "http://runtime.example.com", apiKey: "k" })).toThrow(InvalidOptions)
    expect(() => connectAgent({ baseUrl: "http://10.0.0.1:8787", agentId: "a", token: "t" })).toThrow(/https/)
    expect(() => new AgentRuntime({ baseUrl: "not a url", apiKey: "k" })).toThrow(InvalidOptions)
    for (const baseUrl of ["https://runtime.example.com", "http://localhost:8787", "http://127.0.0.1:8787"]) {
      expect(new AgentRuntime({ baseUrl, apiKey: "k" }).baseUrl).toMatch(/^http/)
    }
  })

  it.live("a base URL with a path keeps it", () =>
    withServer(async (server) => {
      server.script(Local.json(200, { id: "client_1" }))
      await new AgentRuntime({ baseUrl: `${server.url}/runtime/`, apiKey: "k" }).getAgent("client 1")
      expect(server.seen[0]!.url.pathname).toBe("/runtime/v1/agents/client%201")
    }))

  it.live("a list follows the Link header's next pages, on the same path; with a limit it reads one page", () =>
    withServer(async (server) => {
      const runs = [{ id: "run_1" }, { id: "run_2" }, { id: "run_3" }]
      server.script(
        // The link names another host and path: only its query is taken, the token stays with the base URL.
        Local.json(200, runs.slice(0, 2), { link: `<https://elsewhere.example/v9/x?limit=2&after=run_2>; rel="next"` }),
        Local.json(503, { error: "draining", code: "UNAVAILABLE" }, { "retry-after": "0" }),
        Local.json(200, runs.slice(2))
      )
      const runtime = new AgentRuntime({ baseUrl: `${server.url}/runtime`, apiKey: "art_key" })
      expect(await runtime.runs.list()).toEqual(runs)
      expect(server.seen.map((request) => `${request.url.pathname}${request.url.search}`)).toEqual([
        "/runtime/v1/runs",
        "/runtime/v1/runs?limit=2&after=run_2",
        "/runtime/v1/runs?limit=2&after=run_2"
      ])
      expect(server.seen.every((request) => request.headers.authorization === "Bearer art_key")).toBe(true)

      server.script(Local.json(200, runs.slice(0, 1), { link: `</v1/runs?limit=1&after=run_1>; rel="next"` }))
      expect(await runtime.runs.list({ limit: 1 })).toEqual(runs.slice(0, 1))
      expect(server.seen).toHaveLength(4)
      expect(server.seen[3]!.url.search).toBe("?limit=1")
    }))
})
