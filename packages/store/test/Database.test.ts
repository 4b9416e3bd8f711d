/**
 * The node's client prepares its statements (planning cost PostgreSQL more
 * than running a turn's statements did): once per session, with a bound on
 * how many one session keeps, and not at all when a pooler cannot keep them.
 */
import { Database } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Redacted, Stream } from "effect"
import Pg from "pg"

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

/**
 * Every `LISTEN`/`UNLISTEN` statement on a pg client, counted while it runs: `overlapped` is how many were sent
 * while another ran on the same client (pg queues them, and warns once it holds more than one).
 */
const listenStatements = Effect.acquireRelease(
  Effect.sync(() => {
    const original = Pg.Client.prototype.query
    const running = new Map<Pg.Client, number>()
    const seen = { statements: 0, overlapped: 0 }
    Pg.Client.prototype.query = function(this: Pg.Client, ...args: Array<any>) {
      const result = (original as (...args: Array<any>) => any).apply(this, args)
      const text = typeof args[0] === "string" ? args[0] : ""
      if (!/^\s*(UN)?LISTEN\b/.test(text) || !(result instanceof Promise)) return result
      seen.statements++
      const now = running.get(this) ?? 0
      if (now > 0) seen.overlapped++
      running.set(this, now + 1)
      const done = () => running.set(this, running.get(this)! - 1)
      result.then(done, done)
      return result
    } as typeof original
    return { seen, restore: () => void (Pg.Client.prototype.query = original) }
  }),
  ({ restore }) => Effect.sync(restore)
)

it.scopedLive("channels listened to at once share one session, one statement at a time, and all are heard", () =>
  Effect.gen(function*() {
    const { seen } = yield* listenStatements
    const warnings: Array<string> = []
    const onWarning = (warning: Error) => warnings.push(warning.message)
    process.on("warning", onWarning)
    yield* Effect.addFinalizer(() => Effect.sync(() => process.off("warning", onWarning)))
    const sql = yield* PgClient.PgClient
    // As a node starts its channels (wake-ups, arrivals, settlements, webhook deliveries), and more.
    const channels = Array.from({ length: 6 }, (_, i) => `listen_test_${i}`)
    const heard = yield* Effect.forkScoped(Effect.forEach(
      channels,
      (channel) => Stream.runHead(sql.listen(channel)),
      { concurrency: "unbounded" }
    ))
    // Sent until every stream heard one: a notification before its LISTEN is lost.
    while (heard.unsafePoll() === null) {
      yield* Effect.forEach(channels, (channel) => sql`SELECT pg_notify(${channel}, ${`to ${channel}`})`, {
        discard: true
      })
      yield* Effect.sleep("50 millis")
    }
    expect((yield* Fiber.join(heard)).map((payload) => payload._tag === "Some" && payload.value)).toEqual(
      channels.map((channel) => `to ${channel}`)
    )
    // Each stream's LISTEN, and its UNLISTEN when it ended.
    expect(seen.statements).toBe(2 * channels.length)
    expect(seen.overlapped).toBe(0)
    expect(warnings.filter((warning) => warning.includes("already executing a query"))).toEqual([])
  }).pipe(Effect.provide(oneSession(true))))
