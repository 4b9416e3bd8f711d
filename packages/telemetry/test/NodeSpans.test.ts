/**
 * The node's spans on a real database: while the node exports no spans, the
 * hot paths run with the tracer off and make none, a statement's included;
 * while it exports, every statement still has its `sql.execute` span.
 */
import { Database } from "@agent-runtime/store"
import { NodeSpans } from "@agent-runtime/telemetry"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Tracer } from "effect"

it.live("a statement makes no span unless the node exports, and its sql.execute span while it does", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const native = yield* Effect.tracer
      const made: Array<{ readonly name: string; readonly attributes: ReadonlyMap<string, unknown> }> = []
      const recorded = Tracer.make({
        span: (...args) => {
          const span = native.span(...args)
          made.push(span)
          return span
        },
        context: native.context
      })
      const statementWith = (exporting: boolean) =>
        sql<{ readonly answer: number }>`SELECT ${41}::int + 1 AS answer`.pipe(
          NodeSpans.withSpan("Test.read"),
          NodeSpans.untracedUnlessExporting,
          Effect.provideService(NodeSpans.Exporting, exporting),
          Effect.withTracer(recorded)
        )

      expect(yield* statementWith(false)).toEqual([{ answer: 42 }])
      expect(made).toEqual([])
      // Outside the hot paths the tracer stays on: the statement's span is made as @effect/sql makes it.
      expect(yield* sql`SELECT 1 AS one`.pipe(Effect.withTracer(recorded))).toEqual([{ one: 1 }])
      expect(made.map((span) => span.name)).toEqual(["sql.execute"])

      made.length = 0
      expect(yield* statementWith(true)).toEqual([{ answer: 42 }])
      expect(made.map((span) => span.name)).toEqual(["Test.read", "sql.execute"])
      expect(made[1]!.attributes.get("db.query.text")).toBe("SELECT $1::int + 1 AS answer")
      expect(made[1]!.attributes.get("db.operation.name")).toBe("execute")
    }).pipe(Effect.provide(Layer.fresh(Database.layerClient(Redacted.make(databaseUrl), { migrations: [] }))))
  }))
