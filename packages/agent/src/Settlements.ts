/**
 * Requests settling anywhere in the cluster, heard on this node: the
 * statement that completes a request announces it on a PostgreSQL channel
 * (`AgentStore.settledChannel`), and every node listens. A long poll of a
 * request whose agent another node owns waits here instead of asking the
 * owner over the cluster, which would cost both nodes a message and its reply.
 *
 * A notification is heard only while the listening connection is up, so a
 * node promises nothing until it has heard its own probe on the channel
 * (sent after it began listening), and checks every few seconds that it
 * still does; while it cannot promise, or once it stops listening (the
 * database went away, the connection went quiet), waiters are told to ask
 * the owner instead.
 */
import { DatabaseHealth, Ids } from "@agent-runtime/store"
import { PgClient } from "@effect/sql-pg"
import { Chunk, Context, Duration, Effect, Layer, Option, Stream } from "effect"
import { settledChannel } from "./AgentStore.ts"

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

/** How often a listening node checks it still hears the channel, and how long its probe may take. */
const probeEvery = Duration.seconds(5)
const probeAnswer = Duration.seconds(3)

/** The payload announcing a settled request (the channel carries text). */
export const announcement = (agentId: string, requestId: string) => `${agentId} ${requestId}`

export const layer = Layer.scoped(
  Settlements,
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const health = yield* DatabaseHealth.DatabaseHealth
    const waiters = new Map<string, Set<Waiter>>()
    let listening = false
    let probeHeardAt = 0
    // A probe's payload no request's can be: request payloads hold a space.
    const probe = Ids.make("probe")

    const stopListening = () => {
      listening = false
      for (const set of waiters.values()) for (const waiter of set) waiter.lost()
      waiters.clear()
    }

    const hear = (payload: string) => {
      if (payload === probe) {
        probeHeardAt = Date.now()
        listening = true
        return
      }
      const set = waiters.get(payload)
      if (set === undefined) return
      waiters.delete(payload)
      for (const waiter of set) waiter.settled()
    }

    const sendProbe = Effect.ignore(sql`SELECT pg_notify(${settledChannel}, ${probe})`)
    /**
     * The probe is sent until it is heard: heard, it shows the LISTEN is in place, so any later announcement
     * reaches this node. Then again every few seconds: a connection that went quiet without an error (the
     * driver drops a listening connection's errors) ends the listening, to begin anew, its waiters told.
     */
    const watch = Effect.gen(function*() {
      while (!listening) {
        yield* sendProbe
        yield* Effect.sleep(Duration.millis(200))
      }
      while (true) {
        yield* Effect.sleep(probeEvery)
        const sentAt = Date.now()
        yield* sendProbe
        yield* Effect.sleep(probeAnswer)
        if (probeHeardAt < sentAt) {
          return yield* Effect.logWarning("the channel of settled requests went quiet; listening anew")
        }
      }
    })

    yield* sql.listen(settledChannel).pipe(
      // Every completion in the cluster reaches every node: heard a chunk at a time, one step for many.
      Stream.runForEachChunk((payloads) => Effect.sync(() => Chunk.forEach(payloads, hear))),
      Effect.raceFirst(health.lost),
      Effect.raceFirst(watch),
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("listening for settled requests failed")),
      Effect.ensuring(Effect.sync(stopListening)),
      Effect.zipRight(Effect.sleep(Duration.seconds(1))),
      Effect.forever,
      Effect.forkScoped
    )
    yield* Effect.addFinalizer(() => Effect.sync(stopListening))

    return Settlements.of({
      listen: (agentId, requestId, waiter) => {
        if (!listening) return Option.none()
        const key = announcement(agentId, requestId)
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
