/**
 * The ledger on a real database: charges written by `charging` (as the
 * statements that record usage run it) add to one entry per tenant and hour,
 * move the balance through the trigger, and leave tenants that are not
 * prepaid alone; a condition that fails charges nothing; operator entries
 * are idempotent under their key; the billing events fire once per fall.
 */
import { BillingEvents, BillingMigrations, Ledger, Payments, Rates } from "@agent-runtime/billing"
import { Billing } from "@agent-runtime/domain"
import { Database, DatabaseHealth } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { SqlClient, type Statement } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Option, Redacted } from "effect"

const rates = Effect.runSync(Effect.withConfigProvider(Rates.config, ConfigProvider.fromMap(new Map())))

const layerFor = (databaseUrl: string) =>
  Ledger.layer.pipe(
    Layer.provideMerge(Layer.mergeAll(Rates.layer(rates), Payments.layerNone, DatabaseHealth.layer)),
    Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
      migrations: [TestDatabase.tenantsStandIn, WebhookMigrations.migrations, BillingMigrations.migrations]
    }))
  )

const scenario = <A, E>(body: Effect.Effect<A, E, Ledger.Ledger | SqlClient.SqlClient>) =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_paying', 'paying'), ('tn_free', 'free')`
      return yield* body
    }).pipe(Effect.provide(layerFor(databaseUrl)))
  })

it("charges what a response cost on a key the operator pays for, with the OpenRouter multiplier", () => {
  expect(Ledger.modelCharge(rates, { keySource: "platform", provider: "acme", costUsd: 0.0123456 })).toBe(12346)
  expect(Ledger.modelCharge(rates, { keySource: "admin", provider: "acme", costUsd: 0.001 })).toBe(1000)
  expect(Ledger.modelCharge(rates, { keySource: "platform", provider: "openrouter", costUsd: 0.001 })).toBe(1055)
  for (const keySource of ["tenant", "scope"]) {
    expect(Ledger.modelCharge(rates, { keySource, provider: "acme", costUsd: 1 })).toBe(0)
  }
  expect(Ledger.modelCharge(rates, { keySource: "platform", provider: "acme", costUsd: Number.NaN })).toBe(0)
  // 50000 micro-USD an hour: 72 seconds are 1000.
  expect(Ledger.agentTimeCharge(rates, 72_000)).toBe(1000)
  expect(Ledger.agentTimeCharge(rates, -5)).toBe(0)
})

it.effect("charges add to one entry per tenant and hour, move the balance, and skip tenants not prepaid", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger.Ledger
    yield* ledger.setMode("tn_paying", new Billing.TenantBillingInput({ billing: "prepaid", startingCredit: 10_000 }))
    const charge = (charges: ReadonlyArray<Ledger.Charge>, when?: Statement.Fragment) =>
      Effect.asVoid(Ledger.charging(sql, charges, when) ?? Effect.void)
    yield* charge([
      { tenantId: "tn_paying", model: 100, tokens: 10, responses: 1 },
      { tenantId: "tn_paying", model: 50, tokens: 5, responses: 1 },
      { tenantId: "tn_free", model: 999, tokens: 1, responses: 1 }
    ])
    yield* charge([{ tenantId: "tn_paying", agentTime: 7, activeMs: 500 }])
    // A condition that does not hold (the fact is not new): nothing is charged.
    yield* charge([{ tenantId: "tn_paying", model: 1_000 }], sql.unsafe("false"))
    expect(Ledger.charging(sql, [{ tenantId: "tn_paying", model: 0 }])).toBeUndefined()

    const summary = yield* ledger.summary("tn_paying")
    expect(summary.balance).toBe(10_000 - 157)
    const usage = summary.recent.filter((entry) => entry.kind === "usage")
    expect(usage).toHaveLength(1)
    expect(usage[0]).toMatchObject({
      amount: -157,
      metadata: {
        tokens: 15,
        responses: 2,
        activeMs: 500,
        funding: { model: 150, agentTime: 7, webSearch: 0, webRender: 0 }
      }
    })
    expect(summary.month).toMatchObject({ grant: 10_000, usage: -157 })
    const free = yield* ledger.summary("tn_free")
    expect(free).toMatchObject({ billing: "none", balance: 0, recent: [] })
    expect(Option.isNone(yield* ledger.exhausted("tn_free"))).toBe(true)
  })))

