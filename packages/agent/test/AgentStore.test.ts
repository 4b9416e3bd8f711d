/**
 * The journal's bookkeeping on a real PostgreSQL: the ownership epoch that
 * fences a stale owner's writes, and the resume backoff of work that could
 * not be woken.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { Database } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { Fenced } from "../src/AgentError.ts"
import * as AgentMigrations from "../src/AgentMigrations.ts"
import * as AgentStoreModule from "../src/AgentStore.ts"
import { AgentStore } from "../src/AgentStore.ts"

const withStore = <A, E>(body: Effect.Effect<A, E, AgentStore | SqlClient.SqlClient>) =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    return yield* body.pipe(
      Effect.provide(
        AgentStoreModule.layer.pipe(
          Layer.provideMerge(
            Database.layerClient(Redacted.make(url), {
              migrations: [AccountsMigrations.migrations, AgentMigrations.migrations]
            })
          )
        )
      )
    )
  })

const seed = (agentId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`INSERT INTO tenants (id, name) VALUES ('tn_store', 'store') ON CONFLICT DO NOTHING`
    yield* sql`INSERT INTO agents (id, tenant_id, name, config, input_fingerprint)
      VALUES (${agentId}, 'tn_store', ${agentId}, '{"model": "fake/m1"}', 'f')`
    yield* sql`INSERT INTO runner_reports (address, started_at, reported_at, state)
      VALUES ('127.0.0.1:1', now(), now(), 'active')`
  })

describe("AgentStore", () => {
  it.live("a new claim fences the previous owner's writes; they change nothing", () =>
    withStore(Effect.gen(function*() {
      const store = yield* AgentStore
      yield* seed("client_fence")
      const first = yield* store.claim("client_fence", "127.0.0.1:1")
      yield* store.fenced("client_fence", first.epoch, store.appendMessage("client_fence", 0, null, { n: 0 }))
      const second = yield* store.claim("client_fence", "127.0.0.1:2")
      expect(second.epoch).toBe(first.epoch + 1)
      expect(second.previousOwner).toBe("127.0.0.1:1")
      const stale = yield* Effect.flip(
        store.fenced("client_fence", first.epoch, store.appendMessage("client_fence", 1, null, { n: 1 }))
      )
      expect(stale).toBeInstanceOf(Fenced)
      expect(yield* store.messageCount("client_fence")).toBe(1)
      yield* store.fenced("client_fence", second.epoch, store.appendMessage("client_fence", 1, null, { n: 1 }))
      expect(yield* store.messageCount("client_fence")).toBe(2)
    })))

  it.live("work that cannot be woken waits twice as long after each failure, at most an hour, and clears on success", () =>
    withStore(Effect.gen(function*() {
      const store = yield* AgentStore
      const sql = yield* SqlClient.SqlClient
      yield* seed("client_resume")
      yield* store.insertRequest({
        agentId: "client_resume",
        id: "req_1",
        method: "prompt",
        fingerprint: "f",
        input: {}
      })
      // Held by a live runner: not for the resumer.
      yield* store.claim("client_resume", "127.0.0.1:1")
      expect(yield* store.agentsToWake(6)).toEqual([])
      // Let go with work open: due at once.
      yield* sql`UPDATE agents SET owner = NULL WHERE id = 'client_resume'`
      expect(yield* store.agentsToWake(6)).toEqual([{ agentId: "client_resume", resumeFailures: 0 }])

      const waits: Array<number> = []
      for (let failure = 1; failure <= 14; failure++) {
        yield* store.resumeFailed("client_resume")
        const [row] = yield* sql<{ failures: number; wait: number }>`
          SELECT resume_failures AS failures, extract(epoch from resume_after - now())::float8 AS wait
          FROM agents WHERE id = 'client_resume'`
        expect(row!.failures).toBe(failure)
        waits.push(Math.round(row!.wait))
      }
      expect(waits).toEqual([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600])
      // Not due until its time; the agent shows it meanwhile.
      expect(yield* store.agentsToWake(6)).toEqual([])
      const agent = yield* store.findById("client_resume")
      expect(agent._tag === "Some" && agent.value.resumeFailures).toBe(14)
      yield* sql`UPDATE agents SET resume_after = now() - interval '1 second' WHERE id = 'client_resume'`
      expect(yield* store.agentsToWake(6)).toEqual([{ agentId: "client_resume", resumeFailures: 14 }])
      yield* store.resumeSucceeded("client_resume")
      const cleared = yield* store.findById("client_resume")
      expect(cleared._tag === "Some" && [cleared.value.resumeFailures, cleared.value.resumeAfter]).toEqual([0, null])
    })))
})
