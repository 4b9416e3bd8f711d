/**
 * Nodes started together against one DATABASE_URL share tenants and keys,
 * and never print a secret.
 */
import { Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

it.scoped("two processes on one database serve the same tenants", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const operatorToken = `aro_${"k".repeat(43)}`
    // Both start on an empty database at once: migrations must not collide.
    const [one, two] = yield* Effect.all([
      TestNode.start({ databaseUrl, operatorToken }),
      TestNode.start({ databaseUrl, operatorToken })
    ], { concurrency: 2 })
    const api1 = Http.client(one.rest)
    const api2 = Http.client(two.rest)

    const tenant = (yield* api1.post("/v1/admin/tenants", { token: operatorToken, json: { name: "acme" } })).body
    expect((yield* api2.get("/v1/me", { token: tenant.token })).body.tenant).toBe(tenant.id)
    const listed = (yield* api2.get("/v1/admin/tenants", { token: operatorToken })).body.data
    expect(listed.map((t: { id: string }) => t.id)).toEqual([tenant.id])

    const extra = (yield* api2.post("/v1/tokens", { token: tenant.token, json: { name: "ci" } })).body
    expect((yield* api1.get("/v1/me", { token: extra.token })).status).toBe(200)
    yield* api2.delete(`/v1/tokens/${extra.id}`, { token: tenant.token })
    // Revocation holds on the other node at once: no cache stands in the way.
    expect((yield* api1.get("/v1/me", { token: extra.token })).status).toBe(401)

    // Secrets appear in no output of either process.
    const output = one.output() + two.output()
    expect(output).toContain("Sent HTTP response")
    for (const secret of [operatorToken, tenant.token, extra.token]) expect(output).not.toContain(secret)
  }), { timeout: 60_000 })

it.scoped("a restarted node finds its data and migrates nothing again", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const first = yield* TestNode.start({ databaseUrl })
    const tenant = (yield* Http.client(first.rest).post("/v1/admin/tenants", {
      token: first.operatorToken,
      json: { name: "acme" }
    })).body
    expect(first.output()).toContain("message=migrated")
    yield* first.stop()
    const second = yield* TestNode.start({ databaseUrl })
    expect(second.output()).not.toContain("message=migrated")
    expect((yield* Http.client(second.rest).get("/v1/me", { token: tenant.token })).body.tenant).toBe(tenant.id)
  }), { timeout: 60_000 })
