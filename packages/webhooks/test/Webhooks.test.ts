/**
 * The webhooks package on a real database, with a real receiver that
 * verifies with the `standardwebhooks` library: the egress rules at save and
 * at send, secret rotation across a moved clock, retries given up after
 * their window, and the outbox's promise (an event only with its change).
 */
import { Egress, Resolver } from "@agent-runtime/egress"
import { Database, DatabaseHealth, PersistenceError, SealedSecret } from "@agent-runtime/store"
import { TestDatabase, WebhookReceiver } from "@agent-runtime/testing"
import { Outbox, WebhookDelivery, WebhookEndpoints, WebhookMigrations } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Redacted, type Scope } from "effect"
import * as Crypto from "node:crypto"
import { afterEach, vi } from "vitest"

const tenantId = "tn_hooks"

const layerFor = (
  databaseUrl: string,
  options: {
    readonly allowPrivate: boolean
    readonly names?: Record<string, Resolver.Answer>
    readonly delivery?: WebhookDelivery.Options
  }
) =>
  Layer.mergeAll(WebhookEndpoints.layer, WebhookDelivery.layer({ poll: "200 millis", ...options.delivery })).pipe(
    Layer.provideMerge(Layer.mergeAll(
      Egress.layer({ allowPrivate: options.allowPrivate }).pipe(
        Layer.provide(Resolver.layerTest(options.names ?? {}))
      ),
      SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64"))),
      DatabaseHealth.layer
    )),
    Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
      migrations: [TestDatabase.tenantsStandIn, WebhookMigrations.migrations]
    }))
  )

