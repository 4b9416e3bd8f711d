/**
 * Tenants and their API keys on a real PostgreSQL: a tenant is made with a
 * first key that authenticates; a database fault is a typed
 * `PersistenceError`, not a defect (a refused statement, a database out of
 * reach), and a tenant whose first key could not be made is not kept.
 */
import { AccountsMigrations, Tenants, Tokens } from "@agent-runtime/accounts"
import { Tenant, Token } from "@agent-runtime/domain"
import { Database, DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { TcpProxy, TestDatabase } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"

const accountsOn = (url: string) =>
  Layer.mergeAll(Tenants.layer, Tokens.layer).pipe(
    Layer.provideMerge(
      Layer.fresh(Database.layerClient(Redacted.make(url), { migrations: [AccountsMigrations.migrations] }))
    )
  )

const withAccounts = <A, E, R>(body: Effect.Effect<A, E, R>) =>
  Effect.flatMap(TestDatabase.make, (url) => body.pipe(Effect.provide(accountsOn(url))))

it.effect("a tenant is made with a first key, which authenticates as it", () =>
  withAccounts(Effect.gen(function*() {
    const tenants = yield* Tenants.Tenants
    const tokens = yield* Tokens.Tokens
    const created = yield* tenants.create(new Tenant.TenantInput({ name: "acme" }))
    expect(yield* tenants.get(created.id)).toMatchObject({ id: created.id, name: "acme" })
    const key = yield* tokens.authenticate(created.token)
    expect(Option.map(key, (key) => key.tenantId)).toEqual(Option.some(created.id))
    expect((yield* tokens.list(created.id, {})).data.map((token) => token.name)).toEqual(["first key"])
  })), { timeout: 30_000 })

it.effect(
  "a refused statement fails with PersistenceError, and a tenant without its first key is not kept",
  () =>
    Effect.gen(function*() {
      const url = yield* TestDatabase.make
      yield* Effect.gen(function*() {
        const tenants = yield* Tenants.Tenants
        const tokens = yield* Tokens.Tokens
        yield* TestDatabase.query(url, "DROP TABLE api_tokens")
        const failed = yield* Effect.flip(tenants.create(new Tenant.TenantInput({ name: "acme" })))
        expect(failed).toBeInstanceOf(PersistenceError.PersistenceError)
        expect(DatabaseHealth.isPermanent(failed)).toBe(true)
        expect((yield* tenants.list({})).data).toEqual([])
        const refused = yield* Effect.flip(tokens.authenticate(`${Token.apiKeyPrefix}unknown`))
        expect(refused).toBeInstanceOf(PersistenceError.PersistenceError)
      }).pipe(Effect.provide(accountsOn(url)))
    }),
  { timeout: 30_000 }
)

it.scoped(
  "with the database out of reach, a read fails with an unreachable PersistenceError",
  () =>
    Effect.gen(function*() {
      const proxy = yield* TcpProxy.start(yield* TestDatabase.make)
      yield* Effect.gen(function*() {
        const tenants = yield* Tenants.Tenants
        const tokens = yield* Tokens.Tokens
        yield* proxy.cut("refuse")
        const failures = [
          yield* Effect.flip(tenants.find("tn_1")),
          yield* Effect.flip(tenants.get("tn_1")),
          yield* Effect.flip(tokens.list("tn_1", {}))
        ]
        for (const failure of failures) {
          expect(failure).toBeInstanceOf(PersistenceError.PersistenceError)
          expect(DatabaseHealth.isUnreachable(failure)).toBe(true)
        }
      }).pipe(Effect.provide(accountsOn(proxy.url)))
    }),
  { timeout: 30_000 }
)
