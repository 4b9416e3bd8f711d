import { Database, Migrations } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"

const client = (url: string) => PgClient.layer({ url: Redacted.make(url) })

it.live("migrations apply once, in order, and re-run as a no-op", () =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    const applied = yield* Migrations.run.pipe(Effect.provide(client(url)))
    expect(applied.map(([id]) => id)).toEqual(Object.keys(Migrations.migrations).map((name) => Number(name.split("_")[0])))
    expect(yield* Migrations.run.pipe(Effect.provide(client(url)))).toEqual([])
    const rows = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ migrationId: number }>`SELECT migration_id FROM agent_runtime_migrations ORDER BY migration_id`.pipe(
        Effect.map((rows) => rows.length)
      )).pipe(Effect.provide(Database.layerClient(Redacted.make(url))))
    expect(rows).toBe(Object.keys(Migrations.migrations).length)
  }))

it.live("concurrent first starts migrate exactly once", () =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    const results = yield* Effect.all(
      Array.from({ length: 4 }, () => Migrations.run.pipe(Effect.provide(client(url)))),
      { concurrency: "unbounded" }
    )
    expect(results.flat().length).toBe(Object.keys(Migrations.migrations).length)
    const tables = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_tables WHERE tablename IN ('tenants', 'api_tokens')`)
      .pipe(Effect.provide(Layer.fresh(client(url))))
    expect(tables[0]!.n).toBe(2)
  }))
