/**
 * Identity tokens on a real PostgreSQL, verified as a tool server would:
 * with jose against the published key set. Claims, audience and lifetime;
 * rotation (activation, overlap, retirement); nodes sharing one key; the
 * private key sealed at rest.
 */
import { Database, DatabaseHealth, PersistenceError, SealedSecret } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Context, Duration, Effect, Layer, Redacted, type Scope } from "effect"
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JWTVerifyOptions } from "jose"
import * as Crypto from "node:crypto"
import * as IdentityKeys from "../src/IdentityKeys.ts"
import * as IdentityMigrations from "../src/IdentityMigrations.ts"
import { IdentityTokens } from "../src/IdentityTokens.ts"
import * as IdentityTokensModule from "../src/IdentityTokens.ts"

const sealingKey = SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64"))
const SealerLive = SealedSecret.layer(sealingKey)

const databaseOn = (url: string) =>
  Layer.fresh(Database.layerClient(Redacted.make(url), { migrations: [IdentityMigrations.migrations] }))

/** The service on `url` with `options`, and the database beside it. */
const tokensOn = (url: string, options: IdentityTokensModule.Options = {}) =>
  IdentityTokensModule.layer(options).pipe(Layer.provide(SealerLive), Layer.provideMerge(databaseOn(url)))

/** Runs `body` with the service on a fresh database. */
const withTokens = <A, E>(
  options: IdentityTokensModule.Options,
  body: Effect.Effect<A, E, IdentityTokens | SqlClient.SqlClient | Scope.Scope>
) => Effect.flatMap(TestDatabase.make, (url) => body.pipe(Effect.provide(tokensOn(url, options)), Effect.scoped))

const issuer = "https://runtime.test"

const claims = {
  audience: "https://tools.example/mcp",
  subject: "user_42",
  actor: "alice@example.com",
  context: { ticket: "T-1", nested: { order_id: 7 } },
  tenantId: "tn_1",
  agentId: "client_1",
  origin: "prompt",
  definition: "support"
}

/** jose's verification against `jwks`, as a tool server does it; fails with jose's error. */
const verify = (
  token: string,
  jwks: { readonly keys: ReadonlyArray<unknown> },
  options: JWTVerifyOptions = {}
) =>
  Effect.tryPromise({
    try: () =>
      jwtVerify(token, createLocalJWKSet({ keys: [...jwks.keys] as Array<never> }), {
        issuer,
        audience: claims.audience,
        algorithms: ["EdDSA"],
        typ: "JWT",
        ...options
      }),
    catch: (error) => error as Error & { code: string; claim?: string }
  })

