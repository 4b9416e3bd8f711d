/**
 * The authorization server's storage on a real PostgreSQL: what is kept is
 * hashed or sealed; a code is used once even when presented at the same
 * moment many times (and its grant revoked by the second presentation); a
 * refresh token retried within its grace is rotated again, later revokes its
 * grant; an access token is live only while its grant is.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { Database, SealedSecret } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { errors } from "oidc-provider"
import { hash, makeAdapterClass } from "../src/internal/adapter.ts"
import * as OAuthGrants from "../src/OAuthGrants.ts"
import * as OAuthMigrations from "../src/OAuthMigrations.ts"

const sealer = SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))

const scenario = <A, E>(
  body: Effect.Effect<A, E, SqlClient.SqlClient | SealedSecret.Sealer | OAuthGrants.OAuthGrants>
) =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    const layer = OAuthGrants.layer.pipe(
      Layer.provideMerge(sealer),
      Layer.provideMerge(Database.layerClient(Redacted.make(url), {
        migrations: [AccountsMigrations.migrations, OAuthMigrations.migrations]
      }))
    )
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_a', 'a'), ('tn_b', 'b')`
      return yield* body
    }).pipe(Effect.provide(layer))
  })

const adapters = Effect.gen(function*() {
  const Adapter = makeAdapterClass(
    yield* SqlClient.SqlClient,
    yield* SealedSecret.Sealer,
    yield* Effect.runtime<never>()
  )
  return (name: string) => new Adapter(name)
})

const token = () => Crypto.randomBytes(32).toString("base64url")

/** A grant of tenant `tn_a` with an access token, a refresh token and a code. */
const granted = Effect.gen(function*() {
  const adapter = yield* adapters
  const grants = yield* OAuthGrants.OAuthGrants
  const grantId = token()
  yield* grants.record({
    id: grantId,
    tenantId: "tn_a",
    clientId: "c1",
    clientName: "Agent",
    login: "a@x.test",
    scope: "account"
  })
  const access = token()
  const refresh = token()
  const code = token()
  const payload = { accountId: "tn_a", grantId, aud: "http://127.0.0.1:1/mcp" }
  yield* Effect.promise(() => adapter("AccessToken").upsert(access, { ...payload, jti: access }, 3600))
  yield* Effect.promise(() => adapter("RefreshToken").upsert(refresh, { ...payload, jti: refresh }, 86400))
  yield* Effect.promise(() => adapter("AuthorizationCode").upsert(code, { ...payload, jti: code }, 60))
  return { adapter, grants, grantId, access, refresh, code }
})

it.effect("keeps hashes of ids and seals client secrets; finds them by what was presented", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { access, adapter } = yield* granted
    const secret = token()
    yield* Effect.promise(() =>
      adapter("Client").upsert("client-1", { client_id: "client-1", client_secret: secret, client_name: "Agent" }, 0)
    )
    const stored = yield* sql<
      { text: string }
    >`SELECT string_agg(id_hash::text || payload::text, ' ') AS text FROM oauth_records`
    expect(stored[0]!.text).not.toContain(access)
    expect(stored[0]!.text).not.toContain(secret)
    expect((yield* Effect.promise(() => adapter("AccessToken").find(access)))?.jti).toBe(access)
    expect((yield* Effect.promise(() => adapter("Client").find("client-1")))?.client_secret).toBe(secret)
    expect(yield* Effect.promise(() => adapter("AccessToken").find(token()))).toBeUndefined()
  })))

it.effect("a code presented five times at once is used once, and the rest revoke its grant", () =>
  scenario(Effect.gen(function*() {
    const { access, adapter, code, grants } = yield* granted
    const outcomes = yield* Effect.all(
      Array.from(
        { length: 5 },
        () => Effect.either(Effect.tryPromise(() => adapter("AuthorizationCode").consume(code)))
      ),
      { concurrency: "unbounded" }
    )
    expect(outcomes.filter((outcome) => outcome._tag === "Right")).toHaveLength(1)
    for (const outcome of outcomes.filter((outcome) => outcome._tag === "Left")) {
      expect((outcome.left as { error: unknown }).error).toBeInstanceOf(errors.InvalidGrant)
    }
    expect(Option.isNone(yield* grants.authenticate(access))).toBe(true)
    expect(yield* grants.list("tn_a")).toEqual([])
  })))

it.effect("a refresh token retried within its grace rotates again; later, it revokes its grant", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { access, adapter, grants, refresh } = yield* granted
    const refreshes = adapter("RefreshToken")
    yield* Effect.promise(() => refreshes.consume(refresh))
    // Found unconsumed while in its grace, so the library rotates it again instead of refusing it.
    expect((yield* Effect.promise(() => refreshes.find(refresh)))?.consumed).toBeUndefined()
    yield* Effect.promise(() => refreshes.consume(refresh))
    expect(Option.isSome(yield* grants.authenticate(access))).toBe(true)

    yield* sql`UPDATE oauth_records SET consumed_at = now() - interval '11 seconds' WHERE id_hash = ${hash(refresh)}`
    expect((yield* Effect.promise(() => refreshes.find(refresh)))?.consumed).toBeTypeOf("number")
    const late = yield* Effect.either(Effect.tryPromise(() => refreshes.consume(refresh)))
    expect(late._tag).toBe("Left")
    expect(Option.isNone(yield* grants.authenticate(access))).toBe(true)
  })))

it.effect("an access token is live while it is unexpired and its grant unrevoked; a grant is revoked by its tenant", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { access, grantId, grants } = yield* granted
    const holder = yield* grants.authenticate(access)
    expect(Option.getOrThrow(holder)).toMatchObject({ tenantId: "tn_a", grantId, login: "a@x.test" })
    expect((yield* sql<{ text: string }>`SELECT tenant_id AS text FROM (${grants.tenantQuery(access)}) q`)[0]?.text)
      .toBe("tn_a")
    expect(Option.isNone(yield* grants.authenticate("not-a-token"))).toBe(true)

    // Another tenant cannot see or revoke it.
    expect(yield* grants.list("tn_b")).toEqual([])
    expect((yield* Effect.flip(grants.revoke("tn_b", grantId)))._tag).toBe("NotFound")
    expect(Option.isSome(yield* grants.authenticate(access))).toBe(true)

    const [listed] = yield* grants.list("tn_a")
    expect(listed).toMatchObject({ id: grantId, clientName: "Agent", scope: "account", usedAt: expect.any(Number) })
    yield* grants.revoke("tn_a", grantId)
    expect(Option.isNone(yield* grants.authenticate(access))).toBe(true)
    expect((yield* sql`SELECT 1 FROM oauth_records WHERE grant_id = ${grantId}`).length).toBe(0)
  })))
