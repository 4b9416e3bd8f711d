/**
 * The journal writer on a real PostgreSQL: held writes go with the next one,
 * events wait for the writes before them, a stale term's writes change
 * nothing and stop the instance until it claims the agent again, and an
 * outage is waited out while a refusal for the data is not tried again.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { BillingMigrations } from "@agent-runtime/billing"
import { Database } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { ShardingConfig } from "@effect/cluster"
import { SqlClient, SqlError } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Either, Exit, Layer, Option, Redacted, Schedule, Scope } from "effect"
import { Fenced, PersistenceError } from "../src/AgentError.ts"
import * as AgentMigrations from "../src/AgentMigrations.ts"
import * as AgentStoreModule from "../src/AgentStore.ts"
import { AgentStore } from "../src/AgentStore.ts"
import * as EventLog from "../src/EventLog.ts"
import * as Journal from "../src/Journal.ts"

const agentId = "client_journal"

const withJournal = <A, E>(
  body: Effect.Effect<A, E, AgentStore | SqlClient.SqlClient | EventLog.LocalLogs | ShardingConfig.ShardingConfig>
) =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    return yield* body.pipe(
      Effect.provide(
        Layer.mergeAll(
          AgentStoreModule.layer,
          EventLog.layerLocalLogs,
          ShardingConfig.layer({ shardLockExpiration: "200 millis" })
        ).pipe(
          Layer.provideMerge(
            Database.layerClient(Redacted.make(url), {
              migrations: [AccountsMigrations.migrations, BillingMigrations.migrations, AgentMigrations.migrations]
            })
          )
        )
      )
    )
  })

const seed = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_journal', 'journal')`
  yield* sql`INSERT INTO agents (id, tenant_id, name, config, input_fingerprint)
    VALUES (${agentId}, 'tn_journal', ${agentId}, '{"model": "fake/m1"}', 'f')`
})

/** What the term's log told so far. */
const told = (journal: Journal.Journal) =>
  Effect.map(journal.term().log.since(0), (entries) => entries._tag === "Right" ? entries.right.map((e) => e.data) : [])

const sqlError = (code: string) => new PersistenceError({ cause: new SqlError.SqlError({ cause: { code } }) })

