/**
 * Requests settling anywhere in the cluster, heard on this node: the
 * statement that completes a request announces it on a PostgreSQL channel
 * (`Announcements.settledChannel`), and every node listens. A long poll of a
 * request whose agent another node owns waits here instead of asking the
 * owner over the cluster, which would cost both nodes a message and its reply.
 *
 * A node promises nothing until its listening is sure (it heard its own probe,
 * see internal/probedChannel); while it cannot promise, or once it stops
 * listening (the database went away, the connection went quiet), waiters are
 * told to ask the owner instead.
 */
import type { DatabaseHealth } from "@agent-runtime/store"
import type { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option } from "effect"
import { settledAnnouncement, settledChannel } from "./Announcements.ts"
import * as ProbedChannel from "./internal/probedChannel.ts"

/** What a waiter is told: the request settled, or the node can no longer promise to hear it. */
export interface Waiter {
  readonly settled: () => void
  readonly lost: () => void
}

export class Settlements extends Context.Tag("@agent-runtime/agent/Settlements")<Settlements, {
  /**
   * Tells `waiter` when request `requestId` of `agentId` settles, from now on; the result stops it. None
   * when this node is not listening now: the caller asks the owner.
   */
  readonly listen: (agentId: string, requestId: string, waiter: Waiter) => Option.Option<() => void>
}>() {}

export const layer: Layer.Layer<Settlements, never, DatabaseHealth.DatabaseHealth | PgClient.PgClient> = Layer.scoped(
  Settlements,
  Effect.gen(function*() {
    const waiters = new Map<string, Set<Waiter>>()
    let listening = false

    yield* ProbedChannel.listen(settledChannel, "settled requests", {
      sure: Effect.sync(() => {
        listening = true
      }),
      heard: (payloads) =>
        Effect.sync(() => {
          for (const payload of payloads) {
            const set = waiters.get(payload)
            if (set === undefined) continue
            waiters.delete(payload)
            for (const waiter of set) waiter.settled()
          }
        }),
      lost: () => {
        listening = false
        for (const set of waiters.values()) for (const waiter of set) waiter.lost()
        waiters.clear()
      }
    })

    return Settlements.of({
      listen: (agentId, requestId, waiter) => {
        if (!listening) return Option.none()
        const key = settledAnnouncement(agentId, requestId)
        const set = waiters.get(key) ?? new Set()
        set.add(waiter)
        waiters.set(key, set)
        return Option.some(() => {
          set.delete(waiter)
          if (set.size === 0 && waiters.get(key) === set) waiters.delete(key)
        })
      }
    })
  })
)
