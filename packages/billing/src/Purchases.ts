/**
 * Buying credit: checkouts a buyer pays on the provider's page, card checks
 * that unlock the starting credit, and automatic top-ups that charge a saved
 * card when the balance runs low (`AutoTopups` drives those).
 *
 * A purchase is a row before the provider is called, and the provider is
 * asked with the row's id as its key: a retried request, a crash between the
 * call and its answer, or a notice told twice finds that row and the object
 * made the first time. Its credit is posted once, by the statement that marks
 * it paid, with its `billing.topup.receipt` event; a refund takes back its
 * share of the credit once per total the provider reports.
 */
import { ApiError, Billing } from "@agent-runtime/domain"
import { Ids, PersistenceError } from "@agent-runtime/store"
import { Outbox } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { Payments } from "./Payments.ts"
import type { Completed } from "./Payments.ts"
import * as PaymentsModule from "./Payments.ts"
import { Rates } from "./Rates.ts"

export class Purchases extends Context.Tag("@agent-runtime/billing/Purchases")<Purchases, {
  /** Starts buying `amount` of credit: the provider's payment page to send the buyer to. */
  readonly checkout: (tenantId: string, input: Billing.CheckoutInput) => Effect.Effect<
    Billing.Checkout,
    | ApiError.InvalidRequest
    | ApiError.Conflict
    | ApiError.IdempotencyConflict
    | ApiError.Unavailable
    | PersistenceError.PersistenceError
  >
  /** Starts a card check that unlocks the starting credit (`rates.cardCheckCredit`) once. */
  readonly cardCheck: (tenantId: string) => Effect.Effect<
    Billing.Checkout,
    ApiError.Conflict | ApiError.Unavailable | PersistenceError.PersistenceError
  >
  /** A purchase of the tenant's; an open one is asked of the provider first (a buyer back from paying). */
  readonly get: (
    tenantId: string,
    id: string
  ) => Effect.Effect<Billing.Checkout, ApiError.NotFound | PersistenceError.PersistenceError>
  /** A notice from the provider (raw body and signature): verified, then acted on once however often told. */
  readonly notice: (
    payload: string,
    signature: string
  ) => Effect.Effect<void, ApiError.InvalidRequest | ApiError.Unavailable | PersistenceError.PersistenceError>
  /**
   * Posts what a purchase came to (paid: its credit and receipt; a card check: its grant), once. False when the
   * provider's id names no purchase of ours.
   */
  readonly settle: (completed: Completed) => Effect.Effect<boolean, PersistenceError.PersistenceError>
}>() {}

export interface PurchaseRow {
  readonly id: string
  readonly tenantId: string
  readonly kind: "purchase" | "card_check" | "topup"
  readonly credit: number
  readonly fee: number
  readonly status: "open" | "paid" | "expired" | "declined" | "action_required" | "uncertain"
  readonly sessionId: string | null
  readonly sessionUrl: string | null
  readonly createdAt: number
}

export const purchaseColumns = `id, tenant_id, kind, credit::float8 AS credit, fee::float8 AS fee, status, session_id,
  session_url, floor(extract(epoch from created_at))::float8 AS created_at`

const toCheckout = (row: PurchaseRow) =>
  new Billing.Checkout({
    id: row.id,
    kind: row.kind === "card_check" ? "card_check" : "purchase",
    status: row.status === "paid" ? "paid" : row.status === "expired" ? "expired" : "open",
    url: row.sessionUrl ?? "",
    amount: row.credit,
    fee: row.fee,
    total: row.kind === "card_check" ? 0 : row.credit + row.fee,
    createdAt: row.createdAt
  })

const unavailable = (error: PaymentsModule.PaymentProviderError) =>
  new ApiError.Unavailable({ error: `the payment provider did not answer; retry (${error.message})`, retryAfter: 5 })

