/**
 * Automatic top-ups: when a prepaid tenant's balance falls below its
 * threshold, its saved card is charged for the amount it chose, within a
 * monthly limit (fees included) it chose too.
 *
 * Each top-up is a purchase row written before the card is charged, and the
 * charge carries the row's id as its key, so a node dying mid-charge, a
 * provider that does not answer, or two nodes finding the same fall charge
 * the card once. At most one top-up per tenant is unresolved at a time. What
 * happens is told by webhook: `billing.topup.receipt` (paid),
 * `.declined`, `.action_required` (the bank asks the buyer), `.no_card`,
 * `.limit` (the month's limit reached, once a month) and `.reconcile` (the
 * provider never said how a charge ended). A decline, a needed action, a
 * missing card or an unknown outcome pauses top-ups until the tenant saves
 * its settings again.
 */
import { ApiError, Billing, type Webhook } from "@agent-runtime/domain"
import { DatabaseHealth, Ids, PersistenceError } from "@agent-runtime/store"
import { Outbox } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { monthStart } from "./Ledger.ts"
import { ChargeResult, feeOf, Payments, wholeCents } from "./Payments.ts"
import { lockTenant, purchaseColumns, type PurchaseRow, Purchases } from "./Purchases.ts"
import { Rates } from "./Rates.ts"

const interval = Duration.seconds(2)

/** A top-up whose charge has not answered for this long is tried again, with the same key. */
const staleSeconds = 10

/** Tries without an answer before a top-up is called uncertain (and told as `reconcile`). */
const maxAttempts = 10

/**
 * Past this age an uncertain top-up is no longer tried: the provider keeps a key about a day, and a charge
 * tried again after that could be a second one.
 */
const retryHours = 23

export class AutoTopups extends Context.Tag("@agent-runtime/billing/AutoTopups")<AutoTopups, {
  readonly get: (tenantId: string) => Effect.Effect<Billing.AutoTopup, PersistenceError.PersistenceError>
  /** Saves the settings (and lifts a pause). */
  readonly set: (
    tenantId: string,
    input: Billing.AutoTopupInput
  ) => Effect.Effect<
    Billing.AutoTopup,
    ApiError.InvalidRequest | ApiError.Conflict | PersistenceError.PersistenceError
  >
  /** Starts the top-ups that are due and tries again those not answered; every node runs it. */
  readonly sweep: Effect.Effect<void, PersistenceError.PersistenceError>
}>() {}

interface SettingsRow {
  readonly mode: string
  readonly enabled: boolean
  readonly threshold: number | null
  readonly amount: number | null
  readonly monthlyLimit: number | null
  readonly paused: Billing.AutoTopup["pausedBecause"]
  readonly customer: string | null
  readonly paymentMethod: string | null
  readonly balance: number
  readonly limitTold: string | null
  readonly charged: number
}

