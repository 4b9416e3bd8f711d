import { Tenants } from "@agent-runtime/accounts"
import { Api } from "@agent-runtime/domain"
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

export const layer = HttpApiBuilder.group(Api.Api, "admin", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants.Tenants
    return handlers
      .handle("createTenant", ({ payload }) => tenants.create(payload))
      .handle("listTenants", ({ urlParams }) => tenants.list(urlParams))
      .handle("getTenant", ({ path }) => tenants.get(path.id))
  }))
