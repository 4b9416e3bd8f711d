/**
 * Usage and prepaid billing as the API shows them: what a tenant's model
 * responses used (per day, model and kind), its credit balance, the ledger
 * of every grant, purchase, charge and refund, and the rates it is charged
 * at. Every amount of money is an integer in micro-USD (1 USD = 1000000)
 * except usage costs, which are USD as the providers report them.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

/** `prepaid`: runs are paid from credit; `none`: not billed (the self-hosted default). */
export const BillingMode = Schema.Literal("prepaid", "none")
export type BillingMode = typeof BillingMode.Type

/** An amount of money in micro-USD. */
export const Micros = Schema.Int.annotations({ description: "micro-USD (1 USD = 1000000)" })

const nonNegativeMicros = Schema.Int.pipe(Schema.between(0, 1_000_000_000_000)).annotations({
  description: "micro-USD (1 USD = 1000000), 0 to 1000000000000"
})

export class WebSearchRates extends Schema.Class<WebSearchRates>("WebSearchRates")({
  exa: Micros,
  brave: Micros,
  parallel: Micros
}) {}

/** What a prepaid tenant is charged, set by the operator for the whole service. */
export class Rates extends Schema.Class<Rates>("Rates")({
  agentHour: Micros.annotations({ description: "per hour an agent spends in a turn, metered to the millisecond" }),
  storageGbMonth: Micros.annotations({ description: "per GB of volume bytes and month, charged daily" }),
  openrouterCreditMultiplier: Schema.Number.pipe(Schema.greaterThanOrEqualTo(0)).annotations({
    description: "model cost on the platform's OpenRouter key is charged times this (provider credit funding)"
  }),
  purchaseFeeBps: Schema.Int.annotations({ description: "fee on a purchase, in basis points of its amount" }),
  minPurchase: Micros,
  maxPurchase: Micros,
  webSearch: WebSearchRates.annotations({ description: "per search, by search provider" }),
  webRender: Micros.annotations({ description: "per page rendered by web_fetch" }),
  cardCheckCredit: Micros.annotations({
    description: "starting credit a verified card unlocks once (POST /v1/billing/card-check); 0: none"
  }),
  freeHourlySpend: Micros.annotations({
    description: "a tenant on free credit (never bought any) is charged at most this in a UTC hour, past which " +
      "new work gets 402 PAYMENT_REQUIRED until the hour ends or it buys credit; 0: no such limit"
  })
}) {}

export const StartingCreditStatus = Schema.Literal("granted", "not_eligible", "not_granted", "not_applicable")

export class StartingCredit extends Schema.Class<StartingCredit>("StartingCredit")({
  status: StartingCreditStatus,
  amount: Micros,
  cardCheck: Schema.optional(Schema.Struct({ amount: Micros })).annotations({
    description: "present when POST /v1/billing/card-check would unlock the starting credit"
  })
}) {}

/** The ledger's sums over the current UTC month, per kind (charges negative). */
export class BillingMonth extends Schema.Class<BillingMonth>("BillingMonth")({
  since: Timestamp,
  grant: Micros,
  purchase: Micros,
  usage: Micros,
  storage: Micros,
  adjustment: Micros,
  refund: Micros
}) {}

export const LedgerKind = Schema.Literal("grant", "purchase", "usage", "storage", "adjustment", "refund")
export type LedgerKind = typeof LedgerKind.Type

export class LedgerEntry extends Schema.Class<LedgerEntry>("LedgerEntry")({
  id: Schema.Int,
  kind: LedgerKind,
  amount: Micros.annotations({ description: "positive adds credit, negative spends" }),
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
    description: "usage: one entry per UTC hour, updated until the hour ends: hour, tokens, funding " +
      "({model, agentTime, webSearch, webRender} in micro-USD; agentTime is the hour's exact agent time rounded once), " +
      "activeMs (milliseconds, to the microsecond), responses; storage: day and bytes; " +
      "purchase: purchase (its id), fee, total, auto (an automatic top-up); refund: purchase, refunded " +
      "(what the payment provider gave back of the total, in all); grant, adjustment and refund by the operator: note"
  }),
  createdAt: Timestamp
}) {}

export class Billing extends Schema.Class<Billing>("Billing")({
  billing: BillingMode,
  balance: Micros.annotations({ description: "at zero or below, new prompts, runs and gateway calls get 402" }),
  purchased: Micros.annotations({ description: "credit bought, net of refunds" }),
  freeCredit: Schema.Boolean.annotations({ description: "only ever had free credit: tighter limits apply" }),
  checkout: Schema.Boolean.annotations({ description: "credit can be bought with POST /v1/billing/checkout" }),
  startingCredit: StartingCredit,
  month: BillingMonth,
  recent: Schema.Array(LedgerEntry).annotations({ description: "the last 20 ledger entries, newest first" }),
  rates: Rates,
  monthlyCap: Schema.NullOr(Micros).annotations({
    description: "the tenant's own cap on a month's charges; at it new prompts get 402 SPEND_LIMIT"
  }),
  lowBalance: Micros.annotations({ description: "billing.balance.low fires when the balance falls to this" })
}) {}

