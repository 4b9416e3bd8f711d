import { Schedules } from "@agent-runtime/agent"
import { Api, Auth } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "schedules">,
  never,
  Auth.Authentication | Schedules.Schedules
> = HttpApiBuilder.group(Api.Api, "schedules", (handlers) =>
  Effect.gen(function*() {
    const schedules = yield* Schedules.Schedules
    const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)
    return Errors.handlers(handlers)
      .handle("create", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) => schedules.create(tenantId, path.id, payload)))
      .handle("listForAgent", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) => schedules.list(tenantId, path.id)))
      .handle("cancel", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          schedules.cancel(tenantId, path.id, path.scheduleId)))
      .handle("list", () =>
        Effect.flatMap(tenant, (tenantId) => schedules.list(tenantId)))
  }))
