import { AutoTopups, BillingMigrations, Ledger, Payments, Purchases, Rates } from "@agent-runtime/billing"
import { Billing } from "@agent-runtime/domain"
import { Database, DatabaseHealth } from "@agent-runtime/store"
import { FakeStripe, TestDatabase } from "@agent-runtime/testing"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"

/** A 5.5% fee, starting credit of $5 for a card check, purchases from $5 to $1000. */
const rates = Effect.runSync(Effect.withConfigProvider(
  Rates.config,
  ConfigProvider.fromMap(new Map([["BILLING_PURCHASE_FEE_BPS", "550"], ["BILLING_CARD_CHECK_CREDIT", "5000000"]]))
))

type Services =
  | Ledger.Ledger
  | Purchases.Purchases
  | AutoTopups.AutoTopups
  | SqlClient.SqlClient

const scenario = <A, E>(body: (stripe: FakeStripe.FakeStripe) => Effect.Effect<A, E, Services>) =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const stripe = yield* FakeStripe.start
    const layer = AutoTopups.layer.pipe(
      Layer.provideMerge(Purchases.layer({ baseUrl: Effect.succeed("http://console.test") })),
      Layer.provideMerge(Ledger.layer),
      Layer.provideMerge(Layer.mergeAll(
        Rates.layer(rates),
        Payments.layerStripe({
          secretKey: Redacted.make(FakeStripe.secretKey),
          webhookSecret: Redacted.make(FakeStripe.webhookSecret),
          apiUrl: new URL(stripe.url)
        }),
        DatabaseHealth.layer
      )),
      Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
        migrations: [TestDatabase.tenantsStandIn, WebhookMigrations.migrations, BillingMigrations.migrations]
      }))
    )
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const purchases = yield* Purchases.Purchases
      yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_a', 'a'), ('tn_b', 'b'), ('tn_none', 'none')`
      yield* sql`INSERT INTO webhook_endpoints (id, tenant_id, url, events, kind, sealed_secret)
        SELECT 'wh_' || id, id, 'https://example.invalid/h', ARRAY['billing.topup.receipt', 'billing.topup.declined',
          'billing.topup.action_required', 'billing.topup.no_card', 'billing.topup.limit',
          'billing.topup.reconcile'], 'endpoint', 'sealed' FROM tenants`
      const ledger = yield* Ledger.Ledger
      for (const tenantId of ["tn_a", "tn_b"]) {
        yield* ledger.setMode(tenantId, new Billing.TenantBillingInput({ billing: "prepaid" }))
      }
      // Notices reach the service as the webhook route hands them on: the body as sent and its signature.
      stripe.notifyTo((payload, signature) =>
        Effect.runPromise(
          purchases.notice(payload, signature).pipe(
            Effect.as(200),
            Effect.catchAll((error) =>
              Effect.succeed(error._tag === "InvalidRequest" ? 400 : error._tag === "Unavailable" ? 503 : 500)
            )
          )
        )
      )
      return yield* body(stripe)
    }).pipe(Effect.provide(layer))
  }).pipe(Effect.scoped)

const told = (tenantId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ type: string; data: Record<string, unknown> }>`
      SELECT type, data FROM webhook_events WHERE tenant_id = ${tenantId} ORDER BY created, id`)

const balanceOf = (tenantId: string) =>
  Effect.map(Effect.flatMap(Ledger.Ledger, (ledger) => ledger.summary(tenantId)), (summary) => summary.balance)

