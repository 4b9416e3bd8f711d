/**
 * The node's schema: each package's migrations, in dependency order (every
 * package's tables hang off the accounts package's `tenants`). A package's
 * steps are recorded in its own table; steps that were on the single list
 * of earlier releases are skipped where that list ran them (see the store's
 * `Migrations`), so a database those releases made is taken over as it is.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { AgentMigrations } from "@agent-runtime/agent"
import { BillingMigrations } from "@agent-runtime/billing"
import { FileMigrations } from "@agent-runtime/files"
import { GatewayMigrations } from "@agent-runtime/gateway"
import { IdentityMigrations } from "@agent-runtime/identity"
import { ModelsMigrations } from "@agent-runtime/models"
import { OAuthMigrations } from "@agent-runtime/oauth"
import type { Migrations } from "@agent-runtime/store"
import { TelemetryMigrations } from "@agent-runtime/telemetry"
import { WebhookMigrations } from "@agent-runtime/webhooks"

export const migrations: ReadonlyArray<Migrations.Migrations> = [
  AccountsMigrations.migrations,
  WebhookMigrations.migrations,
  TelemetryMigrations.migrations,
  BillingMigrations.migrations,
  FileMigrations.migrations,
  ModelsMigrations.migrations,
  AgentMigrations.migrations,
  GatewayMigrations.migrations,
  IdentityMigrations.migrations,
  OAuthMigrations.migrations
]
