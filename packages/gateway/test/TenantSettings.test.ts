/**
 * A tenant's gateway settings on a real PostgreSQL: set, read and reset; a
 * database fault is a typed `PersistenceError`, not a defect (a write the
 * table refuses, a database out of reach), which the gateway's `run` answers
 * as before.
 */
import { Database, DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { TcpProxy, TestDatabase } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import * as GatewayMigrations from "../src/GatewayMigrations.ts"
import * as TenantSettings from "../src/TenantSettings.ts"

const tenantId = "tn_gateway"

const settingsOn = (url: string) =>
  TenantSettings.layer.pipe(
    Layer.provide(
      Layer.fresh(Database.layerClient(Redacted.make(url), {
        migrations: [TestDatabase.tenantsStandIn, GatewayMigrations.migrations]
      }))
    )
  )

const withTenant = (url: string) =>
  TestDatabase.query(url, `INSERT INTO tenants (id, name) VALUES ('${tenantId}', 'g')`)

it.effect(
  "a tenant's slots are set, read and reset; a write the table refuses is a PersistenceError",
  () =>
    Effect.gen(function*() {
      const url = yield* TestDatabase.make
      yield* Effect.gen(function*() {
        const settings = yield* TenantSettings.TenantSettings
        yield* withTenant(url)
        expect(yield* settings.streamSlots(tenantId)).toEqual(Option.none())
        yield* settings.setStreamSlots(tenantId, Option.some(3))
        expect(yield* settings.streamSlots(tenantId)).toEqual(Option.some(3))
        const refused = yield* Effect.flip(settings.setStreamSlots(tenantId, Option.some(0)))
        expect(refused).toBeInstanceOf(PersistenceError.PersistenceError)
        expect(DatabaseHealth.isPermanent(refused)).toBe(true)
        yield* settings.setStreamSlots(tenantId, Option.none())
        expect(yield* settings.streamSlots(tenantId)).toEqual(Option.none())
      }).pipe(Effect.provide(settingsOn(url)))
    }),
  { timeout: 30_000 }
)

it.scoped(
  "with the database out of reach, a read fails with an unreachable PersistenceError",
  () =>
    Effect.gen(function*() {
      const proxy = yield* TcpProxy.start(yield* TestDatabase.make)
      yield* Effect.gen(function*() {
        const settings = yield* TenantSettings.TenantSettings
        yield* proxy.cut("refuse")
        const failed = yield* Effect.flip(settings.streamSlots(tenantId))
        expect(failed).toBeInstanceOf(PersistenceError.PersistenceError)
        expect(DatabaseHealth.isUnreachable(failed)).toBe(true)
      }).pipe(Effect.provide(settingsOn(proxy.url)))
    }),
  { timeout: 30_000 }
)