it.effect(
  "a checkout is checked before anything is written, kept by its requestId, and credited once",
  () =>
    scenario((stripe) =>
      Effect.gen(function*() {
        const purchases = yield* Purchases.Purchases
        const sql = yield* SqlClient.SqlClient
        for (const amount of [5_000_001, 4_990_000, 1_000_010_000]) {
          const refused = yield* Effect.flip(purchases.checkout("tn_a", new Billing.CheckoutInput({ amount })))
          expect(refused._tag).toBe("InvalidRequest")
        }
        expect(
          (yield* Effect.flip(purchases.checkout("tn_none", new Billing.CheckoutInput({ amount: 10_000_000 }))))
            ._tag
        ).toBe("Conflict")
        expect(yield* sql`SELECT id FROM purchases`).toEqual([])
        expect(stripe.requests()).toEqual([])

        const input = new Billing.CheckoutInput({ amount: 10_000_000, requestId: "buy-1" })
        const [first, second] = yield* Effect.all([
          purchases.checkout("tn_a", input),
          purchases.checkout("tn_a", input)
        ], {
          concurrency: 2
        })
        expect(second.id).toBe(first.id)
        expect(first).toMatchObject({ kind: "purchase", status: "open", amount: 10_000_000, fee: 550_000 })
        expect(first.total).toBe(10_550_000)
        const opened = stripe.requests().filter((request) => request.path === "/v1/checkout/sessions")
        // Both asked Stripe under the purchase's key: one session.
        expect(new Set(opened.map((request) => request.idempotencyKey))).toEqual(new Set([`checkout:${first.id}`]))
        const sessionId = first.url.split("/pay/")[1]!
        expect(stripe.session(sessionId)).toMatchObject({ amount_total: 1055, mode: "payment", status: "open" })
        // Both may have made the tenant's customer: under one key, so Stripe keeps one.
        expect(
          new Set(
            stripe.requests().filter((request) => request.path === "/v1/customers").map((request) =>
              request.idempotencyKey
            )
          )
        ).toEqual(new Set(["customer:tn_a"]))
        const conflict = yield* Effect.flip(
          purchases.checkout("tn_a", new Billing.CheckoutInput({ amount: 20_000_000, requestId: "buy-1" }))
        )
        expect(conflict._tag).toBe("IdempotencyConflict")

        // Paid: the notice, told three times, and the buyer back reading it at once, credit it once.
        expect(yield* Effect.promise(() => stripe.pay(sessionId))).toBe(200)
        const event = stripe.events().at(-1)!
        const [resent, read] = yield* Effect.all([
          Effect.promise(() => stripe.resend(event.id)),
          purchases.get("tn_a", first.id),
          Effect.promise(() => stripe.resend(event.id))
        ], { concurrency: 3 })
        expect(resent).toBe(200)
        expect(read.status).toBe("paid")
        const summary = yield* Effect.flatMap(Ledger.Ledger, (ledger) => ledger.summary("tn_a"))
        expect(summary).toMatchObject({ balance: 10_000_000, purchased: 10_000_000, freeCredit: false, checkout: true })
        expect(summary.recent.filter((entry) => entry.kind === "purchase")).toHaveLength(1)
        expect((yield* told("tn_a")).map((row) => row.type)).toEqual(["billing.topup.receipt"])
        expect((yield* told("tn_a"))[0]!.data).toMatchObject({
          purchase: first.id,
          auto: false,
          amount: 10_000_000,
          fee: 550_000,
          total: 10_550_000,
          balance: 10_000_000
        })

        // A notice that does not carry Stripe's signature changes nothing.
        const forged = yield* Effect.flip(purchases.notice(JSON.stringify(event), "t=1,v1=00"))
        expect(forged._tag).toBe("InvalidRequest")
        expect(yield* balanceOf("tn_a")).toBe(10_000_000)
      })
    ),
  60_000
)

it.effect(
  "refunds take back their share once, whatever order Stripe tells them in",
  () =>
    scenario((stripe) =>
      Effect.gen(function*() {
        const purchases = yield* Purchases.Purchases
        const checkout = yield* purchases.checkout("tn_a", new Billing.CheckoutInput({ amount: 20_000_000 }))
        const sessionId = checkout.url.split("/pay/")[1]!
        yield* Effect.promise(() => stripe.pay(sessionId))
        const paymentId = stripe.session(sessionId)!.payment_intent as string
        // The charge was 2110 cents: 1055 refunded is half, so half the credit.
        expect(yield* Effect.promise(() => stripe.refund(paymentId, 1055))).toBe(200)
        const half = stripe.events().at(-1)!
        expect(yield* balanceOf("tn_a")).toBe(10_000_000)
        expect(yield* Effect.promise(() => stripe.refund(paymentId, 1055))).toBe(200)
        expect(yield* balanceOf("tn_a")).toBe(0)
        // The older total told again after the newer takes nothing.
        expect(yield* Effect.promise(() => stripe.resend(half.id))).toBe(200)
        expect(yield* balanceOf("tn_a")).toBe(0)
        const summary = yield* Effect.flatMap(Ledger.Ledger, (ledger) => ledger.summary("tn_a"))
        expect(summary.purchased).toBe(0)

        // A refund told before its purchase was settled here (Stripe does not keep order): 503, so Stripe tells
        // it again; told after the purchase, it is taken.
        const early = yield* purchases.checkout("tn_b", new Billing.CheckoutInput({ amount: 10_000_000 }))
        const earlySession = early.url.split("/pay/")[1]!
        stripe.notifyTo(() => Promise.resolve(0))
        yield* Effect.promise(() => stripe.pay(earlySession))
        const paid = stripe.events().at(-1)!
        const earlyPayment = stripe.session(earlySession)!.payment_intent as string
        stripe.notifyTo((payload, signature) =>
          Effect.runPromise(
            purchases.notice(payload, signature).pipe(Effect.as(200), Effect.catchAll(() => Effect.succeed(503)))
          )
        )
        expect(yield* Effect.promise(() => stripe.refund(earlyPayment, 1055))).toBe(503)
        const refundTold = stripe.events().at(-1)!
        expect(yield* balanceOf("tn_b")).toBe(0)
        expect(yield* Effect.promise(() => stripe.resend(paid.id))).toBe(200)
        expect(yield* balanceOf("tn_b")).toBe(10_000_000)
        expect(yield* Effect.promise(() => stripe.resend(refundTold.id))).toBe(200)
        expect(yield* balanceOf("tn_b")).toBe(0)
        expect(summary.recent.filter((entry) => entry.kind === "refund").map((entry) => entry.amount)).toEqual([
          -10_000_000,
          -10_000_000
        ])
      })
    ),
  60_000
)