describe("IdentityTokens", () => {
  it.live("signs every claim; the JWKS verifies it", () =>
    withTokens(
      { issuer },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const before = Math.floor(Date.now() / 1000)
        const token = yield* tokens.sign(claims)
        const jwks = yield* tokens.jwks
        expect(jwks.keys).toHaveLength(1)
        const [key] = jwks.keys
        expect(Object.keys(key!).sort()).toEqual(["alg", "crv", "kid", "kty", "use", "x"])
        expect(key).toMatchObject({ kty: "OKP", crv: "Ed25519", alg: "EdDSA", use: "sig" })
        expect(key!.x).toMatch(/^[A-Za-z0-9_-]{43}$/)

        const { payload, protectedHeader } = yield* verify(token, jwks)
        expect(protectedHeader).toEqual({ alg: "EdDSA", kid: key!.kid, typ: "JWT" })
        const { exp, iat, jti, ...rest } = payload
        expect(rest).toEqual({
          iss: issuer,
          aud: claims.audience,
          sub: "user_42",
          act: "alice@example.com",
          ctx: { ticket: "T-1", nested: { order_id: 7 } },
          tenant: "tn_1",
          agent: "client_1",
          origin: "prompt",
          definition: "support"
        })
        expect(iat).toBeGreaterThanOrEqual(before)
        expect(iat).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000))
        expect(exp).toBe(iat! + 120)
        expect(jti).toMatch(/^[A-Za-z0-9_-]{22}$/)
        const again = yield* verify(yield* tokens.sign(claims), jwks)
        expect(again.payload.jti).not.toBe(jti)
      })
    ))

  it.live("without a subject the agent is the subject; act, ctx and definition only when given", () =>
    withTokens(
      { issuer },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const token = yield* tokens.sign({
          audience: claims.audience,
          tenantId: "tn_1",
          agentId: "client_2",
          origin: "schedule"
        })
        const { payload } = yield* verify(token, yield* tokens.jwks)
        expect(payload.sub).toBe("client_2")
        expect(Object.keys(payload).sort()).toEqual([
          "agent",
          "aud",
          "exp",
          "iat",
          "iss",
          "jti",
          "origin",
          "sub",
          "tenant"
        ])
      })
    ))

  it.live("a token for another audience, from another issuer or past its lifetime is refused", () =>
    withTokens(
      { issuer, tokenLifetime: Duration.seconds(30) },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const token = yield* tokens.sign(claims)
        const jwks = yield* tokens.jwks
        const otherAudience = yield* Effect.flip(verify(token, jwks, { audience: "https://other.example" }))
        expect(otherAudience).toMatchObject({ code: "ERR_JWT_CLAIM_VALIDATION_FAILED", claim: "aud" })
        const otherIssuer = yield* Effect.flip(verify(token, jwks, { issuer: "https://elsewhere.example" }))
        expect(otherIssuer).toMatchObject({ code: "ERR_JWT_CLAIM_VALIDATION_FAILED", claim: "iss" })

        const { payload } = yield* verify(token, jwks)
        expect(payload.exp! - payload.iat!).toBe(30)
        // Still valid in its last second, refused from its expiry on.
        yield* verify(token, jwks, { currentDate: new Date((payload.exp! - 1) * 1000) })
        const expired = yield* Effect.flip(verify(token, jwks, { currentDate: new Date(payload.exp! * 1000) }))
        expect(expired).toMatchObject({ code: "ERR_JWT_EXPIRED" })
      })
    ))

  it.live("a token past a short lifetime is refused on the real clock", () =>
    withTokens(
      { issuer, tokenLifetime: Duration.seconds(1) },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const token = yield* tokens.sign(claims)
        const jwks = yield* tokens.jwks
        yield* Effect.sleep(Duration.millis(2100))
        expect(yield* Effect.flip(verify(token, jwks))).toMatchObject({ code: "ERR_JWT_EXPIRED" })
      })
    ))

  it.live("rotation: the old key verifies through the overlap, the new one signs after activation, then the old one leaves", () =>
    withTokens(
      { issuer, activationDelay: Duration.zero, overlap: Duration.seconds(1) },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const before = yield* tokens.sign(claims)
        const oldKid = decodeProtectedHeader(before).kid
        const rotated = yield* tokens.rotate
        expect(rotated.kid).not.toBe(oldKid)
        expect(Math.abs(rotated.activatesAt - Date.now() / 1000)).toBeLessThan(5)

        const during = yield* tokens.jwks
        expect(during.keys.map((key) => key.kid)).toEqual([oldKid, rotated.kid])
        yield* verify(before, during)
        const after = yield* tokens.sign(claims)
        expect(decodeProtectedHeader(after).kid).toBe(rotated.kid)
        yield* verify(after, during)

        yield* Effect.sleep(Duration.millis(1200))
        const later = yield* tokens.jwks
        expect(later.keys.map((key) => key.kid)).toEqual([rotated.kid])
        expect(yield* Effect.flip(verify(before, later))).toMatchObject({ code: "ERR_JWKS_NO_MATCHING_KEY" })
        yield* verify(after, later)
        expect(decodeProtectedHeader(yield* tokens.sign(claims)).kid).toBe(rotated.kid)
      })
    ))

  it.live("a rotated-in key is published at once but signs only after the activation delay", () =>
    withTokens(
      { issuer, activationDelay: Duration.minutes(5) },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const sql = yield* SqlClient.SqlClient
        const oldKid = decodeProtectedHeader(yield* tokens.sign(claims)).kid
        const rotated = yield* tokens.rotate
        expect(rotated.activatesAt - Date.now() / 1000).toBeGreaterThan(295)
        expect((yield* tokens.jwks).keys.map((key) => key.kid)).toEqual([oldKid, rotated.kid])
        expect(decodeProtectedHeader(yield* tokens.sign(claims)).kid).toBe(oldKid)
        // The old key retires one overlap (24 hours) after the new one starts signing.
        const [row] = yield* sql<{ hours: number }>`
          SELECT extract(epoch from (old.retires_at - new.activates_at))::float8 / 3600 AS hours
          FROM identity_keys old, identity_keys new WHERE old.kid = ${oldKid!} AND new.kid = ${rotated.kid}`
        expect(row!.hours).toBeCloseTo(24, 5)
      })
    ))

  it.live("nodes starting together on one database make one key; a rotation on one reaches the others", () =>
    Effect.gen(function*() {
      const url = yield* TestDatabase.make
      const options = { issuer, activationDelay: Duration.zero, cacheTtl: Duration.millis(300) }
      const nodes = yield* Effect.forEach(
        [1, 2, 3, 4],
        () => Effect.map(Layer.build(tokensOn(url, options)), Context.get(IdentityTokens)),
        { concurrency: "unbounded" }
      )
      const sets = yield* Effect.forEach(nodes, (node) => node.jwks)
      expect(sets[0]!.keys).toHaveLength(1)
      for (const set of sets) expect(set).toEqual(sets[0])
      const count = yield* TestDatabase.query(url, "SELECT count(*)::int AS n FROM identity_keys")
      expect(count).toEqual([{ n: 1 }])
      // A token any node signs verifies against any node's key set.
      for (const node of nodes) yield* verify(yield* node.sign(claims), sets[3]!)

      const rotated = yield* nodes[0]!.rotate
      yield* Effect.sleep(Duration.millis(400))
      for (const node of nodes) {
        expect((yield* node.jwks).keys.map((key) => key.kid)).toContain(rotated.kid)
        expect(decodeProtectedHeader(yield* node.sign(claims)).kid).toBe(rotated.kid)
      }
    }).pipe(Effect.scoped))

  it.live("first keys made concurrently on an empty table: one wins", () =>
    Effect.gen(function*() {
      const url = yield* TestDatabase.make
      const layer = IdentityKeys.layer().pipe(Layer.provide(SealerLive), Layer.provide(databaseOn(url)))
      const nodes = yield* Effect.forEach(
        [1, 2, 3, 4],
        () => Effect.map(Layer.build(layer.pipe(Layer.fresh)), Context.get(IdentityKeys.IdentityKeys))
      )
      for (let round = 0; round < 5; round++) {
        yield* TestDatabase.query(url, "DELETE FROM identity_keys")
        yield* Effect.forEach(nodes, (node) => node.ensure, { concurrency: "unbounded", discard: true })
        expect(yield* TestDatabase.query(url, "SELECT count(*)::int AS n FROM identity_keys")).toEqual([{ n: 1 }])
      }
      // A key left unretired is enough: ensure adds none.
      yield* nodes[0]!.ensure
      expect(yield* TestDatabase.query(url, "SELECT count(*)::int AS n FROM identity_keys")).toEqual([{ n: 1 }])
    }).pipe(Effect.scoped))

  it.live("the private key is stored sealed, bound to its kid", () =>
    withTokens(
      { issuer },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const sql = yield* SqlClient.SqlClient
        const [key] = (yield* tokens.jwks).keys
        const rows = yield* sql<{ row: string; sealedPrivateKey: string }>`
          SELECT to_jsonb(t)::text AS row, sealed_private_key FROM identity_keys t`
        expect(rows).toHaveLength(1)
        const sealer = SealedSecret.make(sealingKey)
        const opened = yield* sealer.open(rows[0]!.sealedPrivateKey, IdentityKeys.sealContext(key!.kid))
        const privateJwk = JSON.parse(Redacted.value(opened)) as { d: string; x: string }
        expect(privateJwk.x).toBe(key!.x)
        expect(privateJwk.d).toMatch(/^[A-Za-z0-9_-]{43}$/)
        expect(rows[0]!.row).not.toContain(privateJwk.d)
        expect(rows[0]!.row).not.toContain('"d"')
        // Sealed for this kid: it does not open as another key's.
        expect(yield* Effect.flip(sealer.open(rows[0]!.sealedPrivateKey, IdentityKeys.sealContext("other"))))
          .toBeInstanceOf(SealedSecret.SealedSecretError)
      })
    ))

  it.live("layerConfig reads the issuer and the token lifetime", () =>
    Effect.gen(function*() {
      const url = yield* TestDatabase.make
      const { jwks, token } = yield* Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        return { token: yield* tokens.sign(claims), jwks: yield* tokens.jwks }
      }).pipe(Effect.provide(
        IdentityTokensModule.layerConfig.pipe(
          Layer.provide(SealerLive),
          Layer.provide(databaseOn(url)),
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(
            new Map([["IDENTITY_ISSUER", "https://configured.test"], ["IDENTITY_TOKEN_SECONDS", "45"]])
          )))
        )
      ))
      const { payload } = yield* verify(token, jwks, { issuer: "https://configured.test" })
      expect(payload.exp! - payload.iat!).toBe(45)
    }))

  it.live("a database fault: the key set and rotation fail with PersistenceError, signing with its storage reason", () =>
    withTokens(
      { issuer, cacheTtl: 0 },
      Effect.gen(function*() {
        const tokens = yield* IdentityTokens
        const sql = yield* SqlClient.SqlClient
        yield* sql`ALTER TABLE identity_keys RENAME TO identity_keys_away`
        for (const failure of [yield* Effect.flip(tokens.jwks), yield* Effect.flip(tokens.rotate)]) {
          expect(failure).toBeInstanceOf(PersistenceError.PersistenceError)
          expect(DatabaseHealth.isPermanent(failure)).toBe(true)
        }
        const unsigned = yield* Effect.flip(tokens.sign(claims))
        expect(unsigned).toMatchObject({ _tag: "IdentityError", reason: "storage" })
        // What the driver said, as before the fault was typed.
        expect(unsigned.message).toBe("identity keys cannot be read: Failed to execute statement")
      })
    ))
})
