/**
 * Usage of gateway calls, recorded off the response path: entries collect
 * in memory and are written every 100 ms in one statement (and at
 * shutdown), so a call never waits on PostgreSQL.
 */
import { UsageLog } from "@agent-runtime/models"
import { Effect, Schedule } from "effect"

export class UsageBatch extends Effect.Service<UsageBatch>()("@agent-runtime/gateway/UsageBatch", {
  scoped: Effect.gen(function*() {
    const log = yield* UsageLog.UsageLog
    let pending: Array<UsageLog.Entry> = []

    const flush = Effect.suspend(() => {
      if (pending.length === 0) return Effect.void
      const batch = pending
      pending = []
      return log.recordAll(batch).pipe(
        Effect.catchAllCause((cause) => Effect.logWarning("recording gateway usage failed", cause))
      )
    })

    yield* Effect.forkScoped(Effect.repeat(flush, Schedule.spaced("100 millis")))
    yield* Effect.addFinalizer(() => flush)

    const add = (entry: UsageLog.Entry) => {
      pending.push(entry)
    }

    return { add, flush } as const
  })
}) {}
