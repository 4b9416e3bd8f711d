import { AutoTopups, Ledger, Purchases } from "@agent-runtime/billing"
import { Api, Auth } from "@agent-runtime/domain"
import { UsageLog } from "@agent-runtime/models"
import { HttpApiBuilder, type HttpApiGroup, HttpServerRequest } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "billing">,
  never,
  Auth.Authentication | Ledger.Ledger | UsageLog.UsageLog | Purchases.Purchases | AutoTopups.AutoTopups
> = HttpApiBuilder.group(Api.Api, "billing", (handlers) =>
  Effect.gen(function*() {
    const ledger = yield* Ledger.Ledger
    const usage = yield* UsageLog.UsageLog
    const purchases = yield* Purchases.Purchases
    const topups = yield* AutoTopups.AutoTopups
    return Errors.handlers(handlers)
      .handle("usage", ({ urlParams }) => Effect.flatMap(tenant, (tenantId) => usage.report(tenantId, urlParams)))
      .handle("get", () => Effect.flatMap(tenant, ledger.summary))
      .handle("configure", ({ payload }) => Effect.flatMap(tenant, (tenantId) => ledger.configure(tenantId, payload)))
      .handle("ledger", ({ urlParams }) =>
        Effect.flatMap(
          Effect.flatMap(tenant, (tenantId) => ledger.entries(tenantId, urlParams)),
          (page) => Paging.answer(page, urlParams)
        ))
      .handle("checkout", ({ payload }) => Effect.flatMap(tenant, (tenantId) => purchases.checkout(tenantId, payload)))
      .handle("getCheckout", ({ path }) => Effect.flatMap(tenant, (tenantId) => purchases.get(tenantId, path.id)))
      .handle("cardCheck", () => Effect.flatMap(tenant, purchases.cardCheck))
      .handle("getAutoTopup", () => Effect.flatMap(tenant, topups.get))
      .handle("setAutoTopup", ({ payload }) => Effect.flatMap(tenant, (tenantId) => topups.set(tenantId, payload)))
  }))

/** The provider's notices: its signature is checked against the body exactly as sent, not as parsed. */
export const layerNotices: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "paymentNotices">,
  never,
  Purchases.Purchases
> = HttpApiBuilder.group(Api.Api, "paymentNotices", (handlers) =>
  Effect.gen(function*() {
    const purchases = yield* Purchases.Purchases
    return Errors.handlers(handlers).handle("notice", ({ headers }) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const body = yield* Effect.orDie(request.text)
        yield* purchases.notice(body, headers["stripe-signature"] ?? "")
        return { received: true }
      }))
  }))
