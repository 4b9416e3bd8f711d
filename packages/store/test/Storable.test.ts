/**
 * Storable against a real PostgreSQL: what `text`, `value` and `stringify`
 * make is taken by `text` and `jsonb` columns, what they leave alone is the
 * same value, and `DatabaseHealth.isPermanent` knows the refusals they
 * prevent (a statement refused for its data) from a connection that failed.
 */
import { DatabaseHealth, Storable } from "@agent-runtime/store"
import { TcpProxy, TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import fc from "fast-check"

const database = (url: string) => PgClient.layer({ url: Redacted.make(url), connectTimeout: "2 seconds" })

const unstorable = ["a\u0000b", "\ud800", "x\udc00y", "\ud83d\u0000", "\u0000\u0000"]

it("clean values are the same value; others become U+FFFD where they could not be stored", () => {
  const clean = { text: "héllo 👋", list: [1, "two", null, { "k€y": true }] }
  expect(Storable.value(clean)).toBe(clean)
  expect(Storable.text("👋")).toBe("👋")
  expect(Storable.text("a\u0000b\ud800c\udc00")).toBe("a\uFFFDb\uFFFDc\uFFFD")
  const dirty = { "k\u0000": ["\ud800", { inner: "x\u0000" }], fine: "ok" }
  expect(Storable.value(dirty)).toEqual({ "k\uFFFD": ["\uFFFD", { inner: "x\uFFFD" }], fine: "ok" })
  expect(dirty["k\u0000"][0]).toBe("\ud800")
  expect(Storable.stringify(dirty)).toBe(JSON.stringify(Storable.value(dirty)))
  expect(Storable.stringify(clean)).toBe(JSON.stringify(clean))
})

it.scoped(
  "PostgreSQL takes what stringify and text make; isPermanent knows what it refuses otherwise",
  () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TEMPORARY TABLE kept (body jsonb, line text)`
      for (const text of unstorable) {
        const refused = yield* Effect.flip(sql`INSERT INTO kept (body) VALUES (${JSON.stringify({ text })}::jsonb)`)
        expect(DatabaseHealth.isPermanent(refused), text).toBe(true)
        expect(DatabaseHealth.isUnreachable(refused)).toBe(false)
        yield* sql`INSERT INTO kept (body, line) VALUES (${Storable.stringify({ text })}::jsonb, ${
          Storable.text(text)
        })`
      }
      const rows = yield* sql<{ body: { text: string }; line: string }>`SELECT body, line FROM kept`
      expect(rows.map((row) => row.body.text)).toEqual(unstorable.map(Storable.text))
      expect(rows.map((row) => row.line)).toEqual(unstorable.map(Storable.text))
      // Any string at all, keys included, is storable once made so.
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.dictionary(fc.string({ unit: "binary" }), fc.string({ unit: "binary" })), (value) =>
            Effect.runPromise(
              sql`SELECT ${Storable.stringify(value)}::jsonb AS body`.pipe(
                Effect.map(([row]) => {
                  expect(row!.body).toEqual(Storable.value(value))
                  return true
                })
              )
            )),
          { numRuns: 200, seed: 20_261_126 }
        )
      )
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.map(TestDatabase.make, database)))),
  { timeout: 30_000 }
)

it.scoped("a database that cannot be reached is not a permanent refusal", () =>
  Effect.gen(function*() {
    const proxy = yield* TcpProxy.start(yield* TestDatabase.make)
    yield* proxy.cut("refuse")
    const failed = yield* Effect.flip(
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`).pipe(Effect.provide(database(proxy.url)))
    )
    expect(DatabaseHealth.isUnreachable(failed)).toBe(true)
    expect(DatabaseHealth.isPermanent(failed)).toBe(false)
  }), { timeout: 30_000 })
