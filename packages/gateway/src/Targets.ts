/**
 * Which upstream a model name means for a tenant (and key scope), resolved
 * through the model layer's `Credentials` (and `Listing` for `auto`) and
 * reused for `GATEWAY_CACHE_SECONDS`: a changed key or provider is seen
 * within that time, and the hot path reads no database.
 */
import { Credentials, Listing, type ModelError } from "@agent-runtime/models"
import type { PersistenceError } from "@agent-runtime/store"
import { Context, Effect, Layer, Option } from "effect"
import { GatewayConfig } from "./GatewayConfig.ts"

interface Entry {
  readonly target: Credentials.Target
  readonly expires: number
}

const maxEntries = 50_000

export interface Service {
  /** A cached resolution, if a fresh one exists: the hot path's, with no Effect to run. */
  readonly cached: (
    tenantId: string,
    keyScope: Option.Option<string>,
    model: string
  ) => Credentials.Target | undefined
  /** The upstream `model` means (`auto`: the tenant's default model), resolved and cached. */
  readonly resolve: (
    tenantId: string,
    keyScope: Option.Option<string>,
    model: string
  ) => Effect.Effect<
    Credentials.Target,
    ModelError.UnknownModel | ModelError.ModelKeyMissing | PersistenceError.PersistenceError
  >
}

export class Targets extends Context.Tag("@agent-runtime/gateway/Targets")<Targets, Service>() {}

export const make = Effect.gen(function*() {
  const config = yield* GatewayConfig
  const credentials = yield* Credentials.Credentials
  const listing = yield* Listing.Listing
  const cache = new Map<string, Entry>()

  const keyOf = (tenantId: string, keyScope: Option.Option<string>, model: string) =>
    `${tenantId}\u0000${Option.getOrElse(keyScope, () => "")}\u0000${model}`

  const cached = (tenantId: string, keyScope: Option.Option<string>, model: string) => {
    const hit = cache.get(keyOf(tenantId, keyScope, model))
    return hit !== undefined && hit.expires > Date.now() ? hit.target : undefined
  }

  const resolve = (tenantId: string, keyScope: Option.Option<string>, model: string) =>
    Effect.suspend(() => {
      const hit = cached(tenantId, keyScope, model)
      if (hit !== undefined) return Effect.succeed(hit)
      const named = model === "auto" ? listing.defaultModel(tenantId, keyScope) : Effect.succeed(model)
      return named.pipe(
        Effect.flatMap((id) => credentials.resolve({ tenantId, keyScope, model: id })),
        Effect.tap((target) =>
          Effect.sync(() => {
            if (cache.size >= maxEntries) cache.clear()
            cache.set(keyOf(tenantId, keyScope, model), { target, expires: Date.now() + config.cacheMs })
          })
        )
      )
    })

  return Targets.of({ cached, resolve })
})

export const layer: Layer.Layer<Targets, never, GatewayConfig | Credentials.Credentials | Listing.Listing> = Layer
  .effect(Targets, make)
