import { Tenants } from "@agent-runtime/accounts"
import { Api, Auth, Me } from "@agent-runtime/domain"
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ServerConfig } from "../ServerConfig.ts"

export const layer = HttpApiBuilder.group(Api.Api, "me", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants.Tenants
    const config = yield* ServerConfig
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
          // Until the model layer knows the tenant's keys: the runtime's first default.
          defaultModel: config.defaultModels[0] ?? ""
        })
      }).pipe(Effect.orDie))
  }))
