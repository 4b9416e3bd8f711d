import { Database, Migrations } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { Migrator, SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"

const client = (url: string) => PgClient.layer({ url: Redacted.make(url) })

const statement = (text: string) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text))

/** Two packages, the second's table referencing the first's. */
const parents = Migrations.make("parents_migrations", {
  "1_parents": statement("CREATE TABLE parents (id text PRIMARY KEY)"),
  "2_name": statement("ALTER TABLE parents ADD COLUMN name text")
})
const children = Migrations.make("children_migrations", {
  "1_children": statement(
    "CREATE TABLE children (id text PRIMARY KEY, parent_id text NOT NULL REFERENCES parents (id))"
  )
})

const tables = (url: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ tablename: string }>`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`
  ).pipe(
    Effect.map((rows) => rows.map((row) => row.tablename)),
    Effect.provide(Layer.fresh(client(url)))
  )

it.live("each package's steps apply once, in the order given, recorded in its own table", () =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    const applied = yield* Migrations.run(parents, children).pipe(Effect.provide(client(url)))
    expect(applied).toEqual([
      ["parents_migrations", 1, "parents"],
      ["parents_migrations", 2, "name"],
      ["children_migrations", 1, "children"]
    ])
    expect(yield* Migrations.run(parents, children).pipe(Effect.provide(client(url)))).toEqual([])
    expect(yield* tables(url)).toEqual(["children", "children_migrations", "parents", "parents_migrations"])
  }))

it.live("concurrent first starts migrate exactly once", () =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    const results = yield* Effect.all(
      Array.from({ length: 4 }, () => Migrations.run(parents, children).pipe(Effect.provide(client(url)))),
      { concurrency: "unbounded" }
    )
    expect(results.flat().length).toBe(3)
  }))

it.live("a step of the single list is skipped where that list ran it, and runs where it did not", () =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    // An earlier release ran its first step only.
    yield* Migrator.make({})({
      loader: Migrator.fromRecord({ "1_parents": statement("CREATE TABLE parents (id text PRIMARY KEY)") }),
      table: Migrations.legacyTable
    }).pipe(Effect.provide(client(url)))
    yield* statement("INSERT INTO parents VALUES ('p1')").pipe(Effect.provide(client(url)))
    const owned = Migrations.make("parents_migrations", {
      "1_parents": Migrations.legacy(1, statement("CREATE TABLE parents (id text PRIMARY KEY)")),
      "2_children": Migrations.legacy(
        2,
        statement("CREATE TABLE children (id text PRIMARY KEY, parent_id text NOT NULL REFERENCES parents (id))")
      )
    })
    const applied = yield* Migrations.run(owned).pipe(Effect.provide(client(url)))
    // Both recorded, so neither runs again; the first did nothing, the second made its table.
    expect(applied.map(([, id]) => id)).toEqual([1, 2])
    expect(yield* tables(url)).toEqual(["agent_runtime_migrations", "children", "parents", "parents_migrations"])
    const rows = yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ id: string }>`SELECT id FROM parents`).pipe(
      Effect.provide(client(url))
    )
    expect(rows).toEqual([{ id: "p1" }])
  }))

it.live("the database layer applies the schemas it is given before it is ready", () =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    const count = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM children_migrations`).pipe(
        Effect.provide(Database.layerClient(Redacted.make(url), { migrations: [parents, children] }))
      )
    expect(count).toEqual([{ n: 1 }])
  }))