it.effect("short turns' agent time adds up exactly: the hour is charged its sum, rounded once", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger.Ledger
    yield* ledger.setMode("tn_paying", new Billing.TenantBillingInput({ billing: "prepaid", startingCredit: 10_000 }))
    // 250 turns of 10.25 ms, each worth 0.14 micro-USD: rounded one by one, nothing would be charged.
    for (let turn = 0; turn < 250; turn++) {
      const activeMs = 10.25
      yield* Ledger.charging(sql, [{
        tenantId: "tn_paying",
        agentTime: Ledger.agentTimeCharge(rates, activeMs),
        activeMs
      }])!
    }
    yield* Ledger.charging(sql, [{ tenantId: "tn_paying", model: 5, responses: 1 }])!
    const summary = yield* ledger.summary("tn_paying")
    const [entry] = summary.recent.filter((entry) => entry.kind === "usage")
    // 2,562.5 ms at 50,000 micro-USD an hour: 35.59 micro-USD.
    expect(entry.metadata).toMatchObject({
      activeMs: 2562.5,
      responses: 1,
      funding: { model: 5, agentTime: 36, webSearch: 0, webRender: 0 }
    })
    expect(entry.amount).toBe(-41)
    expect(summary.balance).toBe(10_000 - 41)
  })))

it.effect("a spent balance or a reached cap stops new work; credit restores it", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger.Ledger
    yield* ledger.setMode("tn_paying", new Billing.TenantBillingInput({ billing: "prepaid" }))
    const refusal = Effect.flip(ledger.admit("tn_paying"))
    expect((yield* refusal)._tag).toBe("InsufficientCredit")
    yield* ledger.post("tn_paying", new Billing.LedgerEntryInput({ kind: "grant", amount: 500, note: "n" }), "k1")
    yield* ledger.admit("tn_paying")
    yield* Effect.flatMap(
      Effect.succeed(Ledger.charging(sql, [{ tenantId: "tn_paying", model: 300 }])!),
      (statement) => statement
    )
    yield* ledger.configure("tn_paying", new Billing.BillingSettingsInput({ monthlyCap: 300 }))
    expect((yield* refusal)._tag).toBe("SpendLimit")
    yield* ledger.configure("tn_paying", new Billing.BillingSettingsInput({ monthlyCap: null }))
    yield* ledger.admit("tn_paying")
    // A refund takes money back out of the balance; the same key again is the same entry.
    const refund = new Billing.LedgerEntryInput({ kind: "refund", amount: 200, note: "returned" })
    const first = yield* ledger.post("tn_paying", refund, "r1")
    const again = yield* ledger.post("tn_paying", refund, "r1")
    expect(again.id).toBe(first.id)
    expect(first.amount).toBe(-200)
    const conflict = yield* Effect.flip(
      ledger.post("tn_paying", new Billing.LedgerEntryInput({ kind: "refund", amount: 201, note: "returned" }), "r1")
    )
    expect(conflict._tag).toBe("IdempotencyConflict")
    const summary = yield* ledger.summary("tn_paying")
    expect(summary).toMatchObject({ balance: 0, purchased: -200 })
    expect((yield* refusal)._tag).toBe("InsufficientCredit")
  })))

