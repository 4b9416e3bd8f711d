/**
 * Fires due schedules, on every node, once across the cluster: a node claims
 * a due schedule for a while, sends its prompt with a request id made of the
 * schedule's id and due time, and moves it on. A node lost between the send
 * and the move leaves the schedule due once the claim lapses; the next node
 * sends the same request id, which the agent takes as the same request. A
 * repeating schedule whose times passed during an outage fires once, then at
 * its next time after now.
 */
import { Run } from "@agent-runtime/domain"
import { DatabaseHealth } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Schedule, Schema } from "effect"
import { Agents } from "./Agents.ts"
import { Drain } from "./Drain.ts"
import { columns, nextDue, ScheduleRow } from "./Schedules.ts"

/** How often a node looks for due schedules. */
const pollInterval = Duration.seconds(1)

/** How long a node holds a due schedule it is delivering; a node lost meanwhile lets it go after this. */
const claimSeconds = 30

/**
 * Fires due schedules on this node. A schedule is claimed for a while before
 * its prompt is sent and moved on after, each in its own statement: the send
 * runs outside any transaction, so no row lock or connection is held while
 * the agent's owner answers. A draining node fires nothing.
 */
export const layer: Layer.Layer<
  never,
  never,
  Drain | DatabaseHealth.DatabaseHealth | Agents | SqlClient.SqlClient
> = Layer.scopedDiscard(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const agents = yield* Agents
  const drain = yield* Drain
  const health = yield* DatabaseHealth.DatabaseHealth
  const decode = Schema.decodeUnknown(Schema.Array(ScheduleRow))

  /** Fires the next due schedule no other node holds; whether there was one. */
  const fireOne = Effect.gen(function*() {
    const [row] = yield* sql`
      UPDATE schedules SET claimed_until = now() + make_interval(secs => ${claimSeconds})
      WHERE id = (
        SELECT id FROM schedules
        WHERE due_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
        ORDER BY due_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED
      )
      RETURNING ${columns(sql)}`.pipe(Effect.flatMap(decode))
    if (row === undefined) return false
    const due = Math.round(row.dueAt * 1000)
    // The same id whichever node sends it, so a resend after a lost node is the same request.
    const requestId = `sched_${row.id}_${due}`
    // Nobody is waiting to connect the application for a schedule: its calls fail as not connected.
    const request = { requestId, allowDisconnected: true, metadata: { scheduleId: row.id } }
    const gone = yield* (row.code === null
      ? agents.prompt(row.tenantId, row.agentId, new Run.PromptInput({ ...request, text: row.text ?? "" }))
      : agents.execute(row.tenantId, row.agentId, new Run.ExecuteInput({ ...request, code: row.code }))).pipe(
        Effect.as(false),
        Effect.catchTags({
          NotFound: () => Effect.succeed(true),
          Gone: () => Effect.succeed(true)
        }),
        Effect.catchAll((refused) =>
          Effect.as(
            Effect.logWarning("a due schedule could not be delivered", refused).pipe(
              Effect.annotateLogs({ scheduleId: row.id, agentId: row.agentId })
            ),
            false
          )
        )
      )
    if (row.everySeconds === null || gone) {
      yield* sql`DELETE FROM schedules WHERE id = ${row.id}`
    } else {
      const next = nextDue(due, row.everySeconds, Date.now())
      yield* sql`UPDATE schedules SET due_at = to_timestamp(${next / 1000}), claimed_until = NULL
        WHERE id = ${row.id}`
    }
    return true
  })

  const fireDue = Effect.suspend(() =>
    drain.isDraining() || !health.current().reachable ? Effect.succeed(false) : fireOne
  ).pipe(
    Effect.repeat({ while: (fired) => fired }),
    Effect.catchAllCause((cause) => Effect.logWarning("firing schedules failed", cause))
  )

  yield* Effect.forkScoped(Effect.repeat(fireDue, Schedule.spaced(pollInterval)))
}))