const thisMonth = () => new Date().toISOString().slice(0, 7)

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rates = yield* Rates
  const payments = yield* Payments
  const purchases = yield* Purchases

  const settings = (tenantId: string, lock: boolean) =>
    sql<SettingsRow>`
      SELECT mode, topup_enabled AS enabled, topup_threshold::float8 AS threshold, topup_amount::float8 AS amount,
        topup_monthly_limit::float8 AS monthly_limit, topup_paused AS paused, payment_customer AS customer,
        payment_method, balance::float8 AS balance, topup_limit_told AS limit_told,
        (SELECT coalesce(sum(credit + fee), 0) FROM purchases WHERE tenant_id = b.tenant_id AND kind = 'topup'
          AND status IN ('open', 'paid', 'action_required', 'uncertain')
          AND created_at >= to_timestamp(${monthStart()}))::float8 AS charged
      FROM tenant_billing b WHERE tenant_id = ${tenantId} ${lock ? sql`FOR UPDATE OF b` : sql``}`.pipe(
      Effect.map((rows) => rows[0])
    )

  const toAutoTopup = (row: SettingsRow | undefined) =>
    new Billing.AutoTopup({
      enabled: row?.enabled ?? false,
      state: row?.enabled !== true ? "off" : row.paused === null ? "active" : "paused",
      pausedBecause: row?.paused ?? null,
      threshold: row?.threshold ?? 0,
      amount: row?.amount ?? 0,
      monthlyLimit: row?.monthlyLimit ?? 0,
      month: { since: monthStart(), charged: row?.charged ?? 0 },
      card: (row?.paymentMethod ?? null) !== null
    })

  const get = (tenantId: string) =>
    Effect.map(settings(tenantId, false), toAutoTopup).pipe(PersistenceError.PersistenceError.refail)

  const set = (tenantId: string, input: Billing.AutoTopupInput) =>
    Effect.gen(function*() {
      if (!wholeCents(input.amount) || input.amount < rates.minPurchase || input.amount > rates.maxPurchase) {
        return yield* new ApiError.InvalidRequest({
          error:
            `invalid request: amount: micro-USD in whole cents, between ${rates.minPurchase} and ${rates.maxPurchase}`
        })
      }
      const total = input.amount + feeOf(input.amount, rates.purchaseFeeBps)
      if (input.monthlyLimit < total) {
        return yield* new ApiError.InvalidRequest({
          error: `invalid request: monthlyLimit: must cover one top-up of ${total} micro-USD with its fee`
        })
      }
      if (payments.provider === "none") {
        return yield* new ApiError.Conflict({ error: "this service sells no credit (no payment provider)" })
      }
      const updated = yield* sql`
        UPDATE tenant_billing SET topup_enabled = ${input.enabled}, topup_threshold = ${input.threshold},
          topup_amount = ${input.amount}, topup_monthly_limit = ${input.monthlyLimit}, topup_paused = NULL,
          topup_limit_told = NULL, updated_at = now()
        WHERE tenant_id = ${tenantId} AND mode = 'prepaid' RETURNING 1`.pipe(PersistenceError.PersistenceError.refail)
      if (updated.length === 0) {
        return yield* new ApiError.Conflict({ error: "the tenant is not billed from prepaid credit" })
      }
      return yield* get(tenantId)
    })

  const event = (tenantId: string, type: Webhook.WebhookEventType, data: Record<string, unknown>) =>
    Outbox.insert(sql, [{ tenantId, type, data }])

  const pause = (tenantId: string, because: NonNullable<SettingsRow["paused"]>) =>
    sql`UPDATE tenant_billing SET topup_paused = ${because} WHERE tenant_id = ${tenantId}`

  /** Charges the card for an open top-up and records how it ended; no answer leaves it open for the sweep. */
  const charge = (row: PurchaseRow, customer: string, paymentMethod: string) =>
    Effect.gen(function*() {
      const result = yield* payments.charge({
        purchaseId: row.id,
        tenantId: row.tenantId,
        customer,
        paymentMethod,
        total: row.credit + row.fee
      })
      const told = { purchase: row.id, amount: row.credit, fee: row.fee, total: row.credit + row.fee }
      yield* ChargeResult.$match(result, {
        Succeeded: ({ paymentId }) =>
          Effect.asVoid(purchases.settle({
            sessionId: paymentId,
            purchaseId: row.id,
            paid: true,
            total: row.credit + row.fee,
            paymentId
          })),
        Declined: ({ reason }) =>
          sql.withTransaction(Effect.gen(function*() {
            yield* lockTenant(sql, row.tenantId)
            const ended = yield* sql`UPDATE purchases SET status = 'declined', updated_at = now()
              WHERE id = ${row.id} AND status IN ('open', 'uncertain') RETURNING 1`
            if (ended.length === 0) return
            yield* pause(row.tenantId, "declined")
            yield* event(row.tenantId, "billing.topup.declined", { ...told, reason })
          })),
        ActionRequired: ({ paymentId }) =>
          sql.withTransaction(Effect.gen(function*() {
            yield* lockTenant(sql, row.tenantId)
            const ended = yield* sql`UPDATE purchases SET status = 'action_required', session_id = ${paymentId},
                payment_id = ${paymentId}, updated_at = now()
              WHERE id = ${row.id} AND status IN ('open', 'uncertain') RETURNING 1`
            if (ended.length === 0) return
            yield* pause(row.tenantId, "action_required")
            yield* event(row.tenantId, "billing.topup.action_required", told)
          }))
      })
    }).pipe(
      Effect.catchTag("PaymentProviderError", (error) =>
        Effect.logWarning("an automatic top-up's charge did not answer; it is tried again with the same key").pipe(
          Effect.annotateLogs({ purchase: row.id, error: error.message })
        ))
    )

  /** Starts a top-up for a tenant whose balance fell below its threshold, if one is due and allowed. */
  const start = (tenantId: string) =>
    Effect.gen(function*() {
      const started = yield* sql.withTransaction(Effect.gen(function*() {
        const row = yield* settings(tenantId, true)
        if (
          row === undefined || row.mode !== "prepaid" || !row.enabled || row.paused !== null ||
          row.threshold === null || row.amount === null || row.monthlyLimit === null || row.balance >= row.threshold
        ) return undefined
        const fee = feeOf(row.amount, rates.purchaseFeeBps)
        if (row.charged + row.amount + fee > row.monthlyLimit) {
          if (row.limitTold === thisMonth()) return undefined
          yield* sql`UPDATE tenant_billing SET topup_limit_told = ${thisMonth()} WHERE tenant_id = ${tenantId}`
          yield* event(tenantId, "billing.topup.limit", {
            monthlyLimit: row.monthlyLimit,
            charged: row.charged,
            amount: row.amount,
            fee,
            balance: row.balance
          })
          return undefined
        }
        if (row.customer === null || row.paymentMethod === null) {
          yield* pause(tenantId, "no_card")
          yield* event(tenantId, "billing.topup.no_card", { threshold: row.threshold, balance: row.balance })
          return undefined
        }
        const [inserted] = yield* sql<PurchaseRow>`
          INSERT INTO purchases (id, tenant_id, kind, credit, fee, attempts)
          VALUES (${Ids.make("pur")}, ${tenantId}, 'topup', ${row.amount}, ${fee}, 1)
          ON CONFLICT (tenant_id) WHERE kind = 'topup' AND status IN ('open', 'uncertain') DO NOTHING
          RETURNING ${sql.unsafe(purchaseColumns)}`
        return inserted === undefined
          ? undefined
          : { purchase: inserted, customer: row.customer, paymentMethod: row.paymentMethod }
      }))
      if (started !== undefined) yield* charge(started.purchase, started.customer, started.paymentMethod)
    })

  /**
   * Claims a top-up not answered for a while (a node died mid-charge, or the provider did not answer) and
   * tries it again with its key; past `maxAttempts` it is uncertain, told once as `reconcile`.
   */
  const retry = (id: string) =>
    Effect.gen(function*() {
      const [claimed] = yield* sql<PurchaseRow & { attempts: number; customer: string; paymentMethod: string }>`
        WITH claimed AS (
          UPDATE purchases SET attempts = attempts + 1, updated_at = now()
          WHERE id = ${id} AND status IN ('open', 'uncertain')
            AND updated_at < now() - make_interval(secs => ${staleSeconds})
          RETURNING *)
        SELECT ${sql.unsafe(purchaseColumns)}, attempts, b.payment_customer AS customer, b.payment_method
        FROM claimed JOIN tenant_billing b USING (tenant_id)`
      if (claimed === undefined) return
      if (claimed.attempts > maxAttempts && claimed.status === "open") {
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* lockTenant(sql, claimed.tenantId)
          yield* sql`UPDATE purchases SET status = 'uncertain' WHERE id = ${id} AND status = 'open'`
          yield* pause(claimed.tenantId, "reconcile")
          yield* event(claimed.tenantId, "billing.topup.reconcile", {
            purchase: id,
            amount: claimed.credit,
            fee: claimed.fee,
            total: claimed.credit + claimed.fee
          })
        }))
      }
      yield* charge(claimed, claimed.customer, claimed.paymentMethod)
    })

  const sweep = Effect.gen(function*() {
    const due = yield* sql<{ tenantId: string }>`
      SELECT tenant_id FROM tenant_billing b
      WHERE mode = 'prepaid' AND topup_enabled AND topup_paused IS NULL AND balance < topup_threshold
        AND NOT EXISTS (SELECT 1 FROM purchases p WHERE p.tenant_id = b.tenant_id AND p.kind = 'topup'
          AND p.status IN ('open', 'uncertain'))
      LIMIT 100`
    yield* Effect.forEach(due, ({ tenantId }) => start(tenantId), { concurrency: 4, discard: true })
    const unanswered = yield* sql<{ id: string }>`
      SELECT id FROM purchases WHERE kind = 'topup'
        AND ((status = 'open' AND updated_at < now() - make_interval(secs => ${staleSeconds}))
          OR (status = 'uncertain' AND updated_at < now() - interval '10 minutes'
            AND created_at > now() - make_interval(hours => ${retryHours})))
      LIMIT 100`
    yield* Effect.forEach(unanswered, ({ id }) => retry(id), { concurrency: 4, discard: true })
  }).pipe(PersistenceError.PersistenceError.refail)

  return AutoTopups.of({ get, set, sweep })
})

export const layer: Layer.Layer<AutoTopups, never, SqlClient.SqlClient | Rates | Payments | Purchases> = Layer
  .effect(AutoTopups, make)

/** Every node sweeps; the purchase rows and their keys keep each top-up charged once. */
export const layerSweep: Layer.Layer<never, never, AutoTopups | DatabaseHealth.DatabaseHealth> = Layer.scopedDiscard(
  Effect.gen(function*() {
    const { sweep } = yield* AutoTopups
    yield* sweep.pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("automatic top-ups failed")),
      Effect.repeat(Schedule.spaced(interval)),
      Effect.forkScoped
    )
  })
)
