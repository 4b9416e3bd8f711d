/**
 * Listening on a PostgreSQL channel as long as the node runs, anew after each loss. A notification is heard
 * only while the listening connection is up, and the driver drops a listening connection's errors, so the
 * listening counts as sure only once the node has heard its own probe on the channel (sent after it began
 * listening), and is checked every few seconds after: a probe not heard back ends it, to begin anew.
 */
import { DatabaseHealth, Ids } from "@agent-runtime/store"
import { PgClient } from "@effect/sql-pg"
import type { Scope } from "effect"
import { Duration, Effect, Stream } from "effect"

export interface Handlers {
  /** The probe came back: from now on every notification reaches this node, until `lost`. */
  readonly sure: Effect.Effect<void>
  /** Notifications heard while sure, in the order they were sent. */
  readonly heard: (payloads: ReadonlyArray<string>) => Effect.Effect<void>
  /** The listening ended (it begins anew shortly); also when the node stops. */
  readonly lost: () => void
}

/** How often a listening node checks it still hears the channel, and how long its probe may take. */
const probeEvery = Duration.seconds(5)
const probeAnswer = Duration.seconds(3)

const probePrefix = "probe"

export const listen = (
  channel: string,
  what: string,
  handlers: Handlers
): Effect.Effect<void, never, PgClient.PgClient | DatabaseHealth.DatabaseHealth | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const health = yield* DatabaseHealth.DatabaseHealth
    let sure = false
    let probeHeardAt = 0
    // A payload no announcement is: those are JSON or hold a space. Every node probes the same channel.
    const probe = Ids.make(probePrefix)

    const end = () => {
      sure = false
      handlers.lost()
    }

    const hear = (payloads: Iterable<string>) =>
      Effect.gen(function*() {
        const batch: Array<string> = []
        for (const payload of payloads) {
          if (payload !== probe) {
            if (sure && !payload.startsWith(probePrefix)) batch.push(payload)
            continue
          }
          probeHeardAt = Date.now()
          if (sure) continue
          // Nothing was kept before: the node was not sure.
          sure = true
          yield* handlers.sure
        }
        if (batch.length > 0) yield* handlers.heard(batch)
      })

    const sendProbe = Effect.ignore(sql`SELECT pg_notify(${channel}, ${probe})`)
    const watch = Effect.gen(function*() {
      while (!sure) {
        yield* sendProbe
        yield* Effect.sleep(Duration.millis(200))
      }
      while (true) {
        yield* Effect.sleep(probeEvery)
        const sentAt = Date.now()
        yield* sendProbe
        yield* Effect.sleep(probeAnswer)
        if (probeHeardAt < sentAt) return yield* Effect.logWarning(`the channel of ${what} went quiet; listening anew`)
      }
    })

    yield* sql.listen(channel).pipe(
      // Every announcement in the cluster reaches every node: heard a chunk at a time, one step for many.
      Stream.runForEachChunk(hear),
      Effect.raceFirst(health.lost),
      Effect.raceFirst(watch),
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable(`listening for ${what} failed`)),
      Effect.ensuring(Effect.sync(end)),
      Effect.zipRight(Effect.sleep(Duration.seconds(1))),
      Effect.forever,
      Effect.forkScoped
    )
    yield* Effect.addFinalizer(() => Effect.sync(end))
  })
