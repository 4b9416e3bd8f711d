/**
 * Tenants (accounts) as operators administer them.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

export const TenantId = Schema.String.pipe(Schema.pattern(/^tn_[A-Za-z0-9]+$/)).annotations({
  description: "tenant id (tn_...)"
})

export class Tenant extends Schema.Class<Tenant>("Tenant")({
  id: TenantId,
  name: Schema.String,
  login: Schema.optional(Schema.String),
  createdAt: Timestamp
}) {}

export class TenantInput extends Schema.Class<TenantInput>("TenantInput")({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  login: Schema.optional(
    Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)).annotations({
      description: "who the tenant belongs to: the address or login it signs in with"
    })
  )
}) {}

/** The created tenant with its first API key, shown only here. */
export class TenantCreated extends Schema.Class<TenantCreated>("TenantCreated")({
  ...Tenant.fields,
  token: Schema.String.annotations({ description: "the tenant's first API key (art_...), shown only once" })
}) {}
