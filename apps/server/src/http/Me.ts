import { Tenants } from "@agent-runtime/accounts"
import { Api, Auth, Me } from "@agent-runtime/domain"
import { Listing } from "@agent-runtime/models"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "me">,
  never,
  Auth.Authentication | Tenants.Tenants | Listing.Listing
> = HttpApiBuilder.group(Api.Api, "me", (handlers) =>
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
          // Who signed in, for a session or a grant; else whom the tenant belongs to.
          ...(principal.login !== undefined
            ? { login: principal.login }
            : tenant.login === undefined
            ? {}
            : { login: tenant.login }),
          name: principal.name ?? tenant.name,
          canStoreKeys: true,
          defaultModel: yield* listing.defaultModel(tenant.id)
        })
      }).pipe(Effect.orDie))
  }))