it.effect(
  "a card check unlocks the starting credit once per card, never for a prepaid card",
  () =>
    scenario((stripe) =>
      Effect.gen(function*() {
        const purchases = yield* Purchases.Purchases
        const ledger = yield* Ledger.Ledger
        expect((yield* ledger.summary("tn_a")).startingCredit).toMatchObject({
          status: "not_granted",
          cardCheck: { amount: 5_000_000 }
        })
        const check = yield* purchases.cardCheck("tn_a")
        expect(check).toMatchObject({ kind: "card_check", status: "open", amount: 5_000_000, total: 0 })
        // Asked again while open: the same check.
        expect((yield* purchases.cardCheck("tn_a")).id).toBe(check.id)
        const sessionId = check.url.split("/pay/")[1]!
        expect(stripe.session(sessionId)).toMatchObject({ mode: "setup" })
        yield* Effect.promise(() => stripe.pay(sessionId, { fingerprint: "fp_same" }))
        yield* Effect.promise(() => stripe.resend(stripe.events().at(-1)!.id))
        expect(yield* ledger.summary("tn_a")).toMatchObject({
          balance: 5_000_000,
          startingCredit: { status: "granted", amount: 5_000_000 },
          freeCredit: true
        })
        expect((yield* Effect.flip(purchases.cardCheck("tn_a")))._tag).toBe("Conflict")

        // The same card on another tenant unlocks nothing.
        const again = yield* purchases.cardCheck("tn_b")
        yield* Effect.promise(() => stripe.pay(again.url.split("/pay/")[1]!, { fingerprint: "fp_same" }))
        expect(yield* ledger.summary("tn_b")).toMatchObject({
          balance: 0,
          startingCredit: { status: "not_eligible", amount: 0 }
        })
        expect((yield* ledger.summary("tn_b")).startingCredit.cardCheck).toBeUndefined()
      })
    ),
  60_000
)

it.effect("a prepaid card unlocks no starting credit", () =>
  scenario((stripe) =>
    Effect.gen(function*() {
      const purchases = yield* Purchases.Purchases
      const check = yield* purchases.cardCheck("tn_a")
      yield* Effect.promise(() => stripe.pay(check.url.split("/pay/")[1]!, { fingerprint: "fp_p", funding: "prepaid" }))
      expect(yield* Effect.flatMap(Ledger.Ledger, (ledger) => ledger.summary("tn_a"))).toMatchObject({
        balance: 0,
        startingCredit: { status: "not_eligible" }
      })
    })
  ), 60_000)

