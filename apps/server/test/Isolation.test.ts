/**
 * One tenant's key never reads or changes another tenant's data, on every
 * route of this part of the API: in process, through the typed client (see
 * InProcess).
 */
import { ApiError, Tenant, Token } from "@agent-runtime/domain"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { clientFor, operatorToken, ServerLive } from "./InProcess.ts"

layer(ServerLive, { timeout: 60_000, excludeTestServices: true })("tenant isolation", (it) => {
  it.effect("keys see and change only their own tenant", () =>
    Effect.gen(function*() {
      const operator = yield* clientFor(operatorToken)
      const a = yield* operator.admin.createTenant({ payload: new Tenant.TenantInput({ name: "a" }) })
      const b = yield* operator.admin.createTenant({ payload: new Tenant.TenantInput({ name: "b" }) })
      const asA = yield* clientFor(a.token)
      const asB = yield* clientFor(b.token)
      const bSecond = yield* asB.tokens.create({ payload: new Token.TokenInput({ name: "b2" }) })

      // me
      expect((yield* asA.me.get()).tenant).toBe(a.id)
      expect((yield* asB.me.get()).tenant).toBe(b.id)
      // An API key ignores the operator's tenant header.
      const spoofed = yield* clientFor(a.token, { "x-agent-runtime-tenant": b.id })
      expect((yield* spoofed.me.get()).tenant).toBe(a.id)

      // list
      const aTokens = yield* asA.tokens.list({ urlParams: {} })
      expect(aTokens.map((token) => token.name)).toEqual(["first key"])
      const bTokens = yield* asB.tokens.list({ urlParams: {} })
      expect(bTokens.map((token) => token.name)).toEqual(["first key", "b2"])
      // A cursor from another tenant's list reveals nothing.
      const paged = yield* asA.tokens.list({ urlParams: { after: bTokens[0]!.id } })
      expect(paged.every((token) => aTokens.some((own) => own.id === token.id))).toBe(true)

      // revoke: another tenant's key is not found, and still works
      const revoked = yield* Effect.flip(asA.tokens.revoke({ path: { id: bSecond.id } }))
      expect(revoked).toBeInstanceOf(ApiError.NotFound)
      expect((yield* (yield* clientFor(bSecond.token)).me.get()).tenant).toBe(b.id)

      // create: a key made with A's token belongs to A
      const made = yield* asA.tokens.create({ payload: new Token.TokenInput({ name: "a2" }) })
      expect((yield* (yield* clientFor(made.token)).me.get()).tenant).toBe(a.id)

      // operator routes refuse a tenant's key
      const forbidden = [
        yield* Effect.flip(asA.admin.getTenant({ path: { id: b.id } })),
        yield* Effect.flip(asA.admin.createTenant({ payload: new Tenant.TenantInput({ name: "c" }) })),
        yield* Effect.flip(asA.admin.listTenants({ urlParams: {} }))
      ]
      for (const refused of forbidden) expect(refused).toBeInstanceOf(ApiError.Forbidden)

      // The operator acting for A sees A's data only.
      const operatorForA = yield* clientFor(operatorToken, { "x-agent-runtime-tenant": a.id })
      expect((yield* operatorForA.tokens.list({ urlParams: {} })).map((token) => token.name)).toEqual([
        "first key",
        "a2"
      ])
    }))
})
