/**
 * PersistenceError against a real PostgreSQL: a statement's failure is a
 * typed failure whose cause `DatabaseHealth` still reads (a statement
 * refused for what it says is permanent, a database out of reach is
 * unreachable), and a defect passes as it is.
 */
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { TcpProxy, TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option, Redacted } from "effect"

const database = (url: string) => PgClient.layer({ url: Redacted.make(url), connectTimeout: "2 seconds" })

const statement = (text: string) => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text))

it.scoped("a refused statement fails with a PersistenceError around its SqlError", () =>
  Effect.gen(function*() {
    const failed = yield* Effect.flip(PersistenceError.PersistenceError.refail(statement("SELECT * FROM missing")))
    expect(failed).toBeInstanceOf(PersistenceError.PersistenceError)
    expect((failed.cause as { _tag?: unknown })._tag).toBe("SqlError")
    expect(DatabaseHealth.isPermanent(failed)).toBe(true)
    expect(DatabaseHealth.isUnreachable(failed)).toBe(false)
  }).pipe(Effect.provide(Layer.unwrapEffect(Effect.map(TestDatabase.make, database)))), { timeout: 30_000 })

it.scoped(
  "a database gone out of reach is unreachable through it, in the failure's whole cause",
  () =>
    Effect.gen(function*() {
      const proxy = yield* TcpProxy.start(yield* TestDatabase.make)
      yield* Effect.gen(function*() {
        yield* statement("SELECT 1")
        yield* proxy.cut("refuse")
        const exit = yield* Effect.exit(PersistenceError.PersistenceError.refail(statement("SELECT 1")))
        if (Exit.isSuccess(exit)) return expect.fail("the statement ran with the database cut off")
        expect(Cause.failureOption(exit.cause).pipe(Option.getOrUndefined)).toBeInstanceOf(
          PersistenceError.PersistenceError
        )
        expect(DatabaseHealth.isUnreachable(exit.cause)).toBe(true)
        expect(DatabaseHealth.isPermanent(exit.cause)).toBe(false)
      }).pipe(Effect.provide(database(proxy.url)))
    }),
  { timeout: 30_000 }
)

it.effect("a defect is not wrapped", () =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(PersistenceError.PersistenceError.refail(Effect.die("a bug")))
    expect(exit).toEqual(Exit.die("a bug"))
  }))
