/**
 * Identity-token keys over real HTTP: the public key set at
 * `/.well-known/jwks.json` without authentication, and the operator's key
 * rotation.
 */
import { Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { createRemoteJWKSet } from "jose"

class Node extends Context.Tag("Node")<Node, TestNode.TestNode>() {}

const NodeLive = Layer.scoped(
  Node,
  Effect.flatMap(TestDatabase.make, (databaseUrl) => TestNode.start({ databaseUrl }))
)

layer(NodeLive)("identity keys", (it) => {
  it.effect("the JWKS answers without a token, cacheable, with the node's key", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const answer = yield* Http.client(node.rest).get("/.well-known/jwks.json")
      expect(answer.status).toBe(200)
      expect(answer.headers.get("cache-control")).toBe("public, max-age=300")
      expect(answer.headers.get("content-type")).toContain("application/json")
      expect(answer.body.keys).toHaveLength(1)
      const [key] = answer.body.keys
      expect(Object.keys(key).sort()).toEqual(["alg", "crv", "kid", "kty", "use", "x"])
      expect(key).toMatchObject({ kty: "OKP", crv: "Ed25519", alg: "EdDSA", use: "sig" })
      // jose reads it as a verifier would, from the URL.
      const remote = createRemoteJWKSet(new URL(`${node.rest}/.well-known/jwks.json`))
      const found = yield* Effect.promise(() => remote({ alg: "EdDSA", kid: key.kid }))
      expect(found.type).toBe("public")
    }))

  it.effect("rotation takes the operator token only; the new key is published at once", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const api = Http.client(node.rest)
      const path = "/v1/admin/identity-keys/rotate"
      expect(yield* api.post(path)).toMatchObject({
        status: 401,
        body: { error: "missing bearer token", code: "UNAUTHORIZED" }
      })
      const tenant = yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "acme" } })
      expect(yield* api.post(path, { token: tenant.body.token })).toMatchObject({
        status: 403,
        body: { code: "FORBIDDEN" }
      })
      const before = (yield* api.get("/.well-known/jwks.json")).body.keys.map((key: { kid: string }) => key.kid)
      expect(before).toHaveLength(1)

      const rotated = yield* api.post(path, { token: node.operatorToken })
      expect(rotated.status).toBe(200)
      expect(Object.keys(rotated.body).sort()).toEqual(["activatesAt", "kid"])
      expect(before).not.toContain(rotated.body.kid)
      // Signing starts after the activation delay (5 minutes by default), so verifiers' caches hold it first.
      const now = Math.floor(Date.now() / 1000)
      expect(rotated.body.activatesAt).toBeGreaterThanOrEqual(now + 290)
      expect(rotated.body.activatesAt).toBeLessThanOrEqual(now + 300)

      const after = (yield* api.get("/.well-known/jwks.json")).body.keys.map((key: { kid: string }) => key.kid)
      expect(after).toEqual([...before, rotated.body.kid])
    }))

  it.effect("the OpenAPI document lists the JWKS without security and rotation as an operator route", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const spec = (yield* Http.client(node.rest).get("/v1/openapi.json")).body
      const jwks = spec.paths["/.well-known/jwks.json"].get
      expect(jwks.security ?? []).toEqual([])
      expect(jwks.responses["200"].content["application/json"].schema.$ref).toBe("#/components/schemas/Jwks")
      expect(spec.paths["/v1/admin/identity-keys/rotate"].post.security).toEqual([{ operator: [] }])
    }))
})
