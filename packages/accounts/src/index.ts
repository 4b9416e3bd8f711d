export * as AccountsMigrations from "./AccountsMigrations.ts"
export * as Operator from "./Operator.ts"
export * as Tenants from "./Tenants.ts"
export * as Tokens from "./Tokens.ts"
