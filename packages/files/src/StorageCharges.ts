/**
 * Storage billed to prepaid tenants: once a UTC day, what their volumes
 * hold (`file_usage`) at `storageGbMonth` for a day of the month, as one
 * `storage` ledger entry per tenant and day. Every node looks every few
 * minutes; the ledger's key on the day lets the first statement of the day
 * charge and turns the others into nothing.
 */
import { Ledger, Rates } from "@agent-runtime/billing"
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Schedule } from "effect"

const interval = Duration.minutes(5)

/** Charges the day's storage of every prepaid tenant not charged for it yet. */
export const charge = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rates = yield* Rates.Rates
  yield* Ledger.storageCharging(sql, rates, sql`SELECT tenant_id, bytes FROM file_usage`)
}).pipe(PersistenceError.PersistenceError.refail)

export const layer: Layer.Layer<never, never, SqlClient.SqlClient | Rates.Rates | DatabaseHealth.DatabaseHealth> = Layer
  .scopedDiscard(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const rates = yield* Rates.Rates
      yield* charge.pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.provideService(Rates.Rates, rates),
        Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("charging storage failed")),
        Effect.repeat(Schedule.spaced(interval)),
        Effect.forkScoped
      )
    })
  )
