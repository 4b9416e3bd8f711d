import { Definitions } from "@agent-runtime/agent"
import { Api, Auth, Definition } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "definitions">,
  never,
  Auth.Authentication | Definitions.Definitions
> = HttpApiBuilder.group(Api.Api, "definitions", (handlers) =>
  Effect.gen(function*() {
    const definitions = yield* Definitions.Definitions
    const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)
    return Errors.handlers(handlers)
      .handle("create", ({ headers, payload }) =>
        Effect.flatMap(tenant, (tenantId) => {
          const key = headers["idempotency-key"]
          if (key === undefined) return definitions.create(tenantId, payload)
          return Effect.flatMap(
            definitions.upsert(tenantId, key, payload),
            // The same key again: 200 with the definition (201, the API's status, only when it was made).
            ({ created, definition }): Effect.Effect<Definition.Definition | HttpServerResponse.HttpServerResponse> =>
              created
                ? Effect.succeed(definition)
                : Effect.orDie(HttpServerResponse.schemaJson(Definition.Definition)(definition, { status: 200 }))
          )
        }))
      .handle("list", ({ urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.flatMap(definitions.list(tenantId, urlParams), (page) =>
            Paging.answer(page, urlParams))))
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
