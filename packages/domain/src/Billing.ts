/**
 * Usage and prepaid billing. Money is in micro-USD integers (1 USD =
 * 1000000) except where noted (usage costs are USD numbers).
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"
import { JsonObject } from "./Validation.ts"

const microUsd = Schema.Int.annotations({ description: "micro-USD" })

const usageTotalsFields = {
  responses: Schema.Number,
  input: Schema.Number,
  output: Schema.Number,
  cacheRead: Schema.Number,
  cacheWrite: Schema.Number,
  cost: Schema.Number.annotations({ description: "USD" }),
  platformResponses: Schema.Number.annotations({ description: "responses on a key that is not the tenant's" }),
  platformCost: Schema.Number.annotations({
    description: "USD on platform keys including provider credit funding; prepaid tenants pay it from credit"
  })
}

export class UsageTotals extends Schema.Class<UsageTotals>("UsageTotals")(usageTotalsFields) {}

export const UsageDayKind = Schema.Literal("turn", "compaction")
export type UsageDayKind = typeof UsageDayKind.Type

export class UsageDay extends Schema.Class<UsageDay>("UsageDay")({
  ...usageTotalsFields,
  day: Schema.String,
  model: Schema.String,
  kind: UsageDayKind
}) {}

export class Usage extends Schema.Class<Usage>("Usage")({
  since: Timestamp,
  totals: UsageTotals,
  days: Schema.Array(UsageDay)
}) {}

/** prepaid: runs paid from credit; none: not billed. */
export const BillingMode = Schema.Literal("prepaid", "none")
export type BillingMode = typeof BillingMode.Type

export const StartingCreditStatus = Schema.Literal("granted", "not_eligible", "not_granted", "not_applicable")
export type StartingCreditStatus = typeof StartingCreditStatus.Type

export class CardCheck extends Schema.Class<CardCheck>("CardCheck")({
  amount: microUsd
}) {}

export class StartingCredit extends Schema.Class<StartingCredit>("StartingCredit")({
  status: StartingCreditStatus,
  amount: microUsd,
  cardCheck: Schema.optional(CardCheck).annotations({
    description: "present when POST /v1/billing/card-check would unlock starting credit"
  })
}) {}

/** Movements of the current UTC month. */
export class BillingMonth extends Schema.Class<BillingMonth>("BillingMonth")({
  since: Timestamp,
  grant: microUsd,
  purchase: microUsd,
  usage: microUsd,
  storage: microUsd,
  adjustment: microUsd,
  refund: microUsd
}) {}

/** Price per search of each web search API. */
export class WebSearchRates extends Schema.Class<WebSearchRates>("WebSearchRates")({
  exa: microUsd,
  brave: microUsd,
  parallel: microUsd
}) {}

export class BillingRates extends Schema.Class<BillingRates>("BillingRates")({
  agentHour: microUsd.annotations({ description: "per hour an agent spends in a turn, metered continuously" }),
  storageGbMonth: microUsd.annotations({ description: "charged daily" }),
  openrouterCreditMultiplier: Schema.Number.pipe(Schema.nonNegative()),
  purchaseFeeBps: Schema.Int.annotations({ description: "basis points" }),
  minPurchase: microUsd,
  maxPurchase: microUsd,
  webSearch: WebSearchRates,
  webRender: microUsd.annotations({ description: "per rendered page" })
}) {}

export const LedgerKind = Schema.Literal("grant", "purchase", "usage", "storage", "adjustment", "refund")
export type LedgerKind = typeof LedgerKind.Type

export class LedgerEntry extends Schema.Class<LedgerEntry>("LedgerEntry")({
  id: Schema.Int,
  kind: LedgerKind,
  amount: microUsd.annotations({ description: "positive adds credit, negative spends" }),
  metadata: JsonObject.annotations({
    description: "usage: hour, tokens, funding, activeMs (one entry per UTC hour); storage: day and bytes"
  }),
  createdAt: Timestamp
}) {}

export class Billing extends Schema.Class<Billing>("Billing")({
  billing: BillingMode,
  balance: microUsd.annotations({ description: "at zero or below runs get 402" }),
  purchased: microUsd.annotations({ description: "net of refunds" }),
  freeCredit: Schema.Boolean.annotations({ description: "only ever had free credit, with tighter limits" }),
  checkout: Schema.Boolean.annotations({ description: "credit can be bought via POST /v1/billing/checkout" }),
  startingCredit: StartingCredit,
  month: BillingMonth,
  recent: Schema.Array(LedgerEntry),
  rates: BillingRates
}) {}
