/**
 * Every error this part of the API can give, with its exact body, and the
 * spec's limits that apply here.
 */
import { ApiError } from "@agent-runtime/domain"
import { type DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { SqlError } from "@effect/sql"
import { expect, it, layer } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer } from "effect"
import * as Http_ from "node:http"
import * as Errors from "../src/http/Errors.ts"

class Node extends Context.Tag("Node")<Node, TestNode.TestNode & { readonly databaseUrl: string }>() {}

const maxBodyBytes = 65536

const NodeLive = Layer.scoped(
  Node,
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const node = yield* TestNode.start({ databaseUrl, env: { MAX_BODY_BYTES: String(maxBodyBytes) } })
    return { ...node, databaseUrl }
  })
)

const setup = Effect.gen(function*() {
  const node = yield* Node
  const api = Http.client(node.rest)
  const tenant = yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "acme" } })
  return { node, api, key: tenant.body.token as string }
})

layer(NodeLive)("errors", (it) => {
  it.effect("schema failures name the field and why, and change nothing", () =>
    Effect.gen(function*() {
      const { api, key } = yield* setup
      const before = (yield* api.get("/v1/tokens", { token: key })).body.length
      expect(yield* api.post("/v1/tokens", { token: key, json: {} })).toMatchObject({
        status: 400,
        body: { error: "invalid request: name: is missing", code: "INVALID_REQUEST" }
      })
      expect(yield* api.post("/v1/tokens", { token: key, json: { name: 7 } })).toMatchObject({
        status: 400,
        body: { error: "invalid request: name: Expected string, actual 7", code: "INVALID_REQUEST" }
      })
      const tooLong = yield* api.post("/v1/tokens", { token: key, json: { name: "x".repeat(81) } })
      expect(tooLong.status).toBe(400)
      expect(tooLong.body.code).toBe("INVALID_REQUEST")
      expect(tooLong.body.error).toMatch(/^invalid request: name: Expected a string at most 80 character\(s\) long/)
      expect(Object.keys(tooLong.body).sort()).toEqual(["code", "error"])
      expect((yield* api.get("/v1/tokens", { token: key })).body.length).toBe(before)
    }))

  it.effect("token names take 1 to 80 characters", () =>
    Effect.gen(function*() {
      const { api, key } = yield* setup
      expect((yield* api.post("/v1/tokens", { token: key, json: { name: "x".repeat(80) } })).status).toBe(201)
      expect((yield* api.post("/v1/tokens", { token: key, json: { name: "x" } })).status).toBe(201)
      expect((yield* api.post("/v1/tokens", { token: key, json: { name: "" } })).body).toEqual({
        error: 'invalid request: name: Expected a string at least 1 character(s) long, actual ""',
        code: "INVALID_REQUEST"
      })
    }))

  it.effect("bad JSON is INVALID_REQUEST", () =>
    Effect.gen(function*() {
      const { api, key } = yield* setup
      const response = yield* api.post("/v1/tokens", {
        token: key,
        body: '{"name":',
        headers: { "content-type": "application/json" }
      })
      expect(response).toMatchObject({
        status: 400,
        body: { error: "request body is not valid JSON", code: "INVALID_REQUEST" }
      })
    }))

  it.effect("query parameters are checked", () =>
    Effect.gen(function*() {
      const { api, key } = yield* setup
      for (const limit of ["0", "1001", "abc", "1.5"]) {
        const response = yield* api.get(`/v1/tokens?limit=${limit}`, { token: key })
        expect(response.status).toBe(400)
        expect(response.body.code).toBe("INVALID_REQUEST")
        expect(response.body.error).toMatch(/^invalid request: limit: /)
      }
      expect((yield* api.get("/v1/tokens?limit=1000", { token: key })).status).toBe(200)
    }))

  it.effect("pages follow the Link header's next page", () =>
    Effect.gen(function*() {
      const { api, key } = yield* setup
      for (const name of ["a", "b", "c", "d"]) yield* api.post("/v1/tokens", { token: key, json: { name } })
      const seen: Array<string> = []
      let path: string | null = "/v1/tokens?limit=2"
      for (let i = 0; i < 10 && path !== null; i++) {
        const page: Http.Response = yield* api.get(path, { token: key })
        expect(page.status, page.text).toBe(200)
        expect(page.body.length).toBeLessThanOrEqual(2)
        for (const token of page.body as Array<{ id: string }>) seen.push(token.id)
        const link = page.headers.get("link")
        // A full page may have more after it; the last page (here 1 of 5) has no Link.
        if (page.body.length < 2) expect(link).toBeNull()
        else expect(link).toBe(`</v1/tokens?limit=2&after=${seen.at(-1)}>; rel="next"`)
        path = link === null ? null : /^<([^>]+)>; rel="next"$/.exec(link)![1]!
      }
      expect(seen.length).toBe(5)
      expect(new Set(seen).size).toBe(5)
      expect([...seen].sort()).toEqual(seen)
      // Without limit the whole list comes at once (up to 1000), with no Link.
      const whole = yield* api.get("/v1/tokens", { token: key })
      expect(whole.body.map((token: { id: string }) => token.id)).toEqual(seen)
      expect(whole.headers.get("link")).toBeNull()
      // Other query parameters are kept in the next page's URL.
      const kept = yield* api.get("/v1/tokens?limit=4&x=1", { token: key })
      expect(kept.headers.get("link")).toBe(`</v1/tokens?limit=4&x=1&after=${seen[3]}>; rel="next"`)
    }))

  it.effect("unknown routes and resources are NOT_FOUND", () =>
    Effect.gen(function*() {
      const { api, key, node } = yield* setup
      expect(yield* api.get("/v1/nowhere", { token: key })).toMatchObject({
        status: 404,
        body: { error: "no route GET /v1/nowhere", code: "NOT_FOUND" }
      })
      expect(yield* api.delete("/v1/tokens/tok_0000", { token: key })).toMatchObject({
        status: 404,
        body: { error: "no token tok_0000", code: "NOT_FOUND" }
      })
      expect(yield* api.get("/v1/admin/tenants/tn_0000", { token: node.operatorToken })).toMatchObject({
        status: 404,
        body: { error: "no tenant tn_0000", code: "NOT_FOUND" }
      })
    }))

  it.effect("bodies over the limit are TOO_LARGE, declared or streamed", () =>
    Effect.gen(function*() {
      const { api, key, node } = yield* setup
      const big = JSON.stringify({ name: "x".repeat(maxBodyBytes) })
      expect(yield* api.post("/v1/tokens", { token: key, body: big, headers: { "content-type": "application/json" } }))
        .toMatchObject({ status: 413, body: { error: `request body over ${maxBodyBytes} bytes`, code: "TOO_LARGE" } })
      // Without a Content-Length the limit applies while reading; the answer may come before the upload ends.
      const streamed = yield* Effect.async<{ status: number; body: unknown }>((resume) => {
        const request = Http_.request(`${node.rest}/v1/tokens`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }
        }, (response) => {
          let text = ""
          response.on("data", (chunk) => text += chunk)
          response.on("end", () => resume(Effect.succeed({ status: response.statusCode!, body: JSON.parse(text) })))
        })
        request.on("error", () => undefined)
        request.write(big)
        request.end()
      })
      expect(streamed).toEqual({ status: 413, body: { error: "request body too large", code: "TOO_LARGE" } })
    }))

  it.effect("a storage failure is INTERNAL with no detail leaked", () =>
    Effect.gen(function*() {
      const { api, key, node } = yield* setup
      yield* TestDatabase.query(node.databaseUrl, "ALTER TABLE api_tokens RENAME COLUMN name TO label")
      const response = yield* api.get("/v1/tokens", { token: key }).pipe(
        Effect.ensuring(TestDatabase.query(node.databaseUrl, "ALTER TABLE api_tokens RENAME COLUMN label TO name"))
      )
      expect(response).toMatchObject({ status: 500, body: { error: "internal error", code: "INTERNAL" } })
      expect(node.output()).toMatch(/level=ERROR .*message="request failed"/)
    }))
})

