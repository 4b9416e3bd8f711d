export * as Egress from "./Egress.ts"
export * as EgressError from "./EgressError.ts"
export * as Resolver from "./Resolver.ts"
