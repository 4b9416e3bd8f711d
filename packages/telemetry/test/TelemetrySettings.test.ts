/**
 * A tenant's export target on a real database: read once and held, and a read
 * that does not answer in time fails (a run then goes untraced rather than
 * waiting on a database cut off); a target held is answered with no read.
 */
import { Egress, Resolver } from "@agent-runtime/egress"
import { Database, PersistenceError, SealedSecret } from "@agent-runtime/store"
import { TelemetryMigrations, TelemetrySettings } from "@agent-runtime/telemetry"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"

const layerFor = (databaseUrl: string) =>
  TelemetrySettings.layer.pipe(
    Layer.provide(SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))),
    Layer.provide(Egress.layer({ allowPrivate: true }).pipe(Layer.provide(Resolver.layer))),
    Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
      migrations: [TestDatabase.tenantsStandIn, TelemetryMigrations.migrations]
    }))
  )

it.live("a target is read within its bound, and a target held is answered with no read", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const settings = yield* TelemetrySettings.TelemetrySettings
      yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_held', 'held'), ('tn_unread', 'unread')`
      yield* sql`INSERT INTO telemetry_settings (tenant_id, endpoint, header_names, protocol, sample_rate,
        include_content) VALUES ('tn_held', 'http://127.0.0.1:4318/v1/traces', '{}', 'http/json', 0.5, false)`
      const first = yield* settings.target("tn_held", { within: "5 seconds" })
      expect(Option.map(first, (target) => [target.endpoint, target.sampleRate])).toEqual(
        Option.some(["http://127.0.0.1:4318/v1/traces", 0.5])
      )

      // The table locked by another session: a read of it waits for the lock, as on a connection cut off.
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* sql.withTransaction(
        sql`LOCK TABLE telemetry_settings IN ACCESS EXCLUSIVE MODE`.pipe(
          Effect.zipRight(Deferred.succeed(locked, void 0)),
          Effect.zipRight(Deferred.await(release))
        )
      ).pipe(Effect.fork)
      yield* Deferred.await(locked)

      // Held: answered at once, though the table cannot be read.
      const held = yield* settings.target("tn_held", { within: "200 millis" })
      expect(Option.isSome(held)).toBe(true)

      // Not held: the read fails at its bound, with why.
      const started = Date.now()
      const error = yield* Effect.flip(settings.target("tn_unread", { within: "300 millis" }))
      const waited = Date.now() - started
      expect(error).toBeInstanceOf(PersistenceError.PersistenceError)
      expect(String(error.cause)).toContain("the telemetry settings were not read within")
      expect(waited).toBeGreaterThanOrEqual(280)
      expect(waited).toBeLessThan(3000)

      yield* Deferred.succeed(release, void 0)
      yield* Fiber.join(holder)
      // The lock gone, the same read answers: no target for that tenant.
      expect(yield* settings.target("tn_unread", { within: "5 seconds" })).toEqual(Option.none())
    }).pipe(Effect.provide(layerFor(databaseUrl)))
  }))
