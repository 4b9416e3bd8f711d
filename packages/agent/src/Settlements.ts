/**
 * Requests settling anywhere in the cluster, heard on this node: the
 * statement that completes a request announces it on a PostgreSQL channel
 * (`AgentStore.settledChannel`), and every node listens. A long poll of a
 * request whose agent another node owns waits here instead of asking the
 * owner over the cluster, which would cost both nodes a message and its reply.
 *
 * A notification is heard only while the listening connection is up, so a
 * node promises nothing until it has heard its own probe on the channel
 * (sent after it began listening); while it cannot promise, or once it stops
 * listening (the database went away, the connection was lost), waiters are
 * told to ask the owner instead.
 */
import { DatabaseHealth, Ids } from "@agent-runtime/store"
import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
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

/** The payload announcing a settled request (the channel carries text). */
export const announcement = (agentId: string, requestId: string) => `${agentId} ${requestId}`

export const layer = Layer.scoped(
  Settlements,
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const health = yield* DatabaseHealth.DatabaseHealth
    const waiters = new Map<string, Set<Waiter>>()
    let listening = false
    // A probe's payload no request's can be: request payloads hold a space.
    const probe = Ids.make("probe")

    const stopListening = () => {
      listening = false
      for (const set of waiters.values()) for (const waiter of set) waiter.lost()
      waiters.clear()
    }

    const hear = (payload: string) => {
      if (payload === probe) {
        listening = true
        return
      }
      const set = waiters.get(payload)
      if (set === undefined) return
      waiters.delete(payload)
      for (const waiter of set) waiter.settled()
    }

    // The probe is sent until it is heard: heard, it shows the LISTEN is in place, so any later
    // announcement reaches this node while the connection lasts.
    const sendProbe = Effect.asVoid(sql`SELECT pg_notify(${settledChannel}, ${probe})`)
    const confirm = Effect.suspend(() => listening ? Effect.void : sendProbe)
      .pipe(
        Effect.zipRight(Effect.suspend(() => listening ? Effect.void : Effect.fail("not yet" as const))),
        Effect.retry(Schedule.spaced("200 millis")),
        Effect.ignore
      )

    yield* Effect.gen(function*() {
      yield* Effect.forkScoped(confirm)
      // A listener whose connection died never fails (the driver drops that connection's errors): it
      // ends with the database's loss, and listens anew once it is back.
      yield* sql.listen(settledChannel).pipe(
        Stream.runForEach((payload) => Effect.sync(() => hear(payload))),
        Effect.raceFirst(health.lost)
      )
    }).pipe(
      Effect.scoped,
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
