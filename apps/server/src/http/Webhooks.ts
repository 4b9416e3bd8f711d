import { Api, ApiError, Auth } from "@agent-runtime/domain"
import { WebhookDelivery, WebhookEndpoints } from "@agent-runtime/webhooks"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"

const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "webhooks">,
  never,
  Auth.Authentication | WebhookEndpoints.WebhookEndpoints | WebhookDelivery.WebhookDelivery
> = HttpApiBuilder.group(Api.Api, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const endpoints = yield* WebhookEndpoints.WebhookEndpoints
    const delivery = yield* WebhookDelivery.WebhookDelivery
    /** The tenant's endpoint of either kind, or 404: another tenant's looks like none. */
    const owned = (webhookId: string) =>
      Effect.flatMap(tenant, (tenantId) => endpoints.owns(tenantId, webhookId)).pipe(
        Effect.filterOrFail(
          (owns) => owns,
          () => new ApiError.NotFound({ error: `no webhook endpoint ${webhookId}` })
        )
      )
    return Errors.handlers(handlers)
      .handle("create", ({ payload }) => Effect.flatMap(tenant, (tenantId) => endpoints.create(tenantId, payload)))
      .handle("list", () => Effect.flatMap(tenant, endpoints.list))
      .handle("get", ({ path }) => Effect.flatMap(tenant, (tenantId) => endpoints.get(tenantId, path.webhookId)))
      .handle("update", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) => endpoints.update(tenantId, path.webhookId, payload)))
      .handle("remove", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) => endpoints.remove(tenantId, path.webhookId)))
      .handle("rotateSecret", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          endpoints.rotateSecret(tenantId, path.webhookId)))
      .handle("attempts", ({ path, urlParams }) =>
        Effect.zipRight(
          owned(path.webhookId),
          delivery.attempts(path.webhookId, urlParams.limit ?? 50)
        ))
      .handle("deliveries", ({ path, urlParams }) =>
        Effect.zipRight(
          owned(path.webhookId),
          delivery.deliveries(path.webhookId, { state: urlParams.state, limit: urlParams.limit ?? 50 })
        ))
      .handle(
        "resend",
        ({ path }) =>
          Effect.zipRight(owned(path.webhookId), delivery.resend(path.webhookId, path.eventId))
      )
      .handle("getUsage", () => Effect.flatMap(tenant, endpoints.usage))
      .handle("putUsage", ({ payload }) => Effect.flatMap(tenant, (tenantId) => endpoints.putUsage(tenantId, payload)))
      .handle("removeUsage", () => Effect.flatMap(tenant, endpoints.removeUsage))
      .handle("rotateUsageSecret", () => Effect.flatMap(tenant, endpoints.rotateUsageSecret))
  }))
