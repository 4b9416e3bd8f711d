/**
 * Settled requests heard through PostgreSQL: the journal's completion
 * announces a request, and a node's listeners hear it, once the node has
 * shown itself it is listening.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { BillingMigrations } from "@agent-runtime/billing"
import { Database, DatabaseHealth } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Redacted, Schedule, Scope } from "effect"
import * as AgentMigrations from "../src/AgentMigrations.ts"
import * as AgentStore from "../src/AgentStore.ts"
import * as ProbedChannel from "../src/internal/probedChannel.ts"
import * as Settlements from "../src/Settlements.ts"

const DatabaseLive = Layer.unwrapEffect(
  Effect.map(TestDatabase.make, (url) =>
    Database.layerClient(Redacted.make(url), {
      migrations: [
        AccountsMigrations.migrations,
        WebhookMigrations.migrations,
        BillingMigrations.migrations,
        AgentMigrations.migrations
      ]
    }))
)

const Live = Settlements.layer.pipe(
  Layer.provideMerge(Layer.mergeAll(AgentStore.layer, DatabaseHealth.layer)),
  Layer.provideMerge(DatabaseLive)
)

/** A waiter that counts what it is told. */
const waiter = () => {
  const told = { settled: 0, lost: 0 }
  return { told, waiter: { settled: () => void told.settled++, lost: () => void told.lost++ } }
}

layer(Live, { timeout: 30_000, excludeTestServices: true })("Settlements", (it) => {
  it.effect(
    "a completion is heard by the waiters of that request only, a fenced one by none, a long request id too",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const store = yield* AgentStore.AgentStore
        const settlements = yield* Settlements.Settlements
        yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_settle', 'settle')`
        yield* sql`INSERT INTO agents (id, tenant_id, name, config, input_fingerprint)
        VALUES ('client_settle', 'tn_settle', 'settle', '{"model": "fake/m1"}', 'f')`
        for (const id of ["req_a", "req_b", "req_c"]) {
          yield* store.insertRequest({ agentId: "client_settle", id, method: "prompt", fingerprint: "f", input: {} })
        }
        const { epoch } = yield* store.claim("client_settle", "127.0.0.1:1")

        // Listening is promised once the node heard its own probe.
        const a = waiter()
        const stopA = yield* Effect.sync(() => settlements.listen("client_settle", "req_a", a.waiter)).pipe(
          Effect.filterOrFail(Option.isSome, () => "not listening yet" as const),
          Effect.retry({ schedule: Schedule.spaced("50 millis"), times: 100 })
        )
        const b = waiter()
        Option.getOrThrow(settlements.listen("client_settle", "req_b", b.waiter))
        const stopped = waiter()
        const stop = Option.getOrThrow(settlements.listen("client_settle", "req_a", stopped.waiter))
        stop()

        yield* store.fenced("client_settle", epoch, store.complete("client_settle", "req_a", { result: {} }, undefined))
        yield* Effect.sync(() => a.told.settled).pipe(
          Effect.filterOrFail((count) => count === 1, () => "not yet" as const),
          Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 })
        )
        // A request already complete is not completed, nor announced, again.
        yield* store.fenced("client_settle", epoch, store.complete("client_settle", "req_a", { result: {} }, undefined))
        // Another owner's claim fences this one's completion of req_b out: nothing changed, nothing announced.
        yield* store.claim("client_settle", "127.0.0.1:2")
        const fenced = yield* Effect.flip(
          store.fenced("client_settle", epoch, store.complete("client_settle", "req_b", { result: {} }, undefined))
        )
        expect(fenced._tag).toBe("Fenced")
        yield* Effect.sleep("300 millis")
        expect([a.told, b.told, stopped.told]).toEqual([
          { settled: 1, lost: 0 },
          { settled: 0, lost: 0 },
          { settled: 0, lost: 0 }
        ])
        stopA.value()

        // A request id longer than a notification completes, and its waiter hears it by the id's start.
        const longId = `req_${"l".repeat(9_000)}`
        yield* store.insertRequest({
          agentId: "client_settle",
          id: longId,
          method: "prompt",
          fingerprint: "f",
          input: {}
        })
        const { epoch: next } = yield* store.claim("client_settle", "127.0.0.1:3")
        const long = waiter()
        Option.getOrThrow(settlements.listen("client_settle", longId, long.waiter))
        yield* store.fenced("client_settle", next, store.complete("client_settle", longId, { result: {} }, undefined))
        yield* Effect.sync(() => long.told.settled).pipe(
          Effect.filterOrFail((count) => count === 1, () => "not yet" as const),
          Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 })
        )
      }),
    20_000
  )

  it.effect(
    "nodes listening on one channel hear each other's announcements, never each other's probes",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const channel = "agent_runtime_probed_test"
        const node = Effect.gen(function*() {
          const state = { sure: false, lost: 0, heard: [] as Array<string> }
          yield* ProbedChannel.listen(channel, "test announcements", {
            sure: Effect.sync(() => void (state.sure = true)),
            heard: (payloads) => Effect.sync(() => payloads.forEach((payload) => state.heard.push(payload))),
            lost: () => void state.lost++
          })
          yield* Effect.sync(() => state.sure).pipe(
            Effect.filterOrFail((sure) => sure, () => "not sure yet" as const),
            Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 })
          )
          return state
        })
        const scope = yield* Scope.make()
        const first = yield* Scope.extend(node, scope)
        // The second probes the channel until it hears itself, while the first listens.
        const second = yield* Scope.extend(node, scope)
        yield* sql`SELECT pg_notify(${channel}, 'hello')`
        yield* Effect.sync(() => first.heard.length + second.heard.length).pipe(
          Effect.filterOrFail((count) => count === 2, () => "not yet" as const),
          Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 })
        )
        expect([first, second]).toEqual([
          { sure: true, lost: 0, heard: ["hello"] },
          { sure: true, lost: 0, heard: ["hello"] }
        ])
        yield* Scope.close(scope, Exit.void)
      }),
    20_000
  )
})
