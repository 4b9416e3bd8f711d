/**
 * Usage of gateway calls, recorded off the response path: entries collect
 * in memory and are written every 100 ms in one statement (and at
 * shutdown), so a call never waits on PostgreSQL. While the database cannot
 * be reached they are kept (up to `maxKept`) and written once it is back, so
 * calls served during an outage are still billed.
 */
import { UsageLog } from "@agent-runtime/models"
import { DatabaseHealth } from "@agent-runtime/store"
import { Context, Effect, Layer, Schedule } from "effect"

/** Entries kept while the database is away; beyond this the oldest are dropped (and the drop logged). */
const maxKept = 50_000

export interface Service {
  /** Queues a call's usage for the next write; never waits. */
  readonly add: (entry: UsageLog.Entry) => void
  /** Writes what is queued now (also every 100 ms, and when the layer closes); a failure is logged, not told. */
  readonly flush: Effect.Effect<void>
}

export class UsageBatch extends Context.Tag("@agent-runtime/gateway/UsageBatch")<UsageBatch, Service>() {}

/** The batch, with its writer every 100 ms and a last write when the scope closes. */
export const make = Effect.gen(function*() {
  const log = yield* UsageLog.UsageLog
  let pending: Array<UsageLog.Entry> = []

  const flush = Effect.suspend(() => {
    if (pending.length === 0) return Effect.void
    const batch = pending
    pending = []
    return log.recordAll(batch).pipe(
      Effect.catchAllCause((cause) => {
        // Only a batch that never reached the server is kept: one cut mid-statement may have been written.
        if (!DatabaseHealth.neverSent(cause)) return Effect.logWarning("recording gateway usage failed", cause)
        pending = batch.concat(pending)
        const dropped = pending.length - maxKept
        if (dropped <= 0) return Effect.void
        pending = pending.slice(dropped)
        return Effect.logWarning("gateway usage dropped: the database has been away too long").pipe(
          Effect.annotateLogs({ dropped })
        )
      })
    )
  })

  yield* Effect.forkScoped(Effect.repeat(flush, Schedule.spaced("100 millis")))
  yield* Effect.addFinalizer(() => flush)

  const add = (entry: UsageLog.Entry) => {
    pending.push(entry)
  }

  return UsageBatch.of({ add, flush })
})

export const layer: Layer.Layer<UsageBatch, never, UsageLog.UsageLog> = Layer.scoped(UsageBatch, make)
