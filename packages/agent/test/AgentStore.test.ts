/**
 * The journal's bookkeeping on a real PostgreSQL: the ownership epoch that
 * fences a stale owner's writes, the resume backoff of work that could not
 * be woken, and the one-statement accept of a prompt.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { BillingMigrations } from "@agent-runtime/billing"
import { Database } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { SqlClient, type Statement } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Option, Redacted, Schedule, Stream } from "effect"
import { Fenced } from "../src/AgentError.ts"
import * as AgentMigrations from "../src/AgentMigrations.ts"
import * as AgentStoreModule from "../src/AgentStore.ts"
import { AgentStore } from "../src/AgentStore.ts"
import * as Announcements from "../src/Announcements.ts"
import * as Arrivals from "../src/Arrivals.ts"

const withStore = <A, E>(body: Effect.Effect<A, E, AgentStore | SqlClient.SqlClient | PgClient.PgClient>) =>
  Effect.gen(function*() {
    const url = yield* TestDatabase.make
    return yield* body.pipe(
      Effect.provide(
        AgentStoreModule.layer.pipe(
          Layer.provideMerge(
            Database.layerClient(Redacted.make(url), {
              migrations: [AccountsMigrations.migrations, BillingMigrations.migrations, AgentMigrations.migrations]
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
      expect(yield* store.agentsToWake(6, 30)).toEqual([])
      // Unless a request of it stayed queued past 30 s: its runner may never have been told of it.
      yield* sql`UPDATE agent_requests SET started_at = now() - interval '31 seconds' WHERE agent_id = 'client_resume'`
      expect(yield* store.agentsToWake(6, 30)).toEqual([{ agentId: "client_resume", resumeFailures: 0 }])
      yield* sql`UPDATE agent_requests SET state = 'running', began_at = now() WHERE agent_id = 'client_resume'`
      expect(yield* store.agentsToWake(6, 30)).toEqual([])
      // Its runner restarted under the same address since the turn began: the turn's process is gone.
      yield* sql`UPDATE runner_reports SET started_at = now() + interval '1 second' WHERE address = '127.0.0.1:1'`
      expect(yield* store.agentsToWake(6, 30)).toEqual([{ agentId: "client_resume", resumeFailures: 0 }])
      yield* sql`UPDATE runner_reports SET started_at = now() - interval '1 minute' WHERE address = '127.0.0.1:1'`
      yield* sql`UPDATE agent_requests SET state = 'queued', started_at = now() WHERE agent_id = 'client_resume'`
      // Let go with work open: due at once.
      yield* sql`UPDATE agents SET owner = NULL WHERE id = 'client_resume'`
      expect(yield* store.agentsToWake(6, 30)).toEqual([{ agentId: "client_resume", resumeFailures: 0 }])

      const waits: Array<number> = []
      for (let failure = 1; failure <= 17; failure++) {
        yield* store.resumeFailed("client_resume")
        // Another node's sweep failing in the same window adds nothing.
        yield* store.resumeFailed("client_resume")
        const [row] = yield* sql<{ failures: number; wait: number }>`
          SELECT resume_failures AS failures, extract(epoch from resume_after - now())::float8 AS wait
          FROM agents WHERE id = 'client_resume'`
        expect(row!.failures).toBe(failure)
        waits.push(Math.round(row!.wait))
        // The window ends: the next sweep's attempt is due.
        yield* sql`UPDATE agents SET resume_after = now() WHERE id = 'client_resume'`
      }
      expect(waits).toEqual([1, 1, 1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600])
      yield* sql`UPDATE agents SET resume_after = now() + interval '1 hour' WHERE id = 'client_resume'`
      // Not due until its time; the agent shows it meanwhile.
      expect(yield* store.agentsToWake(6, 30)).toEqual([])
      const agent = yield* store.findById("client_resume")
      expect(agent._tag === "Some" && agent.value.resumeFailures).toBe(17)
      yield* sql`UPDATE agents SET resume_after = now() - interval '1 second' WHERE id = 'client_resume'`
      expect(yield* store.agentsToWake(6, 30)).toEqual([{ agentId: "client_resume", resumeFailures: 17 }])
      yield* store.resumeSucceeded("client_resume")
      const cleared = yield* store.findById("client_resume")
      expect(cleared._tag === "Some" && [cleared.value.resumeFailures, cleared.value.resumeAfter]).toEqual([0, null])
    })))

  it.live("acceptFor records a prompt in the statement that checks the caller and the agent, only when nothing needs checking first", () =>
    withStore(Effect.gen(function*() {
      const store = yield* AgentStore
      const sql = yield* SqlClient.SqlClient
      const caller = sql`SELECT 'tn_store'::text AS tenant_id`
      const request = (agentId: string, id: string) => ({
        agentId,
        id,
        method: "prompt",
        fingerprint: `fp_${id}`,
        input: { text: "hi", metadata: { ticket: "T-1" } }
      })
      const recorded = (agentId: string) =>
        Effect.map(
          sql<{ id: string }>`SELECT id FROM agent_requests WHERE agent_id = ${agentId} ORDER BY seq`,
          (rows) => rows.map((row) => row.id)
        )
      yield* seed("client_accept")

      // A credential that names no tenant: refused, nothing recorded.
      const refused = yield* store.acceptFor(
        sql`SELECT NULL::text AS tenant_id WHERE false`,
        request("client_accept", "req_0"),
        {
          allowDisconnected: false
        }
      )
      expect(Option.isNone(refused)).toBe(true)
      // Another tenant's agent, or none by that id: no agent, nothing recorded.
      const foreign = yield* store.acceptFor(
        sql`SELECT 'tn_other'::text AS tenant_id`,
        request("client_accept", "req_0"),
        {
          allowDisconnected: false
        }
      )
      expect(Option.map(foreign, (found) => Option.isNone(found.agent))).toEqual(Option.some(true))
      expect(yield* recorded("client_accept")).toEqual([])

      // Recorded, as insertRequest records it; again under the same id, the row already there.
      const accepted = Option.getOrThrow(
        yield* store.acceptFor(caller, request("client_accept", "req_1"), {
          allowDisconnected: false
        })
      )
      const row = Option.getOrThrow(accepted.request)
      expect(row).toEqual(Option.getOrThrow(yield* store.getRequest("client_accept", "req_1")))
      expect(row).toMatchObject({
        agentId: "client_accept",
        id: "req_1",
        state: "queued",
        fingerprint: "fp_req_1",
        input: { text: "hi", metadata: { ticket: "T-1" } },
        steeredInto: null,
        beganAt: null
      })
      const again = Option.getOrThrow(
        yield* store.acceptFor(caller, { ...request("client_accept", "req_1"), fingerprint: "other" }, {
          allowDisconnected: false
        })
      )
      expect(Option.getOrThrow(again.request)).toEqual(row)
      // Two at once under one id: one row, both answered with it.
      const both = yield* Effect.all(
        [1, 2].map(() => store.acceptFor(caller, request("client_accept", "req_2"), { allowDisconnected: false })),
        { concurrency: "unbounded" }
      )
      const ids = both.map((found) => Option.getOrThrow(Option.getOrThrow(found).request).seq)
      expect(ids[0]).toBe(ids[1])
      expect(yield* recorded("client_accept")).toEqual(["req_1", "req_2"])

      // What a prompt must check first leaves the recording to the caller, after its checks: the agent is there.
      const checked = (change: Statement.Fragment, options: { readonly allowDisconnected: boolean }, id: string) =>
        Effect.gen(function*() {
          yield* sql`UPDATE agents SET ${change} WHERE id = 'client_accept'`
          const found = Option.getOrThrow(yield* store.acceptFor(caller, request("client_accept", id), options))
          yield* sql`UPDATE agents SET config = '{"model": "fake/m1"}', application_tools = NULL, expires_at = NULL
            WHERE id = 'client_accept'`
          return { agent: Option.isSome(found.agent), recorded: Option.isSome(found.request) }
        })
      const spendLimit = sql`config = '{"model": "fake/m1", "spendLimit": {"usd": 1, "since": 0}}'`
      expect(yield* checked(spendLimit, { allowDisconnected: false }, "req_3")).toEqual({
        agent: true,
        recorded: false
      })
      const tools = sql`application_tools = '[{"name": "lookup", "description": "Looks up", "parameters": {}}]'`
      expect(yield* checked(tools, { allowDisconnected: false }, "req_4")).toEqual({ agent: true, recorded: false })
      // Without the application, its tools need no check.
      expect(yield* checked(tools, { allowDisconnected: true }, "req_5")).toEqual({ agent: true, recorded: true })
      const expired = sql`expires_at = now() - interval '1 second'`
      expect(yield* checked(expired, { allowDisconnected: false }, "req_6")).toEqual({ agent: true, recorded: false })
      expect(yield* recorded("client_accept")).toEqual(["req_1", "req_2", "req_5"])
    })))

  it.live("a request recorded with an announcement is announced as it commits, once; one too large by its seq", () =>
    withStore(
      Effect.gen(function*() {
        const store = yield* AgentStore
        const sql = yield* SqlClient.SqlClient
        const pg = yield* PgClient.PgClient
        yield* seed("client_announce")
        const heard: Array<string> = []
        yield* pg.listen(Announcements.queuedChannel).pipe(
          Stream.runForEach((payload) => Effect.sync(() => heard.push(payload))),
          Effect.forkScoped
        )
        // Listening once a notification sent after it comes back.
        yield* sql`SELECT pg_notify(${Announcements.queuedChannel}, 'probe_test')`.pipe(
          Effect.zipRight(Effect.sleep("50 millis")),
          Effect.repeat({ until: () => heard.includes("probe_test") }),
          Effect.timeout("5 seconds")
        )
        const announced = () => heard.filter((payload) => payload !== "probe_test").map(Arrivals.announcementOf)
        const request = (id: string, text: string) => ({
          agentId: "client_announce",
          id,
          method: "prompt",
          fingerprint: `fp_${id}`,
          input: { text }
        })
        const caller = sql`SELECT 'tn_store'::text AS tenant_id`

        const accepted = Option.getOrThrow(
          yield* store.acceptFor(caller, request("req_1", "hi"), {
            allowDisconnected: false,
            announce: { whileRunning: "steer" }
          })
        )
        // The same id again, and a row recorded without an announcement: nothing more is announced.
        yield* store.acceptFor(caller, request("req_1", "hi"), { allowDisconnected: false, announce: {} })
        yield* store.insertRequest(request("req_2", "quiet"))
        const large = yield* store.insertRequest(request("req_3", "x".repeat(10_000)), {})
        yield* Effect.sync(() => announced().length).pipe(
          Effect.repeat({ until: (count) => count >= 2, schedule: Schedule.spaced("20 millis") }),
          Effect.timeout("5 seconds")
        )
        yield* Effect.sleep("200 millis")
        expect(announced()).toEqual([
          {
            agentId: "client_announce",
            request: Either.right(Option.getOrThrow(accepted.request)),
            whileRunning: "steer"
          },
          { agentId: "client_announce", request: Either.left(large.seq), whileRunning: undefined }
        ])
      }).pipe(Effect.scoped)
    ))
})
