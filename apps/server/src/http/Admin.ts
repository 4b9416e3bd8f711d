import { ConsoleSessions, Tenants } from "@agent-runtime/accounts"
import { RunnerReports } from "@agent-runtime/agent"
import { Ledger } from "@agent-runtime/billing"
import { Api, type Auth, OAuth } from "@agent-runtime/domain"
import { IdentityTokens } from "@agent-runtime/identity"
import { Keys } from "@agent-runtime/models"
import { AuthorizationServer } from "@agent-runtime/oauth"
import { WebhookDelivery } from "@agent-runtime/webhooks"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "admin">,
  never,
  | Auth.OperatorAuthentication
  | Tenants.Tenants
  | WebhookDelivery.WebhookDelivery
  | IdentityTokens.IdentityTokens
  | Keys.Keys
  | RunnerReports.RunnerReports
  | Ledger.Ledger
  | ConsoleSessions.ConsoleSessions
  | AuthorizationServer.AuthorizationServer
> = HttpApiBuilder.group(Api.Api, "admin", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants.Tenants
    const keys = yield* Keys.Keys
    const runners = yield* RunnerReports.RunnerReports
    const identity = yield* IdentityTokens.IdentityTokens
    const delivery = yield* WebhookDelivery.WebhookDelivery
    const ledger = yield* Ledger.Ledger
    const sessions = yield* ConsoleSessions.ConsoleSessions
    const oauth = yield* AuthorizationServer.AuthorizationServer
    /** The tenant named in the path, or 404: billing rows hang off it. */
    const existing = (tenantId: string) => Effect.map(tenants.get(tenantId), (tenant) => tenant.id)
    return Errors.handlers(handlers)
      .handle("createTenant", ({ payload }) => tenants.create(payload))
      .handle("listTenants", ({ urlParams }) =>
        Effect.flatMap(tenants.list(urlParams), (page) => Paging.answer(page, urlParams)))
      .handle("getTenant", ({ path }) =>
        tenants.get(path.id))
      .handle("putPlatformKey", ({ path, payload }) => keys.setPlatformKey(path.provider, payload))
      .handle("deletePlatformKey", ({ path }) => keys.deletePlatformKey(path.provider))
      .handle("listRunners", () => runners.list)
      .handle("drainRunner", ({ path }) => runners.requestDrain(path.address))
      .handle("webhookAttempts", ({ path, urlParams }) => delivery.attempts(path.webhookId, urlParams.limit ?? 50))
      .handle("createSignInLink", ({ payload }) =>
        Effect.gen(function*() {
          const tenantId = yield* existing(payload.tenant)
          const link = yield* sessions.createLink(tenantId)
          return new OAuth.SignInLink({
            url: `${yield* oauth.issuer}/sign-in/link/${link.secret}`,
            expiresAt: link.expiresAt
          })
        }))
      .handle("rotateIdentityKey", () => identity.rotate)
      .handle("rotateOAuthKey", () => oauth.rotateKeys)
      .handle("setTenantBilling", ({ path, payload }) =>
        Effect.flatMap(existing(path.id), (tenantId) =>
          ledger.setMode(tenantId, payload)))
      .handle("getTenantBilling", ({ path }) =>
        Effect.flatMap(existing(path.id), ledger.summary))
      .handle("postLedgerEntry", ({ headers, path, payload }) =>
        Effect.flatMap(existing(path.id), (tenantId) =>
          ledger.post(tenantId, payload, headers["idempotency-key"])))
  }))
