/**
 * DatabaseHealth against a real PostgreSQL reached through a real TCP proxy:
 * the probe notices a cut and a recovery, tells its listeners once, and
 * `isUnreachable` knows the errors a cut connection gives (and no others).
 */
import { Database, DatabaseHealth } from "@agent-runtime/store"
import { TcpProxy, TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Logger, Redacted } from "effect"

/** The node's pool settings (its connect timeout) on `url`, with the health probe. */
const layer = (url: string) =>
  DatabaseHealth.layerWith({ interval: "200 millis", timeout: "1 second" }).pipe(
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), connectTimeout: Database.connectTimeout }))
  )

const until = (check: () => boolean, timeoutMs: number) =>
  Effect.gen(function*() {
    const started = Date.now()
    while (!check()) {
      if (Date.now() - started > timeoutMs) return yield* Effect.die(new Error(`not within ${timeoutMs} ms`))
      yield* Effect.sleep("50 millis")
    }
    return Date.now() - started
  })

it.scopedLive("the probe follows a cut and a recovery, and tells its listeners once", () =>
  Effect.gen(function*() {
    const proxy = yield* TcpProxy.start(yield* TestDatabase.make)
    yield* checks(proxy).pipe(Effect.provide(layer(proxy.url)))
  }), { timeout: 30_000 })

const checks = (proxy: TcpProxy.TcpProxy) =>
  Effect.gen(function*() {
    const health = yield* DatabaseHealth.DatabaseHealth
    const sql = yield* SqlClient.SqlClient
    expect(health.current().reachable).toBe(true)
    let told = 0
    health.onLost(() => told++)
    const lost = yield* Effect.fork(health.lost)

    // A statement's own error is not the database being away.
    const syntax = yield* Effect.exit(sql.unsafe("SELEKT 1"))
    expect(Exit.isFailure(syntax) && DatabaseHealth.isUnreachable(syntax.cause)).toBe(false)

    yield* proxy.cut("refuse")
    const failed = yield* Effect.exit(sql`SELECT 1`)
    expect(Exit.isFailure(failed) && DatabaseHealth.isUnreachable(failed.cause)).toBe(true)
    yield* until(() => !health.current().reachable, 3_000)
    expect(told).toBe(1)
    expect((yield* lost.await)._tag).toBe("Success")
    // Registered while away: told at once.
    let late = 0
    health.onLost(() => late++)
    expect(late).toBe(1)

    yield* proxy.restore
    yield* until(() => health.current().reachable, 3_000)
    expect(yield* sql`SELECT 1 AS one`).toEqual([{ one: 1 }])
    expect(told).toBe(1)

    // New connections held unanswered: the pool gives up within its connect timeout, and that counts too.
    yield* proxy.cut("hold")
    // The first may meet a pooled connection the cut reset; the next needs a new one.
    yield* Effect.exit(sql`SELECT 1`)
    const started = Date.now()
    const held = yield* Effect.exit(sql`SELECT 1`)
    expect(Date.now() - started).toBeLessThan(3_000)
    expect(Exit.isFailure(held) && DatabaseHealth.isUnreachable(held.cause)).toBe(true)
    // It never reached the server: a write that failed so can be sent again.
    expect(Exit.isFailure(held) && DatabaseHealth.neverSent(held.cause)).toBe(true)
    yield* until(() => !health.current().reachable, 4_000)
    yield* proxy.restore
    yield* until(() => health.current().reachable, 4_000)
  })

it.scopedLive(
  "a database that answers late is waited for, not announced lost; an outage after it answered is",
  () =>
    Effect.gen(function*() {
      const proxy = yield* TcpProxy.start(yield* TestDatabase.make)
      // The pool connects, then the database stops answering before the probe's first answer (a node starting on a
      // busy machine, a server still starting).
      const client = yield* Layer.build(
        PgClient.layer({ url: Redacted.make(proxy.url), connectTimeout: Database.connectTimeout })
      )
      yield* proxy.cut("refuse")
      const lines: Array<string> = []
      const logger = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ logLevel, message }) => lines.push(`${logLevel.label} ${String(message)}`))
      )
      const health = yield* DatabaseHealth.make({ interval: "200 millis", timeout: "1 second" }).pipe(
        Effect.provide(Layer.merge(Layer.succeedContext(client), logger))
      )
      yield* until(() => !health.current().reachable, 3_000)
      // Several probes fail meanwhile: said once, and not as an outage.
      yield* Effect.sleep("1 second")
      expect(lines).toEqual(["INFO waiting for the database"])

      yield* proxy.restore
      yield* until(() => health.current().reachable, 3_000)
      expect(lines).toEqual(["INFO waiting for the database", "INFO database reachable"])

      // Once it has answered, losing it is an outage.
      yield* proxy.cut("refuse")
      yield* until(() => !health.current().reachable, 3_000)
      expect(lines.slice(2)).toEqual([
        "WARN database unreachable: requests that need it answer 503 until it is back"
      ])
      yield* proxy.restore
      yield* until(() => health.current().reachable, 3_000)
      expect(lines.slice(3)).toEqual(["INFO database reachable again"])
    }),
  { timeout: 30_000 }
)

it("isUnreachable follows causes and wrappers, and only under a SqlError", () => {
  const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" })
  const sqlError = { _tag: "SqlError", message: "Failed to execute statement", cause: refused }
  expect(DatabaseHealth.isUnreachable(sqlError)).toBe(true)
  // The cluster's PersistenceError around it, as a defect.
  expect(DatabaseHealth.isUnreachable({ _tag: "PersistenceError", cause: sqlError })).toBe(true)
  // A terminated session (57P01) and a server starting up (57P03).
  expect(DatabaseHealth.isUnreachable({ _tag: "SqlError", cause: { code: "57P01", severity: "FATAL" } })).toBe(true)
  expect(DatabaseHealth.isUnreachable({ _tag: "SqlError", cause: { code: "57P03" } })).toBe(true)
  // A constraint violation is the statement's business; a refused tool URL is not the database.
  expect(DatabaseHealth.isUnreachable({ _tag: "SqlError", cause: { code: "23505" } })).toBe(false)
  expect(DatabaseHealth.isUnreachable(refused)).toBe(false)
  // Cut mid-statement: unreachable, but whether it ran is unknown; not acquired at all: never sent.
  const reset = { _tag: "SqlError", message: "Failed to execute statement", cause: { code: "ECONNRESET" } }
  expect(DatabaseHealth.isUnreachable(reset)).toBe(true)
  expect(DatabaseHealth.neverSent(reset)).toBe(false)
  expect(DatabaseHealth.neverSent({ _tag: "SqlError", message: "Failed to acquire connection", cause: refused })).toBe(
    true
  )
})
