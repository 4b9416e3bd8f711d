/**
 * Authentication at the wire, in process (see InProcess): API keys act for
 * their tenant, a revoked key fails at once, the operator token acts for the
 * tenant its header names, and operator routes take only the operator token.
 * Error bodies are checked as clients read them.
 */
import { Tenant, Token } from "@agent-runtime/domain"
import { HttpClientRequest } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { clientFor, operatorToken, raw, ServerLive } from "./InProcess.ts"

/** A request with no credential at all, or with the given Authorization header: its status and body. */
const unauthenticated = (path: string, authorization?: string) =>
  raw(
    HttpClientRequest.get(path).pipe(
      authorization === undefined ? (request) => request : HttpClientRequest.setHeader("authorization", authorization)
    )
  )

const tenant = (name: string) =>
  Effect.flatMap(
    clientFor(operatorToken),
    (operator) => operator.admin.createTenant({ payload: new Tenant.TenantInput({ name }) })
  )

layer(ServerLive, { timeout: 60_000, excludeTestServices: true })("authentication", (it) => {
  it.effect("an API key acts for its tenant", () =>
    Effect.gen(function*() {
      const acme = yield* tenant("acme")
      const me = yield* (yield* clientFor(acme.token)).me.get()
      expect(me).toMatchObject({ tenant: acme.id, via: "token", name: "acme", canStoreKeys: true })
      expect(typeof me.defaultModel).toBe("string")
    }))

  it.effect("no token, an unknown token and a malformed header are 401", () =>
    Effect.gen(function*() {
      expect(yield* unauthenticated("/v1/me")).toEqual({
        status: 401,
        body: { error: "missing bearer token", code: "UNAUTHORIZED" }
      })
      expect(yield* raw(HttpClientRequest.get("/v1/me"), "art_not-a-key")).toEqual({
        status: 401,
        body: { error: "invalid or revoked token", code: "UNAUTHORIZED" }
      })
      expect(yield* unauthenticated("/v1/me", "Basic dXNlcjpwYXNz")).toMatchObject({
        status: 401,
        body: { code: "UNAUTHORIZED" }
      })
    }))

  it.effect("a revoked key fails at once", () =>
    Effect.gen(function*() {
      const acme = yield* tenant("acme-revoke")
      const api = yield* clientFor(acme.token)
      const second = yield* api.tokens.create({ payload: new Token.TokenInput({ name: "ci" }) })
      expect(second.token).toMatch(/^art_[A-Za-z0-9_-]{43}$/)
      expect(second.prefix).toBe(second.token.slice(0, 12))
      expect((yield* (yield* clientFor(second.token)).me.get()).tenant).toBe(acme.id)
      expect(yield* api.tokens.revoke({ path: { id: second.id } })).toEqual({ id: second.id, deleted: true })
      expect(yield* raw(HttpClientRequest.get("/v1/me"), second.token)).toEqual({
        status: 401,
        body: { error: "invalid or revoked token", code: "UNAUTHORIZED" }
      })
      // The first key is untouched, and the revoked one is gone from the list.
      const list = yield* api.tokens.list({ urlParams: {} })
      expect(list.map((token) => token.id)).not.toContain(second.id)
      expect(yield* raw(HttpClientRequest.del(`/v1/tokens/${second.id}`), acme.token)).toEqual({
        status: 404,
        body: { error: `no token ${second.id}`, code: "NOT_FOUND" }
      })
    }))

  it.effect("the operator token acts for the tenant named in the header", () =>
    Effect.gen(function*() {
      const acme = yield* tenant("acme-operator")
      const me = yield* (yield* clientFor(operatorToken, { "x-agent-runtime-tenant": acme.id })).me.get()
      expect(me).toMatchObject({ tenant: acme.id, via: "operator" })
      expect(yield* raw(HttpClientRequest.get("/v1/me"), operatorToken)).toEqual({
        status: 400,
        body: {
          error: "the operator token acts for the tenant named in the x-agent-runtime-tenant header",
          code: "INVALID_REQUEST"
        }
      })
      const missing = HttpClientRequest.get("/v1/me").pipe(
        HttpClientRequest.setHeader("x-agent-runtime-tenant", "tn_missing")
      )
      expect(yield* raw(missing, operatorToken)).toEqual({
        status: 404,
        body: { error: "no tenant tn_missing", code: "NOT_FOUND" }
      })
    }))

  it.effect("operator routes take only the operator token", () =>
    Effect.gen(function*() {
      const acme = yield* tenant("acme-routes")
      expect(yield* raw(HttpClientRequest.get("/v1/admin/tenants"), acme.token)).toEqual({
        status: 403,
        body: { error: "operator routes need the operator token", code: "FORBIDDEN" }
      })
      expect(yield* raw(HttpClientRequest.get("/v1/admin/tenants"), "aro_wrong")).toEqual({
        status: 401,
        body: { error: "invalid or revoked token", code: "UNAUTHORIZED" }
      })
      expect(yield* unauthenticated("/v1/admin/tenants")).toEqual({
        status: 401,
        body: { error: "missing bearer token", code: "UNAUTHORIZED" }
      })
      const operator = yield* clientFor(operatorToken)
      const created = yield* operator.admin.createTenant({
        payload: new Tenant.TenantInput({ name: "globex", login: "ops@globex.test" })
      })
      expect(created).toMatchObject({ name: "globex", login: "ops@globex.test" })
      expect(created.id).toMatch(/^tn_/)
      expect(created.token).toMatch(/^art_/)
      const got = yield* operator.admin.getTenant({ path: { id: created.id } })
      expect({ ...got }).toEqual({
        id: created.id,
        name: "globex",
        login: "ops@globex.test",
        createdAt: created.createdAt
      })
    }))
})
