/**
 * Schema migrations, each package its own, as the cluster's SQL storages
 * own theirs. A package lists its steps (`make`) and records them in its own
 * Migrator table; the app runs every package's steps (`run`, or
 * `Database.layer`'s `migrations`) in dependency order, a package after
 * those whose tables it references. Applied steps are recorded, so a
 * restart (or a second node) runs nothing twice.
 *
 * Databases made before each package owned its tables were migrated from a
 * single list, recorded in `agent_runtime_migrations`. A step that was on
 * that list says which number it had (`legacy`) and does nothing where that
 * number is recorded: such a database keeps its tables and rows, and takes
 * only the steps written since. The old table is left as it is.
 */
import { Migrator, SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/** One step: statements run in the Migrator's transaction. */
export type Step = Effect.Effect<void, unknown, SqlClient.SqlClient>

/** One package's schema: its steps and the table recording which of them ran. */
export interface Migrations {
  /** The package's Migrator table, `<package>_migrations`. */
  readonly table: string
  /** The steps by `<id>_<name>`, applied in id order; ids only grow, and a step once released never changes. */
  readonly steps: Readonly<Record<string, Step>>
}

export const make = (table: string, steps: Readonly<Record<string, Step>>): Migrations => ({ table, steps })

/** A step that ran: the package's table, and the step's id and name. */
export type Applied = readonly [table: string, id: number, name: string]

/** Where the single list of earlier releases recorded its steps. */
export const legacyTable = "agent_runtime_migrations"

/**
 * A step that was number `id` on the single list of earlier releases: it
 * does nothing on a database where that list ran it, and runs on any other.
 */
export const legacy = (id: number, step: Step): Step =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [found] = yield* sql<{ present: boolean }>`SELECT to_regclass(${legacyTable}) IS NOT NULL AS present`
    if (found?.present === true) {
      const ran = yield* sql`SELECT 1 FROM ${sql(legacyTable)} WHERE migration_id = ${id}`
      if (ran.length > 0) return
    }
    yield* step
  })

/** Applies one package's pending steps; concurrent starts wait on its table's lock. */
const runOne = (migrations: Migrations) =>
  Migrator.make({})({ loader: Migrator.fromRecord(migrations.steps), table: migrations.table }).pipe(
    // Two first starts can race to create the migrations table; the loser retries once it exists.
    Effect.retry({ times: 3 }),
    Effect.map((applied) => applied.map(([id, name]): Applied => [migrations.table, id, name]))
  )

/**
 * Applies the pending steps of each package, in the order given (a package
 * after those whose tables it references), and answers the steps that ran.
 */
export const run = (
  ...packages: ReadonlyArray<Migrations>
): Effect.Effect<ReadonlyArray<Applied>, Migrator.MigrationError | SqlError, SqlClient.SqlClient> =>
  Effect.forEach(packages, runOne).pipe(
    Effect.map((applied) => applied.flat()),
    Effect.tap((applied) =>
      applied.length === 0 ? Effect.void : Effect.logInfo("migrated").pipe(
        Effect.annotateLogs("migrations", applied.map(([table, id, name]) => `${table}/${id}_${name}`).join(","))
      )
    )
  )
