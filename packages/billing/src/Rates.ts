/**
 * The rates a prepaid tenant is charged at, one set for the service, read
 * from the node's environment (every node must be given the same).
 */
import { Billing } from "@agent-runtime/domain"
import type { Effect } from "effect"
import { Config, Context, Layer } from "effect"

export class Rates extends Context.Tag("@agent-runtime/billing/Rates")<Rates, Billing.Rates>() {}

const micros = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: "must be 0 or more micro-USD", validation: (value) => value >= 0 }),
    Config.withDefault(fallback)
  )

/** The defaults: what the service charges when the operator sets nothing (see docs/billing.md). */
export const config: Config.Config<Billing.Rates> = Config.all({
  agentHour: micros("BILLING_AGENT_HOUR", 50_000),
  storageGbMonth: micros("BILLING_STORAGE_GB_MONTH", 100_000),
  openrouterCreditMultiplier: Config.number("BILLING_OPENROUTER_CREDIT_MULTIPLIER").pipe(
    Config.validate({ message: "must be 0 or more", validation: (value) => value >= 0 }),
    Config.withDefault(1.055)
  ),
  purchaseFeeBps: micros("BILLING_PURCHASE_FEE_BPS", 0),
  minPurchase: micros("BILLING_MIN_PURCHASE", 5_000_000),
  maxPurchase: micros("BILLING_MAX_PURCHASE", 1_000_000_000),
  webSearch: Config.all({
    exa: micros("BILLING_WEB_SEARCH_EXA", 5_000),
    brave: micros("BILLING_WEB_SEARCH_BRAVE", 5_000),
    parallel: micros("BILLING_WEB_SEARCH_PARALLEL", 5_000)
  }).pipe(Config.map((rates) => new Billing.WebSearchRates(rates))),
  webRender: micros("BILLING_WEB_RENDER", 2_000),
  cardCheckCredit: micros("BILLING_CARD_CHECK_CREDIT", 0),
  freeHourlySpend: micros("BILLING_FREE_HOURLY_SPEND", 1_000_000)
}).pipe(Config.map((rates) => new Billing.Rates(rates)))

export const layerConfig: Layer.Layer<Rates, ConfigError> = Layer.effect(Rates, config)

type ConfigError = Effect.Effect.Error<typeof config>

/** The rates as given, for tests. */
export const layer = (rates: Billing.Rates): Layer.Layer<Rates> => Layer.succeed(Rates, rates)
