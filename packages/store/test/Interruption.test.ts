/**
 * A statement whose fiber is interrupted (a client that hung up, a timeout)
 * must never cancel another fiber's statement. PostgreSQL cancels by session,
 * not by statement: `@effect/sql-pg` sent `pg_cancel_backend` after the
 * interrupted statement had finished and its session was back in the pool, and
 * the next statement on that session failed with 57014 (patches/ fixes it).
 */
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Redacted } from "effect"

/** A pool of `maxConnections` sessions on a fresh database. */
const pool = (maxConnections: number) =>
  Layer.unwrapEffect(
    Effect.map(TestDatabase.make, (url) => PgClient.layer({ url: Redacted.make(url), maxConnections }))
  )

it.scopedLive("interrupted statements never cancel the statements that run after them", () =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const failures: Array<string> = []
    let innocent = 0
    // Others keep the two sessions busy, so a session an interrupted statement let go is taken at once.
    const others = yield* Effect.fork(Effect.all(
      Array.from({ length: 3 }, () =>
        Effect.forever(
          Effect.exit(sql`SELECT pg_sleep(0.001)`).pipe(Effect.tap((exit) =>
            Effect.sync(() => {
              innocent++
              if (Exit.isFailure(exit)) failures.push(String(exit.cause))
            })
          ))
        )),
      { concurrency: "unbounded", discard: true }
    ))
    for (let round = 0; round < 300; round++) {
      // Interrupted at every point of its life: waiting for a session, mid-statement, just as it finishes.
      const victim = yield* Effect.fork(sql`SELECT pg_sleep(0.002)`)
      yield* Effect.sleep(`${round % 5} millis`)
      yield* Fiber.interrupt(victim)
    }
    yield* Fiber.interrupt(others)
    expect(innocent).toBeGreaterThan(300)
    expect(failures).toEqual([])
  }).pipe(Effect.provide(pool(2))), { timeout: 60_000 })

it.scopedLive("an interrupted long statement stops, and its session is not pooled again", () =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const pid = sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.pipe(Effect.map((rows) => rows[0]!.pid))
    const before = yield* pid
    const long = yield* Effect.fork(sql`SELECT pg_sleep(30)`)
    yield* Effect.sleep("200 millis")
    const started = Date.now()
    yield* Fiber.interrupt(long)
    expect(Date.now() - started).toBeLessThan(5_000)
    expect(yield* pid).not.toBe(before)
    const sleeping = yield* sql<{ count: number }>`
      SELECT count(*)::int AS count FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'`
    expect(sleeping[0]!.count).toBe(0)
  }).pipe(Effect.provide(pool(2))), { timeout: 30_000 })
