/**
 * The payment provider credit is bought through, behind one interface:
 * `layerStripe` speaks Stripe's API through the `stripe` package (Checkout
 * Sessions for purchases and card checks, PaymentIntents for automatic
 * top-ups, its webhook verifier for what Stripe tells us); `layerLocal`
 * settles every payment at once, for self-hosting and tests without money;
 * `layerNone` sells nothing. `layerConfig` picks one from BILLING_PAYMENTS.
 *
 * Amounts cross this interface in micro-USD; the provider's own units stay
 * inside its implementation. Every call that creates something at the
 * provider carries a key naming our record of it, so a retry after a lost
 * answer finds the object made the first time instead of making another.
 */
import type { ConfigError, Redacted } from "effect"
import { Config, Context, Effect, Layer, Option } from "effect"
import * as Local from "./internal/localPayments.ts"
import type { ChargeResult, Completed, Notice, Session, SessionKind } from "./internal/paymentTypes.ts"
import { InvalidSignature, PaymentProviderError } from "./internal/paymentTypes.ts"
import * as Stripe from "./internal/stripePayments.ts"

export {
  ChargeResult,
  type Completed,
  InvalidSignature,
  Notice,
  PaymentProviderError,
  type Session,
  type SessionKind
} from "./internal/paymentTypes.ts"

export class Payments extends Context.Tag("@agent-runtime/billing/Payments")<Payments, {
  /** Which provider this is; `none` sells nothing. */
  readonly provider: "stripe" | "local" | "none"
  /** The provider's customer for the tenant, made once (`key` names it for retries). */
  readonly customer: (tenantId: string) => Effect.Effect<string, PaymentProviderError>
  /** Opens a payment page for `total` micro-USD (a card check: none, the card is only saved). */
  readonly open: (request: {
    readonly kind: SessionKind
    readonly purchaseId: string
    readonly tenantId: string
    readonly customer: string
    readonly credit: number
    readonly fee: number
    readonly successUrl: string
    readonly cancelUrl: string
  }) => Effect.Effect<Session, PaymentProviderError>
  /** What a session came to so far; none when the provider does not know it. */
  readonly session: (sessionId: string) => Effect.Effect<Option.Option<Completed>, PaymentProviderError>
  /** Charges the saved card `total` micro-USD for an automatic top-up, once per purchase id. */
  readonly charge: (request: {
    readonly purchaseId: string
    readonly tenantId: string
    readonly customer: string
    readonly paymentMethod: string
    readonly total: number
  }) => Effect.Effect<ChargeResult, PaymentProviderError>
  /** Verifies a notice (the raw body as sent, and its signature header) and says what it tells. */
  readonly notice: (
    payload: string,
    signature: string
  ) => Effect.Effect<Notice, InvalidSignature | PaymentProviderError>
}>() {}

/** Micro-USD in whole cents: what a card can be charged. */
export const wholeCents = (micros: number) => Number.isSafeInteger(micros) && micros % 10_000 === 0

/** The purchase fee on `credit`, rounded to the cent. */
export const feeOf = (credit: number, feeBps: number) => Math.round(credit / 10_000 * feeBps / 10_000) * 10_000

const unavailable = (what: string) =>
  Effect.fail(new PaymentProviderError({ message: `${what}: no payment provider is configured` }))

/** Sells nothing: checkout says so, and no notice is accepted. */
export const layerNone: Layer.Layer<Payments> = Layer.succeed(
  Payments,
  Payments.of({
    provider: "none",
    customer: () => unavailable("customer"),
    open: () => unavailable("checkout"),
    session: () => Effect.succeed(Option.none()),
    charge: () => unavailable("charge"),
    notice: () => Effect.fail(new InvalidSignature({ message: "no payment provider is configured" }))
  })
)

/** Settles every payment at once, with no money moving: self-hosting and tests. */
export const layerLocal: Layer.Layer<Payments> = Layer.sync(Payments, Local.make)

export interface StripeOptions {
  readonly secretKey: Redacted.Redacted
  readonly webhookSecret: Redacted.Redacted
  /** Another API root than Stripe's (a fake on loopback in tests). */
  readonly apiUrl?: URL | undefined
}

export const layerStripe = (options: StripeOptions): Layer.Layer<Payments> =>
  Layer.sync(Payments, () => Stripe.make(options))

/**
 * BILLING_PAYMENTS: `none` (the default), `local`, or `stripe` with STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET
 * and optionally STRIPE_API_URL.
 */
export const layerConfig: Layer.Layer<Payments, ConfigError.ConfigError> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const provider = yield* Config.literal("none", "local", "stripe")("BILLING_PAYMENTS").pipe(
      Config.withDefault("none" as const)
    )
    if (provider === "none") return layerNone
    if (provider === "local") return layerLocal
    return layerStripe({
      secretKey: yield* Config.redacted("STRIPE_SECRET_KEY"),
      webhookSecret: yield* Config.redacted("STRIPE_WEBHOOK_SECRET"),
      apiUrl: Option.getOrUndefined(yield* Config.option(Config.url("STRIPE_API_URL")))
    })
  })
)