layer(
  Layer.scoped(
    Node,
    Effect.gen(function*() {
      const databaseUrl = yield* TestDatabase.make
      const node = yield* TestNode.start({ databaseUrl, env: { DRAIN_GRACE_SECONDS: "3" } })
      return { ...node, databaseUrl }
    })
  ),
  { excludeTestServices: true }
)("draining", (it) => {
  it.effect("readyz is UNAVAILABLE with Retry-After while the node drains", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      expect(yield* api.get("/readyz")).toMatchObject({ status: 200, body: { status: "ready" } })
      node.process.kill("SIGTERM")
      yield* Effect.sleep("500 millis")
      const draining = yield* api.get("/readyz")
      expect(draining).toMatchObject({ status: 503, body: { error: "node is draining", code: "UNAVAILABLE" } })
      expect(draining.headers.get("retry-after")).toBe("1")
      expect(yield* api.get("/healthz")).toMatchObject({ status: 200, body: { status: "ok" } })
      // runMain ends the process by the signal it received, once shutdown is done.
      expect(yield* node.stop()).toEqual({ code: null, signal: "SIGTERM" })
    }))
})

it.effect("a service's PersistenceError is answered as the database fault under it: 503 out of reach, 500 otherwise", () =>
  Effect.gen(function*() {
    const observed: Array<unknown> = []
    const health: DatabaseHealth.DatabaseHealth["Type"] = {
      current: () => ({ reachable: true, since: 0 }),
      observe: (failure) => observed.push(failure),
      onLost: () => () => {},
      lost: Effect.never
    }
    /** What the API answers a handler that failed with a PersistenceError around `cause`. */
    const answer = (cause: SqlError.SqlError) =>
      Effect.flatMap(
        Effect.exit(PersistenceError.orDie(new PersistenceError.PersistenceError({ cause }))),
        (exit) =>
          Exit.isSuccess(exit)
            ? Effect.dieMessage("a failure succeeded")
            // As the services used to die: with the SqlError itself.
            : Effect.as(Effect.sync(() => expect(exit.cause).toEqual(Cause.die(cause))), exit.cause)
      ).pipe(Effect.flatMap((cause) => Errors.failureOf(health, "GET", cause)))
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" })
    const unreachable = yield* answer(
      new SqlError.SqlError({ cause: refused, message: "Failed to acquire connection" })
    )
    expect(unreachable).toBeInstanceOf(ApiError.Unavailable)
    expect(Errors.answerOf(unreachable).status).toBe(503)
    expect(observed).toHaveLength(1)
    const internal = yield* answer(new SqlError.SqlError({ cause: { code: "42P01" }, message: "Failed to prepare" }))
    expect(Errors.answerOf(internal)).toMatchObject({
      status: 500,
      body: { error: "internal error", code: "INTERNAL" }
    })
  }))
