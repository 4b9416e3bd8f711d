import { Tokens } from "@agent-runtime/accounts"
import { Api, ApiError, Auth } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "tokens">,
  never,
  Auth.Authentication | Tokens.Tokens
> = HttpApiBuilder.group(Api.Api, "tokens", (handlers) =>
  Effect.gen(function*() {
    const tokens = yield* Tokens.Tokens
    return Errors.handlers(handlers)
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const principal = yield* Auth.CurrentPrincipal
          if (principal.via === "oauth") {
            return yield* new ApiError.Forbidden({
              error: "a connected application (OAuth) cannot create API tokens; create them in the console"
            })
          }
          return yield* tokens.create(principal.tenantId, payload)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          Effect.flatMap(tokens.list(principal.tenantId, urlParams), (page) =>
            Paging.answer(page, urlParams))))
      .handle("revoke", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          tokens.revoke(principal.tenantId, path.id)))
  }))