/**
 * Locks the tenant's billing row, first in every transaction that changes a purchase and the tenant's row:
 * starting a top-up locks that row before it inserts its purchase, so a transaction taking the purchase first
 * and the tenant's row second deadlocked with it (three sweeps at once, with a charge settling).
 */
export const lockTenant = (sql: SqlClient.SqlClient, tenantId: string) =>
  sql`SELECT 1 FROM tenant_billing WHERE tenant_id = ${tenantId} FOR UPDATE`

/**
 * The statements posting a paid purchase's credit and its receipt, in the caller's transaction: only when
 * `marked` (the purchase's row turned paid by this statement) holds a row.
 */
export const postPaid = (sql: SqlClient.SqlClient, purchase: PurchaseRow, auto: boolean) =>
  Effect.gen(function*() {
    yield* sql`
      INSERT INTO ledger_entries (tenant_id, kind, amount, metadata, idempotency_key)
      VALUES (${purchase.tenantId}, 'purchase', ${purchase.credit}, ${
      JSON.stringify({ purchase: purchase.id, fee: purchase.fee, total: purchase.credit + purchase.fee, auto })
    }::jsonb, ${`purchase:${purchase.id}`})
      ON CONFLICT DO NOTHING`
    yield* Outbox.insert(sql, [{
      tenantId: purchase.tenantId,
      type: "billing.topup.receipt",
      data: {
        purchase: purchase.id,
        auto,
        amount: purchase.credit,
        fee: purchase.fee,
        total: purchase.credit + purchase.fee
      },
      merge:
        sql`(SELECT jsonb_build_object('balance', balance) FROM tenant_billing WHERE tenant_id = ${purchase.tenantId})`
    }])
  })

