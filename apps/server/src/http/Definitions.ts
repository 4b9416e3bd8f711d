import { Definitions } from "@agent-runtime/agent"
import { Api, Auth } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "definitions">,
  never,
  Auth.Authentication | Definitions.Definitions
> = HttpApiBuilder.group(Api.Api, "definitions", (handlers) =>
  Effect.gen(function*() {
    const definitions = yield* Definitions.Definitions
    const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)
    return Errors.handlers(handlers)
      .handle("create", ({ payload }) => Effect.flatMap(tenant, (tenantId) => definitions.create(tenantId, payload)))
      .handle("list", ({ urlParams }) => Effect.flatMap(tenant, (tenantId) => definitions.list(tenantId, urlParams)))
      .handle("get", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          definitions.get(tenantId, path.id, urlParams.revision)))
      .handle("update", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          definitions.update(tenantId, path.id, payload)))
      .handle("remove", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          definitions.remove(tenantId, path.id)))
  }))
