import { Tenants } from "@agent-runtime/accounts"
import { Api } from "@agent-runtime/domain"
import { Keys } from "@agent-runtime/models"
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Runners } from "../Runners.ts"

export const layer = HttpApiBuilder.group(Api.Api, "admin", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants.Tenants
    const keys = yield* Keys.Keys
    const runners = yield* Runners
    return handlers
      .handle("createTenant", ({ payload }) => tenants.create(payload))
      .handle("listTenants", ({ urlParams }) => tenants.list(urlParams))
      .handle("getTenant", ({ path }) => tenants.get(path.id))
      .handle("putPlatformKey", ({ path, payload }) => keys.setPlatformKey(path.provider, payload))
      .handle("deletePlatformKey", ({ path }) => keys.deletePlatformKey(path.provider))
      .handle("listRunners", () => runners.list)
      .handle("drainRunner", ({ path }) => runners.requestDrain(path.address))
  }))
