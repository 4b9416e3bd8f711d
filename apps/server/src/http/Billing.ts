import { Ledger } from "@agent-runtime/billing"
import { Api, Auth } from "@agent-runtime/domain"
import { UsageLog } from "@agent-runtime/models"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "billing">,
  never,
  Auth.Authentication | Ledger.Ledger | UsageLog.UsageLog
> = HttpApiBuilder.group(Api.Api, "billing", (handlers) =>
  Effect.gen(function*() {
    const ledger = yield* Ledger.Ledger
    const usage = yield* UsageLog.UsageLog
    return Errors.handlers(handlers)
      .handle("usage", ({ urlParams }) => Effect.flatMap(tenant, (tenantId) => usage.report(tenantId, urlParams)))
      .handle("get", () => Effect.flatMap(tenant, ledger.summary))
      .handle("configure", ({ payload }) => Effect.flatMap(tenant, (tenantId) => ledger.configure(tenantId, payload)))
      .handle("ledger", ({ urlParams }) =>
        Effect.flatMap(
          Effect.flatMap(tenant, (tenantId) => ledger.entries(tenantId, urlParams)),
          (page) => Paging.answer(page, urlParams)
        ))
  }))
