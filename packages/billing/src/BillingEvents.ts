/**
 * The billing events of a balance falling: `billing.balance.low` when it
 * falls to the tenant's low-balance mark, `billing.balance.depleted` when it
 * reaches zero. Each fires once per fall: the tenant's row is marked in the
 * statement that writes the event (any node may find it first; one does),
 * and the mark is lifted when credit brings the balance back above (see the
 * ledger's trigger). Looked for every second, off the charging path.
 */
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { Outbox } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Schedule } from "effect"

const interval = Duration.seconds(1)

type Fall = "low" | "depleted"

const marks = {
  low: { column: "low_notified", reached: "balance <= low_balance", type: "billing.balance.low" },
  depleted: { column: "depleted_notified", reached: "balance <= 0", type: "billing.balance.depleted" }
} as const

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  /** Marks the fall and writes its event in one statement: only the statement that marks it writes it. */
  const notify = (tenantId: string, fall: Fall) => {
    const mark = marks[fall]
    return Effect.asVoid(sql`
      WITH marked AS (
        UPDATE tenant_billing SET ${sql.unsafe(mark.column)} = true
        WHERE tenant_id = ${tenantId} AND mode = 'prepaid' AND NOT ${sql.unsafe(mark.column)}
          AND ${sql.unsafe(mark.reached)}
        RETURNING balance, low_balance)
      ${
      Outbox.insert(sql, [{
        tenantId,
        type: mark.type,
        data: {},
        when: sql`EXISTS (SELECT 1 FROM marked)`,
        merge: sql`(SELECT jsonb_build_object('balance', balance, 'threshold', ${
          fall === "low" ? sql`low_balance` : sql`0`
        }, 'at', floor(extract(epoch from now()))) FROM marked)`
      }])
    }`)
  }

  /** The falls not told yet, each told once. */
  const sweep = Effect.gen(function*() {
    const falls = yield* sql<{ tenantId: string; low: boolean; depleted: boolean }>`
      SELECT tenant_id, NOT low_notified AND balance <= low_balance AS low,
        NOT depleted_notified AND balance <= 0 AS depleted
      FROM tenant_billing WHERE mode = 'prepaid'
        AND ((NOT low_notified AND balance <= low_balance) OR (NOT depleted_notified AND balance <= 0))`
    yield* Effect.forEach(falls, (fall) =>
      Effect.zipRight(
        fall.low ? notify(fall.tenantId, "low") : Effect.void,
        fall.depleted ? notify(fall.tenantId, "depleted") : Effect.void
      ), { discard: true })
  }).pipe(PersistenceError.PersistenceError.refail)

  return { sweep }
})

/** Every node looks for falls to tell; the marks keep each told once. */
export const layer: Layer.Layer<never, never, SqlClient.SqlClient | DatabaseHealth.DatabaseHealth> = Layer
  .scopedDiscard(Effect.gen(function*() {
    const { sweep } = yield* make
    yield* sweep.pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("telling billing events failed")),
      Effect.repeat(Schedule.spaced(interval)),
      Effect.forkScoped
    )
  }))
