import { Effect, identity, Option, Redacted } from "effect"
import Stripe from "stripe"
import type { Payments, StripeOptions } from "../Payments.ts"
import type { Completed, Notice as NoticeType } from "./paymentTypes.ts"
import { ChargeResult, InvalidSignature, Notice, PaymentProviderError } from "./paymentTypes.ts"

/** Tags what this service made at Stripe, so notices of other products on the same account are told apart. */
const product = "agent-runtime"

const cents = (micros: number) => Math.round(micros / 10_000)
const micros = (cents: number) => cents * 10_000

const idOf = (value: string | { readonly id: string } | null | undefined) =>
  value === null || value === undefined ? undefined : typeof value === "string" ? value : value.id

const failed = (what: string) => (cause: unknown) =>
  new PaymentProviderError({
    message: `${what}: ${cause instanceof Error ? cause.message : String(cause)}`,
    cause
  })

export const make = (options: StripeOptions) => {
  const stripe = new Stripe(Redacted.value(options.secretKey), {
    // Our own retries come with our own keys; the package's retries reuse its key for the same request.
    maxNetworkRetries: 2,
    timeout: 20_000,
    ...(options.apiUrl === undefined ? {} : {
      host: options.apiUrl.hostname,
      port: options.apiUrl.port === "" ? (options.apiUrl.protocol === "http:" ? 80 : 443) : options.apiUrl.port,
      protocol: options.apiUrl.protocol === "http:" ? "http" as const : "https" as const
    })
  })
  const webhookSecret = Redacted.value(options.webhookSecret)

  const call = <A>(what: string, run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: failed(what) })

  const completedOf = (session: Stripe.Checkout.Session): Completed => {
    const setupIntent = typeof session.setup_intent === "object" ? session.setup_intent : null
    const paymentIntent = typeof session.payment_intent === "object" ? session.payment_intent : null
    const method = setupIntent !== null && typeof setupIntent.payment_method === "object"
      ? setupIntent.payment_method
      : null
    return {
      sessionId: session.id,
      purchaseId: session.metadata?.purchase ?? session.client_reference_id ?? "",
      paid: session.mode === "setup"
        ? session.status === "complete" && setupIntent?.status === "succeeded"
        : session.payment_status === "paid",
      total: micros(session.amount_total ?? 0),
      paymentId: idOf(session.payment_intent),
      paymentMethod: idOf(setupIntent?.payment_method ?? paymentIntent?.payment_method),
      card: method?.card?.fingerprint ?
        { fingerprint: method.card.fingerprint, funding: method.card.funding ?? "unknown" } :
        undefined
    }
  }

  const session = (sessionId: string) =>
    call("reading a checkout session", () =>
      stripe.checkout.sessions.retrieve(sessionId, {
        expand: ["payment_intent", "setup_intent.payment_method"]
      })).pipe(Effect.map((found) => Option.some(completedOf(found))))

  const notice = (payload: string, signature: string) =>
    Effect.gen(function*() {
      const event = yield* Effect.try({
        try: () => stripe.webhooks.constructEvent(payload, signature, webhookSecret),
        catch: (cause) =>
          new InvalidSignature({ message: cause instanceof Error ? cause.message : "the signature does not verify" })
      })
      switch (event.type) {
        case "checkout.session.completed":
        case "checkout.session.async_payment_succeeded": {
          const told = event.data.object
          if (told.metadata?.product !== product) return Notice.Ignored({ type: event.type })
          // The notice carries the session without its intents; the card and payment come from reading it.
          const found = yield* session(told.id)
          return Option.match(found, {
            onNone: (): NoticeType => Notice.Ignored({ type: event.type }),
            onSome: (completed) => Notice.Completed({ completed })
          })
        }
        case "checkout.session.expired": {
          const told = event.data.object
          return told.metadata?.product === product
            ? Notice.Expired({ sessionId: told.id })
            : Notice.Ignored({ type: event.type })
        }
        case "payment_intent.succeeded": {
          // A top-up's payment that needed the buyer's confirmation, confirmed later.
          const intent = event.data.object
          if (intent.metadata?.product !== product || intent.metadata.topup === undefined) {
            return Notice.Ignored({ type: event.type })
          }
          return Notice.Completed({
            completed: {
              sessionId: intent.id,
              purchaseId: intent.metadata.topup,
              paid: true,
              total: micros(intent.amount_received),
              paymentId: intent.id,
              paymentMethod: idOf(intent.payment_method)
            }
          })
        }
        case "charge.refunded": {
          const charge = event.data.object
          const paymentId = idOf(charge.payment_intent)
          if (paymentId === undefined) return Notice.Ignored({ type: event.type })
          const intent = yield* call("reading a payment", () => stripe.paymentIntents.retrieve(paymentId))
          return Notice.Refunded({
            paymentId,
            refunded: micros(charge.amount_refunded),
            amount: micros(charge.amount),
            ours: intent.metadata?.product === product
          })
        }
        default:
          return Notice.Ignored({ type: event.type })
      }
    })

  return identity<Payments["Type"]>({
    provider: "stripe",
    customer: (tenantId) =>
      call("creating a customer", () =>
        stripe.customers.create(
          { metadata: { product, tenant: tenantId } },
          { idempotencyKey: `customer:${tenantId}` }
        )).pipe(Effect.map((customer) => customer.id)),
    open: (request) => {
      const metadata = { product, tenant: request.tenantId, purchase: request.purchaseId }
      const common = {
        customer: request.customer,
        client_reference_id: request.purchaseId,
        metadata,
        success_url: request.successUrl,
        cancel_url: request.cancelUrl
      }
      const params: Stripe.Checkout.SessionCreateParams = request.kind === "card_check"
        ? { ...common, mode: "setup", currency: "usd", setup_intent_data: { metadata } }
        : {
          ...common,
          mode: "payment",
          line_items: [
            {
              quantity: 1,
              price_data: { currency: "usd", unit_amount: cents(request.credit), product_data: { name: "Credit" } }
            },
            ...(request.fee > 0
              ? [{
                quantity: 1,
                price_data: {
                  currency: "usd",
                  unit_amount: cents(request.fee),
                  product_data: { name: "Processing fee" }
                }
              }]
              : [])
          ],
          // The card is kept for automatic top-ups.
          payment_intent_data: { setup_future_usage: "off_session", metadata }
        }
      return call(
        "opening a checkout",
        () => stripe.checkout.sessions.create(params, { idempotencyKey: `checkout:${request.purchaseId}` })
      ).pipe(
        Effect.map((created) => ({ id: created.id, url: created.url ?? "" }))
      )
    },
    session,
    charge: (request) =>
      Effect.tryPromise({
        try: () =>
          stripe.paymentIntents.create({
            amount: cents(request.total),
            currency: "usd",
            customer: request.customer,
            payment_method: request.paymentMethod,
            off_session: true,
            confirm: true,
            metadata: { product, tenant: request.tenantId, topup: request.purchaseId }
          }, { idempotencyKey: `topup:${request.purchaseId}` }),
        catch: (cause) => cause
      }).pipe(
        Effect.map((intent) =>
          intent.status === "succeeded"
            ? ChargeResult.Succeeded({ paymentId: intent.id })
            : intent.status === "requires_action"
            ? ChargeResult.ActionRequired({ paymentId: intent.id })
            : ChargeResult.Declined({ reason: intent.status })
        ),
        Effect.catchAll((cause) =>
          cause instanceof Stripe.errors.StripeCardError
            ? Effect.succeed(
              cause.code === "authentication_required" && cause.payment_intent !== undefined
                ? ChargeResult.ActionRequired({ paymentId: cause.payment_intent.id })
                : ChargeResult.Declined({ reason: cause.decline_code ?? cause.code ?? "card_declined" })
            )
            : Effect.fail(failed("charging a saved card")(cause))
        )
      ),
    notice
  })
}
