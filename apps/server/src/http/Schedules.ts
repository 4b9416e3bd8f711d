import { Schedules } from "@agent-runtime/agent"
import { Api, Auth } from "@agent-runtime/domain"
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

export const layer = HttpApiBuilder.group(Api.Api, "schedules", (handlers) =>
  Effect.gen(function*() {
    const schedules = yield* Schedules.Schedules
    const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)
    const list = (tenantId: string, agentId?: string) =>
      Effect.map(schedules.list(tenantId, agentId), (data) => ({ data, next: null }))
    return handlers
      .handle("create", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) => schedules.create(tenantId, path.id, payload)))
      .handle("listForAgent", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) => list(tenantId, path.id)))
      .handle("cancel", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          schedules.cancel(tenantId, path.id, path.scheduleId)))
      .handle("list", () =>
        Effect.flatMap(tenant, (tenantId) => list(tenantId)))
  }))