it.effect(
  "automatic top-ups charge the saved card once per fall, within the month's limit, and say what went wrong",
  () =>
    scenario((stripe) =>
      Effect.gen(function*() {
        const purchases = yield* Purchases.Purchases
        const topups = yield* AutoTopups.AutoTopups
        const ledger = yield* Ledger.Ledger
        const settings = new Billing.AutoTopupInput({
          enabled: true,
          threshold: 2_000_000,
          amount: 10_000_000,
          monthlyLimit: 25_000_000
        })
        expect(
          (yield* Effect.flip(
            topups.set("tn_a", new Billing.AutoTopupInput({ ...settings, monthlyLimit: 10_000_000 }))
          ))
            ._tag
        ).toBe("InvalidRequest")
        expect((yield* Effect.flip(topups.set("tn_none", settings)))._tag).toBe("Conflict")
        yield* topups.set("tn_a", settings)

        // No card saved: told once, and paused.
        yield* topups.sweep
        yield* topups.sweep
        expect(yield* topups.get("tn_a")).toMatchObject({ state: "paused", pausedBecause: "no_card", card: false })
        expect((yield* told("tn_a")).map((row) => row.type)).toEqual(["billing.topup.no_card"])

        // A purchase saves the card; saving the settings again resumes. The balance is above the threshold.
        const bought = yield* purchases.checkout("tn_a", new Billing.CheckoutInput({ amount: 5_000_000 }))
        yield* Effect.promise(() => stripe.pay(bought.url.split("/pay/")[1]!))
        yield* topups.set("tn_a", settings)
        expect(yield* topups.get("tn_a")).toMatchObject({ state: "active", card: true })
        yield* topups.sweep
        expect(stripe.paymentIntents()).toHaveLength(1)

        // Spent below the threshold: two nodes sweep at once, one charge.
        const sql = yield* SqlClient.SqlClient
        const spend = (amount: number) => Ledger.charging(sql, [{ tenantId: "tn_a", model: amount }])!
        yield* spend(4_000_000)
        yield* Effect.all([topups.sweep, topups.sweep, topups.sweep], { concurrency: 3 })
        expect(stripe.paymentIntents()).toHaveLength(2)
        expect(stripe.paymentIntents()[1]).toMatchObject({ amount: 1055, status: "succeeded" })
        expect(yield* balanceOf("tn_a")).toBe(11_000_000)
        expect((yield* told("tn_a")).at(-1)).toMatchObject({
          type: "billing.topup.receipt",
          data: { auto: true, total: 10_550_000 }
        })

        // Declined: told, paused, and not tried again until the settings are saved.
        stripe.card("decline", 1)
        yield* spend(10_000_000)
        yield* topups.sweep
        yield* topups.sweep
        expect(yield* topups.get("tn_a")).toMatchObject({ state: "paused", pausedBecause: "declined" })
        expect((yield* told("tn_a")).at(-1)).toMatchObject({
          type: "billing.topup.declined",
          data: { reason: "insufficient_funds" }
        })
        expect(stripe.paymentIntents()).toHaveLength(3)

        // The bank asks the buyer: told; the buyer confirms later and the credit is posted then.
        stripe.card("authentication_required", 1)
        yield* topups.set("tn_a", settings)
        yield* topups.sweep
        expect(yield* topups.get("tn_a")).toMatchObject({ state: "paused", pausedBecause: "action_required" })
        expect((yield* told("tn_a")).at(-1)!.type).toBe("billing.topup.action_required")
        const asked = stripe.paymentIntents().at(-1)!
        expect(yield* Effect.promise(() => stripe.confirm(asked.id))).toBe(200)
        expect(yield* topups.get("tn_a")).toMatchObject({ state: "active" })
        expect(yield* balanceOf("tn_a")).toBe(11_000_000)

        // Two top-ups this month (21.1 USD with fees) leave no room for a third under 25 USD: told once.
        yield* spend(10_000_000)
        yield* topups.sweep
        yield* topups.sweep
        const limits = (yield* told("tn_a")).filter((row) => row.type === "billing.topup.limit")
        expect(limits).toHaveLength(1)
        expect(limits[0]!.data).toMatchObject({ monthlyLimit: 25_000_000, charged: 21_100_000 })
        expect(stripe.paymentIntents()).toHaveLength(4)
        expect((yield* ledger.summary("tn_a")).balance).toBe(1_000_000)
      })
    ),
  60_000
)

it.live(
  "a top-up whose answer was lost is tried again with its key: the card is charged once",
  () =>
    scenario((stripe) =>
      Effect.gen(function*() {
        const purchases = yield* Purchases.Purchases
        const topups = yield* AutoTopups.AutoTopups
        const sql = yield* SqlClient.SqlClient
        const bought = yield* purchases.checkout("tn_a", new Billing.CheckoutInput({ amount: 5_000_000 }))
        yield* Effect.promise(() => stripe.pay(bought.url.split("/pay/")[1]!))
        yield* topups.set(
          "tn_a",
          new Billing.AutoTopupInput({
            enabled: true,
            threshold: 6_000_000,
            amount: 5_000_000,
            monthlyLimit: 50_000_000
          })
        )
        // The charge is made, and its answer lost three times: the client's own two retries too.
        stripe.card("lose_answer", 3)
        yield* topups.sweep
        expect(stripe.paymentIntents().filter((intent) => intent.metadata.topup !== undefined)).toHaveLength(1)
        expect(yield* Effect.flatMap(Ledger.Ledger, (ledger) => ledger.summary("tn_a"))).toMatchObject({
          balance: 5_000_000
        })
        // Another sweep before it is stale starts nothing new.
        yield* topups.sweep
        expect(yield* sql`SELECT id FROM purchases WHERE kind = 'topup'`).toHaveLength(1)
        yield* Effect.sleep("11 seconds")
        yield* topups.sweep
        const charges = stripe.paymentIntents().filter((intent) => intent.metadata.topup !== undefined)
        expect(charges).toHaveLength(1)
        expect(yield* balanceOf("tn_a")).toBe(10_000_000)
        const keys = stripe.requests().filter((request) => request.path === "/v1/payment_intents")
          .map((request) => request.idempotencyKey)
        expect(keys.length).toBeGreaterThan(3)
        expect(new Set(keys).size).toBe(1)
      })
    ),
  60_000
)