export const make = (options: {
  /** The console's root, where the buyer comes back to after paying. */
  readonly baseUrl: Effect.Effect<string>
}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rates = yield* Rates
    const payments = yield* Payments

    const standing = (tenantId: string) =>
      sql<{ mode: string; customer: string | null; startingCredit: number | null; cardCheck: string | null }>`
        SELECT mode, payment_customer AS customer, starting_credit::float8 AS starting_credit, card_check
        FROM tenant_billing WHERE tenant_id = ${tenantId}`.pipe(Effect.map((rows) => rows[0]))

    const find = (tenantId: string, id: string) =>
      sql<PurchaseRow>`SELECT ${sql.unsafe(purchaseColumns)} FROM purchases
        WHERE tenant_id = ${tenantId} AND id = ${id}`.pipe(Effect.map((rows) => Option.fromNullable(rows[0])))

    /** The tenant's customer at the provider, made once and kept. */
    const customerOf = (tenantId: string, known: string | null) =>
      known !== null ? Effect.succeed(known) : Effect.tap(
        payments.customer(tenantId),
        (customer) => sql`UPDATE tenant_billing SET payment_customer = ${customer} WHERE tenant_id = ${tenantId}`
      )

    /** Opens the provider's page for a purchase row that has none yet (a first try, or one cut short). */
    const open = (row: PurchaseRow, customer: string | null) =>
      Effect.gen(function*() {
        if (row.sessionId !== null) return row
        const base = yield* options.baseUrl
        const session = yield* Effect.flatMap(customerOf(row.tenantId, customer), (customer) =>
          payments.open({
            kind: row.kind === "card_check" ? "card_check" : "purchase",
            purchaseId: row.id,
            tenantId: row.tenantId,
            customer,
            credit: row.credit,
            fee: row.fee,
            successUrl: `${base}/console/billing?checkout=success&purchase=${row.id}`,
            cancelUrl: `${base}/console/billing?checkout=cancelled&purchase=${row.id}`
          }))
        yield* sql`UPDATE purchases SET session_id = ${session.id}, session_url = ${session.url}, updated_at = now()
          WHERE id = ${row.id}`
        if (session.completed !== undefined) yield* settle(session.completed)
        return yield* Effect.map(find(row.tenantId, row.id), Option.getOrThrow)
      })

    const settle = (completed: Completed) =>
      sql.withTransaction(Effect.gen(function*() {
        const owners = yield* sql<{ tenantId: string }>`
          SELECT tenant_id FROM purchases WHERE id = ${completed.purchaseId} OR session_id = ${completed.sessionId}`
        for (const { tenantId } of owners) yield* lockTenant(sql, tenantId)
        const [row] = yield* sql<PurchaseRow>`
          SELECT ${sql.unsafe(purchaseColumns)} FROM purchases
          WHERE id = ${completed.purchaseId} OR session_id = ${completed.sessionId}
          FOR UPDATE`
        if (row === undefined) return false
        if (!completed.paid || row.status === "paid") return true
        yield* sql`UPDATE purchases SET status = 'paid', payment_id = ${completed.paymentId ?? null},
          session_id = coalesce(session_id, ${completed.sessionId}), updated_at = now() WHERE id = ${row.id}`
        // The card paid with is the one automatic top-ups charge.
        if (completed.paymentMethod !== undefined) {
          yield* sql`UPDATE tenant_billing SET payment_method = ${completed.paymentMethod},
            topup_paused = CASE WHEN topup_paused = 'no_card' THEN NULL ELSE topup_paused END
            WHERE tenant_id = ${row.tenantId}`
        }
        if (row.kind === "topup") {
          // A top-up the buyer confirmed later, or one whose outcome was unknown, settles the pause it caused.
          yield* sql`UPDATE tenant_billing SET topup_paused = NULL WHERE tenant_id = ${row.tenantId}
            AND topup_paused IN ('action_required', 'reconcile')`
        }
        if (row.kind !== "card_check") {
          yield* postPaid(sql, row, row.kind === "topup")
          return true
        }
        // A card unlocks starting credit once across tenants, and a prepaid card never does.
        const eligible = completed.card !== undefined && completed.card.funding !== "prepaid"
        const [checked] = eligible
          ? yield* sql<{ granted: boolean }>`
            INSERT INTO card_checks (fingerprint, tenant_id, granted) VALUES (${completed.card!.fingerprint},
              ${row.tenantId}, true)
            ON CONFLICT (fingerprint) DO NOTHING RETURNING granted`
          : []
        const [tenant] = yield* sql<{ startingCredit: number | null }>`
          SELECT starting_credit::float8 AS starting_credit FROM tenant_billing WHERE tenant_id = ${row.tenantId}`
        if (checked?.granted === true && (tenant?.startingCredit ?? 0) === 0) {
          yield* sql`UPDATE tenant_billing SET starting_credit = ${row.credit}, card_check = 'granted'
            WHERE tenant_id = ${row.tenantId}`
          yield* sql`INSERT INTO ledger_entries (tenant_id, kind, amount, metadata, idempotency_key)
            VALUES (${row.tenantId}, 'grant', ${row.credit}, ${
            JSON.stringify({ note: "starting credit, unlocked by a card check", purchase: row.id })
          }::jsonb, 'starting-credit') ON CONFLICT DO NOTHING`
        } else {
          yield* sql`UPDATE tenant_billing SET card_check = 'not_eligible' WHERE tenant_id = ${row.tenantId}
            AND card_check IS NULL`
        }
        return true
      })).pipe(PersistenceError.PersistenceError.refail)

    const checkout = (tenantId: string, input: Billing.CheckoutInput) =>
      Effect.gen(function*() {
        if (!PaymentsModule.wholeCents(input.amount)) {
          return yield* new ApiError.InvalidRequest({
            error: "invalid request: amount: micro-USD in whole cents (a multiple of 10000)"
          })
        }
        if (input.amount < rates.minPurchase || input.amount > rates.maxPurchase) {
          return yield* new ApiError.InvalidRequest({
            error: `invalid request: amount: between ${rates.minPurchase} and ${rates.maxPurchase} micro-USD`
          })
        }
        const tenant = yield* standing(tenantId)
        if (tenant?.mode !== "prepaid") {
          return yield* new ApiError.Conflict({ error: "the tenant is not billed from prepaid credit" })
        }
        if (payments.provider === "none") {
          return yield* new ApiError.Conflict({ error: "this service sells no credit (no payment provider)" })
        }
        const fee = PaymentsModule.feeOf(input.amount, rates.purchaseFeeBps)
        const [row] = yield* sql<PurchaseRow & { fresh: boolean }>`
          WITH inserted AS (
            INSERT INTO purchases (id, tenant_id, kind, request_id, credit, fee)
            VALUES (${Ids.make("pur")}, ${tenantId}, 'purchase', ${input.requestId ?? null}, ${input.amount}, ${fee})
            ON CONFLICT (tenant_id, request_id) WHERE request_id IS NOT NULL DO NOTHING
            RETURNING ${sql.unsafe(purchaseColumns)})
          SELECT *, true AS fresh FROM inserted
          UNION ALL
          SELECT ${sql.unsafe(purchaseColumns)}, false AS fresh FROM purchases
          WHERE tenant_id = ${tenantId} AND request_id = ${input.requestId ?? null}
            AND NOT EXISTS (SELECT 1 FROM inserted)`
        // A request with the same requestId at the same moment wrote the row this statement waited for.
        const purchase = row === undefined
          ? (yield* sql<PurchaseRow>`SELECT ${sql.unsafe(purchaseColumns)} FROM purchases
              WHERE tenant_id = ${tenantId} AND request_id = ${input.requestId ?? null}`)[0]!
          : (({ fresh: _, ...rest }) => rest)(row)
        if (purchase.kind !== "purchase" || purchase.credit !== input.amount) {
          return yield* new ApiError.IdempotencyConflict({
            error: `requestId ${input.requestId} was used for another purchase`
          })
        }
        return toCheckout(
          yield* open(purchase, tenant.customer).pipe(
            Effect.mapError((error) => error._tag === "PaymentProviderError" ? unavailable(error) : error)
          )
        )
      }).pipe(Effect.catchTag("SqlError", (cause) => Effect.fail(new PersistenceError.PersistenceError({ cause }))))

    const cardCheck = (tenantId: string) =>
      Effect.gen(function*() {
        const tenant = yield* standing(tenantId)
        if (tenant?.mode !== "prepaid") {
          return yield* new ApiError.Conflict({ error: "the tenant is not billed from prepaid credit" })
        }
        if (payments.provider === "none" || rates.cardCheckCredit === 0) {
          return yield* new ApiError.Conflict({ error: "this service offers no starting credit for a card check" })
        }
        if ((tenant.startingCredit ?? 0) > 0 || tenant.cardCheck !== null) {
          return yield* new ApiError.Conflict({
            error: "the tenant's starting credit was decided already; a card check unlocks it once"
          })
        }
        // One card check open at a time: asked again, the open one answers.
        const [row] = yield* sql<PurchaseRow>`
          WITH open AS (
            SELECT ${sql.unsafe(purchaseColumns)} FROM purchases
            WHERE tenant_id = ${tenantId} AND kind = 'card_check' AND status = 'open'
              AND created_at > now() - interval '23 hours'
            ORDER BY created_at DESC LIMIT 1),
          inserted AS (
            INSERT INTO purchases (id, tenant_id, kind, credit, fee)
            SELECT ${Ids.make("pur")}, ${tenantId}, 'card_check', ${rates.cardCheckCredit}, 0
            WHERE NOT EXISTS (SELECT 1 FROM open)
            RETURNING ${sql.unsafe(purchaseColumns)})
          SELECT * FROM open UNION ALL SELECT * FROM inserted`
        return toCheckout(
          yield* open(row!, tenant.customer).pipe(
            Effect.mapError((error) => error._tag === "PaymentProviderError" ? unavailable(error) : error)
          )
        )
      }).pipe(Effect.catchTag("SqlError", (cause) => Effect.fail(new PersistenceError.PersistenceError({ cause }))))

    const get = (tenantId: string, id: string) =>
      Effect.gen(function*() {
        const row = yield* Effect.flatMap(
          find(tenantId, id),
          Option.match({
            onNone: () => Effect.fail(new ApiError.NotFound({ error: `no purchase ${id}` })),
            onSome: Effect.succeed
          })
        )
        if (row.status !== "open" || row.sessionId === null || row.kind === "topup") return toCheckout(row)
        // A buyer back from paying may come before the provider's notice: the provider is asked.
        const told = yield* payments.session(row.sessionId).pipe(
          Effect.catchAll(() => Effect.succeed(Option.none<Completed>()))
        )
        if (Option.isSome(told) && told.value.paid) yield* settle(told.value)
        return toCheckout(yield* Effect.map(find(tenantId, id), Option.getOrThrow))
      }).pipe(Effect.catchTag("SqlError", (cause) => Effect.fail(new PersistenceError.PersistenceError({ cause }))))

    /** A refund takes back the purchase's share of its credit, once per cumulative total the provider reports. */
    const refund = (notice: { readonly paymentId: string; readonly refunded: number; readonly amount: number }) =>
      sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* sql<PurchaseRow & { refunded: number }>`
          SELECT ${sql.unsafe(purchaseColumns)}, refunded::float8 AS refunded FROM purchases
          WHERE payment_id = ${notice.paymentId} AND status = 'paid' FOR UPDATE`
        if (row === undefined) return false
        const share = notice.amount <= 0 ? 0 : Math.min(1, notice.refunded / notice.amount)
        const back = Math.round(row.credit * share)
        // An older total told after a newer one takes nothing back.
        if (back <= row.refunded) return true
        yield* sql`UPDATE purchases SET refunded = ${back}, updated_at = now() WHERE id = ${row.id}`
        yield* sql`
          INSERT INTO ledger_entries (tenant_id, kind, amount, metadata, idempotency_key)
          VALUES (${row.tenantId}, 'refund', ${row.refunded - back}, ${
          JSON.stringify({ purchase: row.id, refunded: notice.refunded })
        }::jsonb, ${`refund:${row.id}:${back}`})
          ON CONFLICT DO NOTHING`
        return true
      })).pipe(PersistenceError.PersistenceError.refail)

    const notice = (payload: string, signature: string) =>
      Effect.gen(function*() {
        const told = yield* payments.notice(payload, signature).pipe(
          Effect.mapError((error) =>
            error._tag === "InvalidSignature"
              ? new ApiError.InvalidRequest({ error: `invalid request: the notice's signature: ${error.message}` })
              : unavailable(error)
          )
        )
        yield* PaymentsModule.Notice.$match(told, {
          Completed: ({ completed }) => Effect.asVoid(settle(completed)),
          Expired: ({ sessionId }) =>
            Effect.asVoid(
              sql`UPDATE purchases SET status = 'expired', updated_at = now()
                WHERE session_id = ${sessionId} AND status = 'open'`.pipe(PersistenceError.PersistenceError.refail)
            ),
          Refunded: (refunded) =>
            Effect.flatMap(refund(refunded), (known) =>
              // A refund told before its purchase's payment: the provider tells it again later.
              known || !refunded.ours
                ? Effect.void
                : Effect.fail(
                  new ApiError.Unavailable({ error: "the refunded purchase is not settled yet; retry", retryAfter: 60 })
                )),
          Ignored: () => Effect.void
        })
      })

    return Purchases.of({ checkout, cardCheck, get, notice, settle })
  })

export const layer = (options: { readonly baseUrl: Effect.Effect<string> }): Layer.Layer<
  Purchases,
  never,
  SqlClient.SqlClient | Rates | Payments
> => Layer.effect(Purchases, make(options))