/** Runs `body` on a fresh database holding the test tenant. */
const scenario = <A, E>(
  options: Parameters<typeof layerFor>[1],
  body: Effect.Effect<
    A,
    E,
    | WebhookEndpoints.WebhookEndpoints
    | WebhookDelivery.WebhookDelivery
    | SqlClient.SqlClient
    | Scope.Scope
  >
) =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO tenants (id, name) VALUES (${tenantId}, 'hooks')`
      return yield* body
    }).pipe(Effect.provide(layerFor(databaseUrl, options)))
  })

/** Writes one run.completed event in a transaction of its own, as a change's statement would. */
const publish = (requestId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Outbox.publish([{
      tenantId,
      type: "run.completed",
      data: { agentId: "ag_1", requestId, method: "prompt", usage: null }
    }]).pipe(sql.withTransaction))

afterEach(() => {
  vi.useRealTimers()
})

it.scopedLive("at save: private, loopback, link-local (metadata) addresses and http are refused; nothing is written", () =>
  scenario(
    {
      allowPrivate: false,
      names: {
        "hooks.example.com": ["93.184.216.34"],
        "metadata.example.com": ["169.254.169.254"],
        "internal.example.com": ["10.0.0.7"],
        "mixed.example.com": ["93.184.216.34", "192.168.1.1"]
      }
    },
    Effect.gen(function*() {
      const endpoints = yield* WebhookEndpoints.WebhookEndpoints
      const refused = [
        "https://10.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/hook",
        "https://127.0.0.1/hook",
        "https://[fd00::1]/hook",
        "https://[::ffff:169.254.169.254]/hook",
        "http://hooks.example.com/hook",
        "https://metadata.example.com/hook",
        "https://internal.example.com/hook",
        "https://mixed.example.com/hook"
      ]
      for (const url of refused) {
        const made = yield* Effect.either(endpoints.create(tenantId, { url, events: ["run.started"] }))
        expect(made, url).toMatchObject({ _tag: "Left", left: { _tag: "InvalidRequest" } })
        const usage = yield* Effect.either(endpoints.putUsage(tenantId, { url }))
        expect(Either.isLeft(usage), url).toBe(true)
      }
      expect(yield* endpoints.list(tenantId)).toEqual([])
      const made = yield* endpoints.create(tenantId, { url: "https://hooks.example.com/hook", events: ["run.started"] })
      const moved = yield* Effect.either(endpoints.update(tenantId, made.id, { url: "https://internal.example.com/x" }))
      expect(Either.isLeft(moved)).toBe(true)
      expect((yield* endpoints.get(tenantId, made.id)).url).toBe("https://hooks.example.com/hook")
    })
  ))

it.scopedLive("at send: a name that now resolves to a private address is refused, recorded and retried", () => {
  let lookups = 0
  return scenario(
    {
      allowPrivate: false,
      // Public when saved, the metadata address from then on (DNS rebinding).
      names: { "rebind.example.com": () => lookups++ === 0 ? ["93.184.216.34"] : ["169.254.169.254"] }
    },
    Effect.gen(function*() {
      const endpoints = yield* WebhookEndpoints.WebhookEndpoints
      const delivery = yield* WebhookDelivery.WebhookDelivery
      const made = yield* endpoints.create(tenantId, {
        url: "https://rebind.example.com/hook",
        events: ["run.completed"]
      })
      yield* publish("req_1")
      let tried: ReadonlyArray<any> = []
      for (let wait = 0; wait < 100 && tried.length === 0; wait++) {
        yield* Effect.sleep("50 millis")
        tried = yield* delivery.attempts(made.id, 10)
      }
      expect(tried).toHaveLength(1)
      expect(tried[0]).toMatchObject({ attempt: 1, status: null, outcome: "retrying" })
      expect(tried[0].error).toMatch(/169\.254\.169\.254|not public|refused/)
      const [pending] = yield* delivery.deliveries(made.id, { limit: 10 })
      expect(pending).toMatchObject({ state: "pending", attempts: 1, lastStatus: null })
    })
  )
})

it.scopedLive("rotation: both secrets sign for 24 hours of the clock, only the new one after", () =>
  Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.start
    yield* scenario(
      { allowPrivate: true },
      Effect.gen(function*() {
        const endpoints = yield* WebhookEndpoints.WebhookEndpoints
        const made = yield* endpoints.create(tenantId, { url: `${receiver.url}/rotate`, events: ["run.completed"] })
        const start = Date.now()
        vi.useFakeTimers({ toFake: ["Date"], now: start })
        const rotated = yield* endpoints.rotateSecret(tenantId, made.id)
        receiver.trust("/rotate", [made.secret, rotated.secret])

        vi.setSystemTime(start + 23 * 3600_000 + 59 * 60_000)
        yield* publish("req_within")
        const [within] = yield* receiver.waitFor("/rotate", (got) => got.length >= 1)
        expect(within!.headers.signature.split(" ")).toHaveLength(2)
        expect(within!.verifiedWith).toEqual([made.secret, rotated.secret])

        vi.setSystemTime(start + 24 * 3600_000 + 1000)
        yield* publish("req_after")
        const after = (yield* receiver.waitFor("/rotate", (got) => got.length >= 2))[1]!
        expect(after.event.data.requestId).toBe("req_after")
        expect(after.headers.signature.split(" ")).toHaveLength(1)
        expect(after.verifiedWith).toEqual([rotated.secret])
      })
    )
  }))

it.scopedLive("retries stop at the end of their window: the delivery is failed, and a re-send tries again", () =>
  Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.start
    receiver.behave("/dead", { status: 503 })
    yield* scenario(
      { allowPrivate: true, delivery: { firstRetry: "300 millis", maxRetry: "1 second", retryFor: "2 seconds" } },
      Effect.gen(function*() {
        const endpoints = yield* WebhookEndpoints.WebhookEndpoints
        const delivery = yield* WebhookDelivery.WebhookDelivery
        const made = yield* endpoints.create(tenantId, { url: `${receiver.url}/dead`, events: ["run.completed"] })
        receiver.trust("/dead", [made.secret])
        yield* publish("req_dead")
        let state = "pending"
        for (let wait = 0; wait < 100 && state === "pending"; wait++) {
          yield* Effect.sleep("100 millis")
          state = (yield* delivery.deliveries(made.id, { limit: 1 }))[0]?.state ?? "pending"
        }
        expect(state).toBe("failed")
        const tried = yield* delivery.attempts(made.id, 100)
        expect(tried.length).toBeGreaterThanOrEqual(3)
        expect(tried[0]).toMatchObject({ status: 503, outcome: "failed" })
        expect(tried[0]!.nextAt).toBeUndefined()
        expect(tried.slice(1).every((attempt) => attempt.outcome === "retrying")).toBe(true)
        // Every try carried the same id, and nothing more is sent once failed.
        const sent = receiver.deliveries("/dead")
        expect(new Set(sent.map((got) => got.headers.id)).size).toBe(1)
        expect(sent.every((got) => got.verifiedWith.length === 1)).toBe(true)
        yield* Effect.sleep("1500 millis")
        expect(receiver.deliveries("/dead")).toHaveLength(sent.length)

        receiver.behave("/dead", {})
        const resent = yield* delivery.resend(made.id, sent[0]!.headers.id)
        expect(resent.eventId).toBe(sent[0]!.headers.id)
        yield* receiver.waitFor("/dead", (got) => got.at(-1)?.status === 204, 5_000)
        const [settled] = yield* delivery.deliveries(made.id, { limit: 1 })
        expect(settled).toMatchObject({ state: "delivered", attempts: 1 })
      })
    )
  }))

it.scopedLive("the outbox: no event without a subscribed endpoint, none from a transaction rolled back, sent at commit", () =>
  Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.start
    yield* scenario(
      // Nodes look for due deliveries only every minute here: the one sent is sent because the commit told them.
      { allowPrivate: true, delivery: { poll: "1 minute" } },
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const endpoints = yield* WebhookEndpoints.WebhookEndpoints
        yield* publish("req_nobody")
        expect(yield* sql`SELECT id FROM webhook_events`).toEqual([])
        const made = yield* endpoints.create(tenantId, { url: `${receiver.url}/tx`, events: ["run.completed"] })
        receiver.trust("/tx", [made.secret])
        const failed = yield* Effect.either(
          Effect.zipRight(
            Outbox.publish([{ tenantId, type: "run.completed", data: { requestId: "req_rolled_back" } }]),
            Effect.fail("the change failed")
          ).pipe(sql.withTransaction)
        )
        expect(Either.isLeft(failed)).toBe(true)
        yield* publish("req_kept")
        const [got] = yield* receiver.waitFor("/tx", (got) => got.length >= 1, 3_000)
        expect(got!.event.data.requestId).toBe("req_kept")
        yield* Effect.sleep("600 millis")
        expect(receiver.deliveries("/tx")).toHaveLength(1)
        expect((yield* sql<{ count: number }>`SELECT count(*)::int AS count FROM webhook_events`)[0]!.count).toBe(1)
      })
    )
  }))

it.scopedLive("a database fault is a PersistenceError to the caller, and the senders log it and go on", () =>
  Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.start
    yield* scenario(
      { allowPrivate: true },
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const endpoints = yield* WebhookEndpoints.WebhookEndpoints
        const delivery = yield* WebhookDelivery.WebhookDelivery
        const made = yield* endpoints.create(tenantId, { url: `${receiver.url}/fault`, events: ["run.completed"] })
        receiver.trust("/fault", [made.secret])

        yield* sql`ALTER TABLE webhook_endpoints RENAME TO webhook_endpoints_away`
        yield* sql`ALTER TABLE webhook_attempts RENAME TO webhook_attempts_away`
        const failures = [
          yield* Effect.flip(endpoints.create(tenantId, { url: `${receiver.url}/other`, events: ["run.started"] })),
          yield* Effect.flip(endpoints.list(tenantId)),
          yield* Effect.flip(endpoints.rotateSecret(tenantId, made.id)),
          yield* Effect.flip(endpoints.owns(tenantId, made.id)),
          yield* Effect.flip(delivery.attempts(made.id, 10))
        ]
        for (const failure of failures) {
          expect(failure).toBeInstanceOf(PersistenceError.PersistenceError)
          expect(DatabaseHealth.isPermanent(failure)).toBe(true)
        }
        // The senders meet the fault too (claiming reads the endpoints); they are still there once it is gone.
        yield* Effect.sleep("500 millis")
        yield* sql`ALTER TABLE webhook_endpoints_away RENAME TO webhook_endpoints`
        yield* sql`ALTER TABLE webhook_attempts_away RENAME TO webhook_attempts`
        yield* publish("req_after_fault")
        const [got] = yield* receiver.waitFor("/fault", (got) => got.length >= 1, 5_000)
        expect(got!.event.data.requestId).toBe("req_after_fault")
        expect(yield* endpoints.list(tenantId)).toHaveLength(1)
      })
    )
  }))
