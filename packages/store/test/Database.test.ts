/**
 * The node's client prepares its statements (planning cost PostgreSQL more
 * than running a turn's statements did): once per session, with a bound on
 * how many one session keeps, and not at all when a pooler cannot keep them.
 */
import { Database } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"

/** One session, so every statement below runs on the session it then asks about. */
const oneSession = (preparedStatements: boolean) =>
  Layer.unwrapEffect(
    Effect.map(
      TestDatabase.make,
      (url) => Database.layerClient(Redacted.make(url), { maxConnections: 1, preparedStatements })
    )
  )

const prepared = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`
)

it.scopedLive("a statement with parameters is prepared once per session; others are not", () =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (let i = 0; i < 3; i++) {
      expect(yield* sql<{ n: number }>`SELECT ${i}::int + 1 AS n`).toEqual([{ n: i + 1 }])
    }
    yield* sql`CREATE TABLE notes (id int PRIMARY KEY, body text)`
    yield* sql`INSERT INTO notes (id, body) VALUES (${1}, ${"one"})`
    yield* sql`INSERT INTO notes (id, body) VALUES (${2}, ${"two"})`
    expect(yield* sql`SELECT body FROM notes ORDER BY id`).toEqual([{ body: "one" }, { body: "two" }])
    expect((yield* prepared).map((row) => row.statement).sort()).toEqual([
      "INSERT INTO notes (id, body) VALUES ($1, $2)",
      "SELECT $1::int + 1 AS n"
    ])
  }).pipe(Effect.provide(oneSession(true))))

it.scopedLive(
  "a session keeps at most 500 statements prepared; the rest are planned each time and still answer",
  () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      for (let i = 0; i < 520; i++) {
        expect(yield* sql.unsafe<{ n: number }>(`SELECT $1::int + ${i} AS n`, [1])).toEqual([{ n: i + 1 }])
      }
      expect(yield* sql.unsafe<{ n: number }>(`SELECT $1::int + 519 AS n`, [2])).toEqual([{ n: 521 }])
      expect((yield* prepared).length).toBe(500)
    }).pipe(Effect.provide(oneSession(true))),
  { timeout: 60_000 }
)

it.scopedLive("with preparedStatements off (a pooler in front), nothing is prepared", () =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    expect(yield* sql<{ n: number }>`SELECT ${1}::int + 1 AS n`).toEqual([{ n: 2 }])
    expect(yield* prepared).toEqual([])
  }).pipe(Effect.provide(oneSession(false))))
