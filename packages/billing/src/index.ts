export * as BillingEvents from "./BillingEvents.ts"
export * as BillingMigrations from "./BillingMigrations.ts"
export * as Ledger from "./Ledger.ts"
export * as Rates from "./Rates.ts"