/** A purchase of credit, as POST /v1/billing/checkout starts it and GET /v1/billing/checkouts/{id} reads it. */
export class CheckoutInput extends Schema.Class<CheckoutInput>("CheckoutInput")({
  amount: Schema.Int.pipe(Schema.positive()).annotations({
    description: "credit to buy, micro-USD in whole cents, between the rates' minPurchase and maxPurchase; the " +
      "fee (purchaseFeeBps) is charged on top"
  }),
  requestId: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100))).annotations({
    description: "the client's id of this purchase: a retry with it answers the same checkout (another amount " +
      "is 409 IDEMPOTENCY_CONFLICT); without one every call starts a new checkout"
  })
}) {}

export const CheckoutStatus = Schema.Literal("open", "paid", "expired")

export class Checkout extends Schema.Class<Checkout>("Checkout")({
  id: Schema.String,
  kind: Schema.Literal("purchase", "card_check"),
  status: CheckoutStatus.annotations({ description: "paid once the credit (or a card check's grant) is posted" }),
  url: Schema.String.annotations({ description: "the payment page to send the buyer to" }),
  amount: Micros.annotations({ description: "credit bought (a card check: the starting credit it unlocks)" }),
  fee: Micros,
  total: Micros.annotations({ description: "what the buyer pays: amount and fee (a card check: 0)" }),
  createdAt: Timestamp
}) {}

/** Automatic top-up: a saved card is charged when the balance falls below `threshold`. */
export class AutoTopupInput extends Schema.Class<AutoTopupInput>("AutoTopupInput")({
  enabled: Schema.Boolean,
  threshold: Schema.Int.pipe(Schema.between(1, 500_000_000)).annotations({
    description: "micro-USD; a top-up starts when the balance is below it"
  }),
  amount: Schema.Int.pipe(Schema.positive()).annotations({
    description: "credit bought per top-up, micro-USD in whole cents, within minPurchase and maxPurchase"
  }),
  monthlyLimit: Schema.Int.pipe(Schema.between(1, 100_000_000_000)).annotations({
    description: "at most this much (fees included) charged by top-ups in a UTC month; must cover one top-up"
  })
}) {}

export class AutoTopup extends Schema.Class<AutoTopup>("AutoTopup")({
  enabled: Schema.Boolean,
  state: Schema.Literal("off", "active", "paused").annotations({
    description: "paused after a declined card, an action the bank asks of the buyer, no saved card or an " +
      "uncertain charge; saving the settings again resumes it"
  }),
  pausedBecause: Schema.NullOr(Schema.Literal("declined", "action_required", "no_card", "reconcile")),
  threshold: Micros,
  amount: Micros,
  monthlyLimit: Micros,
  month: Schema.Struct({ since: Timestamp, charged: Micros }).annotations({
    description: "what top-ups charged this UTC month, fees included, with those still settling"
  }),
  card: Schema.Boolean.annotations({ description: "a card is saved (by a purchase or a card check)" })
}) {}

/** What a tenant sets of its own billing. */
export class BillingSettingsInput extends Schema.Class<BillingSettingsInput>("BillingSettingsInput")({
  monthlyCap: Schema.optional(Schema.NullOr(nonNegativeMicros)),
  lowBalance: Schema.optional(nonNegativeMicros)
}) {}

/** What the operator sets of a tenant's billing. */
export class TenantBillingInput extends Schema.Class<TenantBillingInput>("TenantBillingInput")({
  billing: BillingMode,
  /** Starting credit granted once, when the tenant first becomes prepaid. */
  startingCredit: Schema.optional(nonNegativeMicros)
}) {}

/** An operator's entry: credit granted, a correction, or money given back. */
export class LedgerEntryInput extends Schema.Class<LedgerEntryInput>("LedgerEntryInput")({
  kind: Schema.Literal("grant", "adjustment", "refund"),
  amount: Schema.Int.pipe(Schema.between(-1_000_000_000_000, 1_000_000_000_000)).annotations({
    description: "micro-USD; grant positive, refund positive (it is recorded as money leaving the balance)"
  }),
  note: Schema.String.pipe(Schema.maxLength(500))
}) {}

/** Query of GET /v1/usage. */
export const UsageParams = Schema.Struct({
  since: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative())).annotations({
    description: "Unix seconds; default the start of the current UTC month"
  }),
  until: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative())).annotations({
    description: "Unix seconds, exclusive; default now"
  }),
  agentId: Schema.optional(Schema.String),
  keyScope: Schema.optional(Schema.String),
  subject: Schema.optional(Schema.String)
})

const usageFields = {
  responses: Schema.Number,
  input: Schema.Number,
  output: Schema.Number,
  cacheRead: Schema.Number,
  cacheWrite: Schema.Number,
  cost: Schema.Number.annotations({ description: "USD" }),
  platformResponses: Schema.Number.annotations({
    description: "responses on a key the operator pays for (a platform key, or one it set for the tenant)"
  }),
  platformCost: Schema.Number.annotations({
    description: "USD on those keys; a prepaid tenant pays it from credit"
  })
}

export class UsageTotals extends Schema.Class<UsageTotals>("UsageTotals")(usageFields) {}

export class UsageDay extends Schema.Class<UsageDay>("UsageDay")({
  day: Schema.String.annotations({ description: "UTC day, YYYY-MM-DD" }),
  model: Schema.String.annotations({ description: "provider/model, as agents and the gateway name it" }),
  kind: Schema.Literal("turn", "compaction"),
  ...usageFields
}) {}

export class Usage extends Schema.Class<Usage>("Usage")({
  since: Timestamp,
  until: Timestamp,
  totals: UsageTotals,
  days: Schema.Array(UsageDay)
}) {}
