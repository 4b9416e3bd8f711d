export * as IdentityError from "./IdentityError.ts"
export * as IdentityKeys from "./IdentityKeys.ts"
export * as IdentityMigrations from "./IdentityMigrations.ts"
export * as IdentityTokens from "./IdentityTokens.ts"