it.effect("free credit is limited per hour (402 PAYMENT_REQUIRED); the first purchase lifts the limit", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger.Ledger
    yield* ledger.setMode(
      "tn_paying",
      new Billing.TenantBillingInput({ billing: "prepaid", startingCredit: 5_000_000 })
    )
    yield* Ledger.charging(sql, [{ tenantId: "tn_paying", model: rates.freeHourlySpend - 1 }])!
    yield* ledger.admit("tn_paying")
    yield* Ledger.charging(sql, [{ tenantId: "tn_paying", agentTime: 1 }])!
    const refused = yield* Effect.flip(ledger.admit("tn_paying"))
    expect(refused._tag).toBe("PaymentRequired")
    expect(Option.getOrNull(yield* ledger.exhausted("tn_paying"))).toBe("free_limit")
    yield* sql`INSERT INTO ledger_entries (tenant_id, kind, amount, idempotency_key)
      VALUES ('tn_paying', 'purchase', 5000000, 'purchase:p1')`
    expect((yield* ledger.summary("tn_paying")).freeCredit).toBe(false)
    yield* ledger.admit("tn_paying")
  })))

it.effect("each fall of the balance is told once, again after credit lifted it", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger.Ledger
    yield* sql`INSERT INTO webhook_endpoints (id, tenant_id, url, events, kind, sealed_secret)
      VALUES ('wh_1', 'tn_paying', 'https://example.invalid/h', ARRAY['billing.balance.low',
        'billing.balance.depleted'], 'endpoint', 'sealed')`
    yield* ledger.setMode(
      "tn_paying",
      new Billing.TenantBillingInput({ billing: "prepaid", startingCredit: 2_000_000 })
    )
    const { sweep } = yield* BillingEvents.make
    const told = () =>
      sql<{ type: string }>`SELECT type FROM webhook_events WHERE tenant_id = 'tn_paying' ORDER BY created`
    yield* sweep
    expect(yield* told()).toEqual([])
    const spend = (amount: number) =>
      Effect.flatMap(
        Effect.succeed(Ledger.charging(sql, [{ tenantId: "tn_paying", model: amount }])!),
        (statement) => statement
      )
    yield* spend(1_500_000)
    yield* sweep
    yield* sweep
    expect((yield* told()).map((row) => row.type)).toEqual(["billing.balance.low"])
    yield* spend(600_000)
    yield* Effect.all([sweep, sweep], { concurrency: 2 })
    expect((yield* told()).map((row) => row.type)).toEqual(["billing.balance.low", "billing.balance.depleted"])
    yield* ledger.post("tn_paying", new Billing.LedgerEntryInput({ kind: "grant", amount: 5_000_000, note: "n" }), "g")
    yield* spend(5_000_000)
    yield* sweep
    expect((yield* told()).map((row) => row.type)).toEqual([
      "billing.balance.low",
      "billing.balance.depleted",
      "billing.balance.low",
      "billing.balance.depleted"
    ])
  })))

it.effect("a day of storage is charged once per tenant and day, at the monthly rate for a day", () =>
  scenario(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger.Ledger
    yield* ledger.setMode(
      "tn_paying",
      new Billing.TenantBillingInput({ billing: "prepaid", startingCredit: 1_000_000 })
    )
    const bytes = sql`SELECT * FROM (VALUES ('tn_paying', 30000000000::bigint), ('tn_free', 5000000000::bigint))
      AS v (tenant_id, bytes)`
    // Two nodes at once, then again later in the day: one entry.
    yield* Effect.all([Ledger.storageCharging(sql, rates, bytes), Ledger.storageCharging(sql, rates, bytes)], {
      concurrency: 2
    })
    yield* Ledger.storageCharging(sql, rates, bytes)
    const [{ days }] = yield* sql<{ days: number }>`SELECT extract(day from date_trunc('month', now() AT TIME ZONE
      'UTC') + interval '1 month' - interval '1 day')::int AS days`
    const storage = (yield* ledger.summary("tn_paying")).recent.filter((entry) => entry.kind === "storage")
    expect(storage).toHaveLength(1)
    expect(storage[0]!.amount).toBe(-Math.round(30 * rates.storageGbMonth / days))
    expect(storage[0]!.metadata).toMatchObject({ bytes: 30_000_000_000 })
    expect((yield* ledger.summary("tn_free")).recent).toEqual([])
  })))
