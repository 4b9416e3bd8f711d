import { Api, Auth } from "@agent-runtime/domain"
import { OAuthGrants } from "@agent-runtime/oauth"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "oauth">,
  never,
  Auth.Authentication | OAuthGrants.OAuthGrants
> = HttpApiBuilder.group(Api.Api, "oauth", (handlers) =>
  Effect.gen(function*() {
    const grants = yield* OAuthGrants.OAuthGrants
    return Errors.handlers(handlers)
      .handle("listGrants", () => Effect.flatMap(Auth.CurrentPrincipal, (principal) => grants.list(principal.tenantId)))
      .handle("revokeGrant", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) => grants.revoke(principal.tenantId, path.id)))
  }))
