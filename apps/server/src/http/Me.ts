import { Tenants } from "@agent-runtime/accounts"
import { Api, Auth, Me } from "@agent-runtime/domain"
import { Listing } from "@agent-runtime/models"
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

export const layer = HttpApiBuilder.group(Api.Api, "me", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants.Tenants
    const listing = yield* Listing.Listing
    return handlers.handle("get", () =>
      Effect.gen(function*() {
        const principal = yield* Auth.CurrentPrincipal
        const tenant = yield* tenants.get(principal.tenantId)
        return new Me.Me({
          tenant: tenant.id,
          via: principal.via,
          ...(tenant.login === undefined ? {} : { login: tenant.login }),
          name: tenant.name,
          canStoreKeys: true,
          defaultModel: yield* listing.defaultModel(tenant.id)
        })
      }).pipe(Effect.orDie))
  }))
