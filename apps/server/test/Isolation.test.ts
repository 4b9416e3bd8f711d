/**
 * One tenant's key never reads or changes another tenant's data, on every
 * route of this part of the API.
 */
import { Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"

class Node extends Context.Tag("Node")<Node, TestNode.TestNode>() {}

const NodeLive = Layer.scoped(Node, Effect.flatMap(TestDatabase.make, (databaseUrl) => TestNode.start({ databaseUrl })))

layer(NodeLive, { excludeTestServices: true })("tenant isolation", (it) => {
  it.effect("keys see and change only their own tenant", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      const a = (yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "a" } })).body
      const b = (yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "b" } })).body
      const bSecond = (yield* api.post("/v1/tokens", { token: b.token, json: { name: "b2" } })).body

      // me
      expect((yield* api.get("/v1/me", { token: a.token })).body.tenant).toBe(a.id)
      expect((yield* api.get("/v1/me", { token: b.token })).body.tenant).toBe(b.id)
      // An API key ignores the operator's tenant header.
      const spoofed = yield* api.get("/v1/me", { token: a.token, headers: { "x-agent-runtime-tenant": b.id } })
      expect(spoofed.body.tenant).toBe(a.id)

      // list
      const aTokens = (yield* api.get("/v1/tokens", { token: a.token })).body.data
      expect(aTokens.map((token: { name: string }) => token.name)).toEqual(["first key"])
      const bTokens = (yield* api.get("/v1/tokens", { token: b.token })).body.data
      expect(bTokens.map((token: { name: string }) => token.name)).toEqual(["first key", "b2"])
      // A cursor from another tenant's list reveals nothing.
      const paged = yield* api.get(`/v1/tokens?after=${encodeURIComponent("tok_0")}`, { token: a.token })
      expect(
        paged.body.data.every((token: { id: string }) => aTokens.some((own: { id: string }) => own.id === token.id))
      )
        .toBe(true)

      // revoke
      expect(yield* api.delete(`/v1/tokens/${bSecond.id}`, { token: a.token })).toMatchObject({
        status: 404,
        body: { code: "NOT_FOUND" }
      })
      expect((yield* api.get("/v1/me", { token: bSecond.token })).status).toBe(200)

      // create: a key made with A's token belongs to A
      const made = (yield* api.post("/v1/tokens", { token: a.token, json: { name: "a2" } })).body
      expect((yield* api.get("/v1/me", { token: made.token })).body.tenant).toBe(a.id)

      // operator routes
      expect((yield* api.get(`/v1/admin/tenants/${b.id}`, { token: a.token })).status).toBe(403)
      expect((yield* api.post("/v1/admin/tenants", { token: a.token, json: { name: "c" } })).status).toBe(403)
      expect((yield* api.get("/v1/admin/tenants", { token: a.token })).status).toBe(403)

      // The operator acting for A sees A's data only.
      const asA = yield* api.get("/v1/tokens", {
        token: node.operatorToken,
        headers: { "x-agent-runtime-tenant": a.id }
      })
      expect(asA.body.data.map((token: { name: string }) => token.name)).toEqual(["first key", "a2"])
    }))
})
