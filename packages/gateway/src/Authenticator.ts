/**
 * API keys on the gateway's hot path: a key's tenant (and the tenant's slot
 * limit) is looked up once and reused for `GATEWAY_CACHE_SECONDS`, keyed by
 * the key's SHA-256, so most calls never reach PostgreSQL. A revoked key
 * therefore keeps working on the gateway for at most that long.
 */
import { Tokens } from "@agent-runtime/accounts"
import { Context, Effect, Layer, Option, Runtime } from "effect"
import { GatewayConfig } from "./GatewayConfig.ts"
import { TenantSettings } from "./TenantSettings.ts"

export interface Principal {
  readonly tenantId: string
  readonly streamSlots: number
}

interface Entry {
  readonly principal: Principal | undefined
  readonly expires: number
}

/** Bounds the cache against a flood of made-up keys; the whole cache is dropped when it is full. */
const maxEntries = 50_000

export interface Service {
  /**
   * The principal of a presented key, or undefined for one that is not a live key: at once from the cache,
   * else a promise (rejected when the lookup fails, with its cause).
   */
  readonly authenticate: (secret: string) => Principal | undefined | Promise<Principal | undefined>
  /** Forgets every cached key (after the operator changed a tenant's settings on this node). */
  readonly invalidate: () => void
}

export class Authenticator extends Context.Tag("@agent-runtime/gateway/Authenticator")<Authenticator, Service>() {}

export const make = Effect.gen(function*() {
  const config = yield* GatewayConfig
  const tokens = yield* Tokens.Tokens
  const settings = yield* TenantSettings
  const runPromise = Runtime.runPromise(yield* Effect.runtime<never>())
  const cache = new Map<string, Entry>()

  const lookup = (secret: string) =>
    Effect.flatMap(tokens.authenticate(secret), (found) =>
      Option.match(found, {
        onNone: () => Effect.succeed<Principal | undefined>(undefined),
        onSome: ({ tenantId }) =>
          Effect.map(settings.streamSlots(tenantId), (slots): Principal => ({
            tenantId,
            streamSlots: Option.getOrElse(slots, () => config.streamSlots)
          }))
      }))

  const authenticate = (secret: string): Principal | undefined | Promise<Principal | undefined> => {
    const hash = Tokens.secretHash(secret).toString("base64")
    const now = Date.now()
    const hit = cache.get(hash)
    if (hit !== undefined && hit.expires > now) return hit.principal
    return runPromise(lookup(secret)).then((principal) => {
      if (cache.size >= maxEntries) cache.clear()
      cache.set(hash, { principal, expires: Date.now() + config.cacheMs })
      return principal
    })
  }

  const invalidate = () => cache.clear()

  return Authenticator.of({ authenticate, invalidate })
})

export const layer: Layer.Layer<Authenticator, never, GatewayConfig | Tokens.Tokens | TenantSettings> = Layer.effect(
  Authenticator,
  make
)
