export * as Outbox from "./Outbox.ts"
export * as WebhookDelivery from "./WebhookDelivery.ts"
export * as WebhookEndpoints from "./WebhookEndpoints.ts"
export * as WebhookMigrations from "./WebhookMigrations.ts"