describe("Journal", () => {
  it.live("held messages go with the next write, in one statement; events told meanwhile wait for it", () =>
    withJournal(Effect.scoped(Effect.gen(function*() {
      yield* seed
      const store = yield* AgentStore
      const journal = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:1" })
      journal.holdMessage(0, store.appendMessage(agentId, 0, null, { n: 0 }))
      journal.holdMessage(1, store.appendMessage(agentId, 1, null, { n: 1 }))
      yield* journal.publish({ said: "message 1" })
      expect(yield* store.messageCount(agentId)).toBe(0)
      expect(yield* told(journal)).toEqual([])

      yield* journal.write()
      expect(yield* store.messageCount(agentId)).toBe(2)
      expect(yield* told(journal)).toEqual([{ said: "message 1" }])
      // With nothing held, an event is told at once.
      yield* journal.publish({ said: "now" })
      expect(yield* told(journal)).toEqual([{ said: "message 1" }, { said: "now" }])
    }))))

  it.live("after another runner's claim, a write changes nothing and stops the instance; reclaim claims a new term", () =>
    withJournal(Effect.scoped(Effect.gen(function*() {
      yield* seed
      const store = yield* AgentStore
      const journal = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:1" })
      const first = journal.term()
      const other = yield* store.claim(agentId, "127.0.0.1:2")

      journal.holdMessage(0, store.appendMessage(agentId, 0, null, { n: 0 }))
      yield* journal.publish({ said: "never" })
      const exit = yield* Effect.exit(journal.write())
      expect(Exit.isFailure(exit) && Cause.dieOption(exit.cause).pipe(Option.exists((d) => d instanceof Fenced)))
        .toBe(true)
      expect(journal.superseded()).toBe(true)
      expect(yield* store.messageCount(agentId)).toBe(0)

      const started = Date.now()
      yield* journal.reclaim
      // A fenced instance waits a shard lease before it claims again.
      expect(Date.now() - started).toBeGreaterThanOrEqual(150)
      expect(journal.superseded()).toBe(false)
      expect(journal.term().epoch).toBeGreaterThan(other.epoch)
      expect(journal.term().log).not.toBe(first.log)
      // What was held under the old term was never journaled, and is not now.
      yield* journal.write()
      expect(yield* store.messageCount(agentId)).toBe(0)
      expect(yield* told(journal)).toEqual([])
    }))))

  it.live(
    "event ids outgrow a block and still come after every id an earlier owner handed out, crash or release",
    () =>
      withJournal(Effect.scoped(Effect.gen(function*() {
        yield* seed
        const store = yield* AgentStore
        const sql = yield* SqlClient.SqlClient
        const reservedUntil = Effect.map(
          sql<{ until: number }>`SELECT event_block::float8 AS until FROM agents WHERE id = ${agentId}`,
          (rows) => rows[0]!.until
        )
        const crashed = yield* Scope.make()
        const first = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:1" }).pipe(Scope.extend(crashed))
        const start = yield* first.term().log.cursor
        // Past half its block, the owner reserves the next one while it goes on publishing.
        for (let i = 0; i < AgentStoreModule.eventBlockSize / 2 + 1; i++) first.unsafePublish({ n: i })
        yield* reservedUntil.pipe(
          Effect.filterOrFail((until) => until > start + AgentStoreModule.eventBlockSize),
          Effect.retry(Schedule.spaced("20 millis")),
          Effect.timeout("10 seconds")
        )
        for (let i = 0; i < AgentStoreModule.eventBlockSize; i++) first.unsafePublish({ n: i })
        const lastOfFirst = yield* first.term().log.cursor
        expect(lastOfFirst).toBeGreaterThan(start + AgentStoreModule.eventBlockSize)

        // The owner is gone without letting go (a crash): the next owner's ids start after all of them.
        const second = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:2" })
        yield* second.publish({ said: "resumed" })
        const resumed = yield* second.term().log.cursor
        expect(resumed).toBeGreaterThan(lastOfFirst)
        // The crashed owner cannot take ids past what the next one reserved.
        expect(yield* reservedUntil).toBeGreaterThan(resumed)
        yield* Scope.close(crashed, Exit.void)

        // An owner that let go past its block (ids handed out before blocks were extended): the next goes on after.
        yield* store.release(agentId, second.term().epoch, resumed + 3 * AgentStoreModule.eventBlockSize, [])
        const third = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:3" })
        yield* third.publish({ said: "after the release" })
        expect(yield* third.term().log.cursor).toBe(resumed + 3 * AgentStoreModule.eventBlockSize + 1)
      }))),
    { timeout: 60_000 }
  )

  it.live("an owner that lets go before telling anything hands on the last id it was handed, not its block's start", () =>
    withJournal(Effect.scoped(Effect.gen(function*() {
      yield* seed
      const store = yield* AgentStore
      const handOn = (journal: Journal.Journal) =>
        Effect.gen(function*() {
          const { epoch, log } = journal.term()
          yield* store.release(agentId, epoch, yield* log.cursor, yield* log.buffered)
        })
      // A new agent, watched before it has told anything: the watcher's cursor is its first owner's start.
      const first = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:1" })
      const watched = yield* first.term().log.cursor
      yield* handOn(first)
      // It moves twice before it tells anything (a runner joins, shards are shared out again).
      const second = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:2" })
      expect(yield* second.term().log.cursor).toBe(watched)
      yield* handOn(second)
      const third = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:3" })
      expect(yield* third.term().log.cursor).toBe(watched)
      // The watcher goes on from its cursor on the third owner, told no gap, and sees what it tells.
      expect(Either.map(yield* third.term().log.since(watched), (entries) => entries.length)).toEqual(Either.right(0))
      yield* third.publish({ said: "first words" })
      const told = yield* third.term().log.cursor
      expect(told).toBeGreaterThan(watched + 2 * AgentStoreModule.eventBlockSize)
      expect(Either.map(yield* third.term().log.since(watched), (entries) => entries.map((entry) => entry.id)))
        .toEqual(Either.right([told]))
    }))))

  it.live("a write answers the database's clock as it wrote, unless it was sent again after a fault", () =>
    withJournal(Effect.scoped(Effect.gen(function*() {
      yield* seed
      const sql = yield* SqlClient.SqlClient
      const store = yield* AgentStore
      const journal = yield* Journal.make({ agentId, runnerAddress: "127.0.0.1:1" })
      const [{ now }] = yield* sql<{ now: number }>`SELECT floor(extract(epoch from now()))::float8 AS now`
      const at = yield* journal.write(store.appendMessage(agentId, 0, null, { n: 0 }))
      expect(at).toBeGreaterThanOrEqual(now)
      expect(at).toBeLessThanOrEqual(now + 5)

      // The first sending fails as a lost connection would (it may have been written): the time is not known.
      yield* sql`CREATE FUNCTION lost_connection() RETURNS int LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'gone' USING ERRCODE = '08006'; END $$`
      let sent = 0
      const once: AgentStoreModule.Write = (guard) =>
        ++sent === 1
          // A data-modifying part: the statement runs it even though nothing reads it.
          ? sql`INSERT INTO agent_messages (agent_id, index, message) SELECT ${agentId}, 9, '{}' WHERE lost_connection() = 1`
          : store.appendMessage(agentId, 1, null, { n: 1 })(guard)
      expect(yield* journal.write(once)).toBeUndefined()
      expect(sent).toBe(2)
      expect(yield* store.messageCount(agentId)).toBe(2)
    }))))

  it.live("an outage is waited out; a statement refused for its data is not tried again", () =>
    Effect.gen(function*() {
      let attempts = 0
      const flaky = Effect.suspend(() => ++attempts < 3 ? Effect.fail(sqlError("08006")) : Effect.succeed("ok"))
      expect(yield* Journal.retrying(agentId)(flaky)).toBe("ok")
      expect(attempts).toBe(3)

      let refusedAttempts = 0
      const refused = Effect.suspend(() => {
        refusedAttempts++
        return Effect.fail(sqlError("22P05"))
      })
      const exit = yield* Effect.exit(Journal.retrying(agentId)(refused))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(refusedAttempts).toBe(1)
    }))
})
