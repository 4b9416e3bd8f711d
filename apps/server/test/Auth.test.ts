import { Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"

class Node extends Context.Tag("Node")<Node, TestNode.TestNode>() {}

const NodeLive = Layer.scoped(
  Node,
  Effect.flatMap(TestDatabase.make, (databaseUrl) => TestNode.start({ databaseUrl }))
)

const tenant = (node: TestNode.TestNode, name: string) =>
  Effect.map(
    Http.client(node.rest).post("/v1/admin/tenants", { token: node.operatorToken, json: { name } }),
    (response) => response.body as { id: string; token: string }
  )

layer(NodeLive)("authentication", (it) => {
  it.effect("an API key acts for its tenant", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      const acme = yield* tenant(node, "acme")
      const me = yield* api.get("/v1/me", { token: acme.token })
      expect(me.status).toBe(200)
      expect(me.body).toMatchObject({ tenant: acme.id, via: "token", name: "acme", canStoreKeys: true })
      expect(typeof me.body.defaultModel).toBe("string")
    }))

  it.effect("no token, an unknown token and a malformed header are 401", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      expect(yield* api.get("/v1/me")).toMatchObject({
        status: 401,
        body: { error: "missing bearer token", code: "UNAUTHORIZED" }
      })
      expect(yield* api.get("/v1/me", { token: "art_not-a-key" })).toMatchObject({
        status: 401,
        body: { error: "invalid or revoked token", code: "UNAUTHORIZED" }
      })
      expect(yield* api.get("/v1/me", { headers: { authorization: "Basic dXNlcjpwYXNz" } })).toMatchObject({
        status: 401,
        body: { code: "UNAUTHORIZED" }
      })
    }))

  it.effect("a revoked key fails at once", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      const acme = yield* tenant(node, "acme")
      const second = yield* api.post("/v1/tokens", { token: acme.token, json: { name: "ci" } })
      expect(second.status).toBe(201)
      expect(second.body.token).toMatch(/^art_[A-Za-z0-9_-]{43}$/)
      expect(second.body.prefix).toBe(second.body.token.slice(0, 12))
      expect((yield* api.get("/v1/me", { token: second.body.token })).status).toBe(200)
      const revoked = yield* api.delete(`/v1/tokens/${second.body.id}`, { token: acme.token })
      expect(revoked).toMatchObject({ status: 200, body: { id: second.body.id, deleted: true } })
      expect(yield* api.get("/v1/me", { token: second.body.token })).toMatchObject({
        status: 401,
        body: { error: "invalid or revoked token", code: "UNAUTHORIZED" }
      })
      // The first key is untouched, and the revoked one is gone from the list.
      const list = yield* api.get("/v1/tokens", { token: acme.token })
      expect(list.status).toBe(200)
      expect(list.body.data.map((token: { id: string }) => token.id)).not.toContain(second.body.id)
      expect(yield* api.delete(`/v1/tokens/${second.body.id}`, { token: acme.token })).toMatchObject({
        status: 404,
        body: { error: `no token ${second.body.id}`, code: "NOT_FOUND" }
      })
    }))

  it.effect("the operator token acts for the tenant named in the header", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      const acme = yield* tenant(node, "acme")
      const me = yield* api.get("/v1/me", {
        token: node.operatorToken,
        headers: { "x-agent-runtime-tenant": acme.id }
      })
      expect(me).toMatchObject({ status: 200, body: { tenant: acme.id, via: "operator" } })
      expect(yield* api.get("/v1/me", { token: node.operatorToken })).toMatchObject({
        status: 400,
        body: {
          error: "the operator token acts for the tenant named in the x-agent-runtime-tenant header",
          code: "INVALID_REQUEST"
        }
      })
      expect(
        yield* api.get("/v1/me", { token: node.operatorToken, headers: { "x-agent-runtime-tenant": "tn_missing" } })
      ).toMatchObject({ status: 404, body: { error: "no tenant tn_missing", code: "NOT_FOUND" } })
    }))

  it.effect("operator routes take only the operator token", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      const acme = yield* tenant(node, "acme")
      expect(yield* api.get("/v1/admin/tenants", { token: acme.token })).toMatchObject({
        status: 403,
        body: { error: "operator routes need the operator token", code: "FORBIDDEN" }
      })
      expect(yield* api.get("/v1/admin/tenants", { token: "aro_wrong" })).toMatchObject({
        status: 401,
        body: { error: "invalid or revoked token", code: "UNAUTHORIZED" }
      })
      expect(yield* api.get("/v1/admin/tenants")).toMatchObject({
        status: 401,
        body: { error: "missing bearer token", code: "UNAUTHORIZED" }
      })
      const created = yield* api.post("/v1/admin/tenants", {
        token: node.operatorToken,
        json: { name: "globex", login: "ops@globex.test" }
      })
      expect(created.status).toBe(201)
      expect(created.body).toMatchObject({ name: "globex", login: "ops@globex.test" })
      expect(created.body.id).toMatch(/^tn_/)
      expect(created.body.token).toMatch(/^art_/)
      const got = yield* api.get(`/v1/admin/tenants/${created.body.id}`, { token: node.operatorToken })
      expect(got.body).toEqual({
        id: created.body.id,
        name: "globex",
        login: "ops@globex.test",
        createdAt: created.body.createdAt
      })
    }))
})
