/**
 * Stream slots: at most N upstream calls of one tenant at a time (N per
 * tenant, `GATEWAY_STREAM_SLOTS` by default). Callers beyond it wait in the
 * tenant's own first-in first-out queue, so one tenant's burst never delays
 * another's; a caller still waiting after the queue timeout gets 429.
 *
 * Plain callbacks rather than an Effect semaphore: acquiring is on every
 * call's path and is synchronous whenever a slot is free.
 */
import { Context, Effect, Layer } from "effect"
import { GatewayConfig } from "./GatewayConfig.ts"
import { type GatewayError, rateLimited } from "./GatewayError.ts"

export type Release = () => void

interface Waiter {
  readonly grant: (release: Release) => void
  readonly refuse: (error: GatewayError) => void
  timer: ReturnType<typeof setTimeout> | undefined
}

interface Tenant {
  active: number
  limit: number
  readonly queue: Array<Waiter>
}

export interface Service {
  /**
   * A slot of `tenantId` (whose limit is `limit`): the release function, at once or once one frees up. A
   * caller still waiting after the queue timeout is refused with 429 (the promise rejects).
   */
  readonly acquire: (tenantId: string, limit: number) => Release | Promise<Release>
  /** Slots in use and callers waiting, per tenant (for tests and logs). */
  readonly stats: (tenantId: string) => { readonly active: number; readonly waiting: number }
  /** A tenant's slots unless the operator set its own (`GATEWAY_STREAM_SLOTS`). */
  readonly defaultLimit: number
}

export class Slots extends Context.Tag("@agent-runtime/gateway/Slots")<Slots, Service>() {}

export const make = Effect.map(GatewayConfig, (config) => {
  const tenants = new Map<string, Tenant>()

  const releaser = (tenantId: string, tenant: Tenant): Release => {
    let released = false
    return () => {
      if (released) return
      released = true
      tenant.active--
      while (tenant.active < tenant.limit && tenant.queue.length > 0) {
        const waiter = tenant.queue.shift()!
        clearTimeout(waiter.timer)
        tenant.active++
        waiter.grant(releaser(tenantId, tenant))
      }
      if (tenant.active === 0 && tenant.queue.length === 0) tenants.delete(tenantId)
    }
  }

  const acquire = (tenantId: string, limit: number): Release | Promise<Release> => {
    let tenant = tenants.get(tenantId)
    if (tenant === undefined) {
      tenant = { active: 0, limit, queue: [] }
      tenants.set(tenantId, tenant)
    }
    tenant.limit = limit
    if (tenant.active < limit && tenant.queue.length === 0) {
      tenant.active++
      return releaser(tenantId, tenant)
    }
    const queued = tenant
    return new Promise<Release>((grant, refuse) => {
      const waiter: Waiter = { grant, refuse, timer: undefined }
      waiter.timer = setTimeout(() => {
        const at = queued.queue.indexOf(waiter)
        if (at !== -1) queued.queue.splice(at, 1)
        if (queued.active === 0 && queued.queue.length === 0) tenants.delete(tenantId)
        refuse(rateLimited(
          `all ${limit} stream slots of the account stayed busy for ${config.queueTimeoutMs / 1000} s`,
          Math.max(1, Math.ceil(config.queueTimeoutMs / 10_000))
        ))
      }, config.queueTimeoutMs)
      queued.queue.push(waiter)
    })
  }

  const stats = (tenantId: string) => {
    const tenant = tenants.get(tenantId)
    return { active: tenant?.active ?? 0, waiting: tenant?.queue.length ?? 0 }
  }

  return Slots.of({ acquire, stats, defaultLimit: config.streamSlots })
})

export const layer: Layer.Layer<Slots, never, GatewayConfig> = Layer.effect(Slots, make)
