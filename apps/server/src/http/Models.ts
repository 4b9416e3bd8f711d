import type { ApiError } from "@agent-runtime/domain"
import { Api, Auth, Provider } from "@agent-runtime/domain"
import { CustomProviders, Keys, KeyScopes, Listing } from "@agent-runtime/models"
import type { PersistenceError } from "@agent-runtime/store"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Errors from "./Errors.ts"

// The gateway's model discovery format (OpenAI and Anthropic clients read it) keeps its `{data, next}`.
const modelList = <A>(data: ReadonlyArray<A>) => ({ data, next: null })

export const layerModels: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "models">,
  never,
  Auth.Authentication | Listing.Listing
> = HttpApiBuilder.group(Api.Api, "models", (handlers) =>
  Effect.gen(function*() {
    const listing = yield* Listing.Listing
    return Errors.handlers(handlers).handle("list", () =>
      Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
        Effect.map(listing.models(principal.tenantId), modelList)))
  }))

export const layerProviders: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "providers">,
  never,
  Auth.Authentication | CustomProviders.CustomProviders | Listing.Listing
> = HttpApiBuilder.group(Api.Api, "providers", (handlers) =>
  Effect.gen(function*() {
    const listing = yield* Listing.Listing
    const custom = yield* CustomProviders.CustomProviders
    return Errors.handlers(handlers)
      .handle("list", () => Effect.flatMap(Auth.CurrentPrincipal, (principal) => listing.providers(principal.tenantId)))
      .handle("get", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          listing.provider(principal.tenantId, path.name)))
      .handle("put", ({ path, payload }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          Effect.map(custom.put(principal.tenantId, "", path.name, payload), custom.toProvider)))
      .handle("delete", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          custom.remove(principal.tenantId, "", path.name)))
  }))

export const layerKeys: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "keys">,
  never,
  Auth.Authentication | Keys.Keys
> = HttpApiBuilder.group(Api.Api, "keys", (handlers) =>
  Effect.gen(function*() {
    const keys = yield* Keys.Keys
    return Errors.handlers(handlers)
      .handle("put", ({ path, payload }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          keys.setTenantKey(
            principal.tenantId,
            path.provider,
            payload,
            principal.via === "operator" ? "admin" : "tenant"
          )))
      .handle("delete", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          keys.deleteTenantKey(principal.tenantId, path.provider)))
  }))

export const layerKeyScopes: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "keyScopes">,
  never,
  Auth.Authentication | CustomProviders.CustomProviders | KeyScopes.KeyScopes
> = HttpApiBuilder.group(Api.Api, "keyScopes", (handlers) =>
  Effect.gen(function*() {
    const scopes = yield* KeyScopes.KeyScopes
    const custom = yield* CustomProviders.CustomProviders
    return Errors.handlers(handlers)
      .handle("list", () => Effect.flatMap(Auth.CurrentPrincipal, (principal) => scopes.list(principal.tenantId)))
      .handle("get", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) => scopes.get(principal.tenantId, path.scope)))
      .handle("delete", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          scopes.remove(principal.tenantId, path.scope)))
      .handle("putEntry", ({ path, payload }) =>
        Effect.flatMap(
          Auth.CurrentPrincipal,
          (
            principal
          ): Effect.Effect<
            Provider.KeyScopeEntry | Provider.KeySet,
            ApiError.InvalidRequest | ApiError.NotFound | PersistenceError.PersistenceError
          > =>
            payload instanceof Provider.KeyInput
              ? scopes.putKey(principal.tenantId, path.scope, path.provider, payload)
              : scopes.put(principal.tenantId, path.scope, path.provider, payload)
        ))
      .handle("deleteEntry", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          scopes.removeEntry(principal.tenantId, path.scope, path.provider)))
      .handle("putProvider", ({ path, payload }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          Effect.map(custom.put(principal.tenantId, path.scope, path.name, payload), custom.toProvider)))
      .handle("getProvider", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          Effect.map(custom.get(principal.tenantId, path.scope, path.name), custom.toProvider)))
      .handle("deleteProvider", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          custom.remove(principal.tenantId, path.scope, path.name)))
  }))
