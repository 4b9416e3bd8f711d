/**
 * A runner whose lease renewal is slow keeps its shards while its lease lasts (docs/cluster.md, the
 * @effect/cluster patch): with the runner's row held locked by another session for longer than a renewal may
 * take, the renewal times out, the runner says so, and neither lets its shards go nor interrupts its agent. A
 * turn running through the stall finishes on the same claim.
 */
import { FakeUpstream, TestDatabase, TestNode, TestWorld } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"

/** The lease; each renewal has a fifth of it (1.2 s). */
const leaseSeconds = 6
/**
 * How long the runner's row stays locked: twice a renewal's time and a little more, so that at least one renewal
 * times out whenever the lock begins, and the lease (6 s) still outlasts it.
 */
const heldSeconds = 3

it.scopedLive(
  "a lease renewal slower than its time keeps the runner's shards while the lease lasts",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const node = yield* TestNode.start({
        databaseUrl,
        env: { ALLOW_PRIVATE_URLS: "true", RUNNER_LEASE_SECONDS: String(leaseSeconds) }
      })
      const { api, token } = yield* TestWorld.tenantWithModel({ node, upstream }, "lease")
      const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
      const settled = (requestId: string) =>
        Effect.map(
          api.get(`/v1/agents/${agentId}/requests/${requestId}?wait=25`, { token }),
          (response) => response.body
        )

      upstream.script({ text: "before the stall" })
      const first = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "one" } })).body
      expect(yield* settled(first.id)).toMatchObject({ state: "completed" })
      const epochOf = Effect.map(
        TestDatabase.query(databaseUrl, `SELECT owner_epoch FROM agents WHERE id = '${agentId}'`),
        (rows) => Number(rows[0]!.owner_epoch)
      )
      const epoch = yield* epochOf

      // One simple query, so the lock is held for the whole sleep and let go at its end.
      const held = yield* Effect.fork(TestDatabase.query(
        databaseUrl,
        `BEGIN; SELECT 1 FROM cluster_runners FOR UPDATE; SELECT pg_sleep(${heldSeconds}); COMMIT`
      ))
      yield* Effect.sleep("300 millis")
      // A turn that runs through the stall: five tokens, 400 ms apart.
      upstream.script({ text: "one two three four five", tokenDelayMs: 400 })
      const second = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "two" } })).body
      yield* Fiber.join(held)
      expect(yield* settled(second.id)).toMatchObject({ state: "completed" })
      // A renewal after the stall, so that a late decision to let the shards go would have been made.
      yield* Effect.sleep(`${(leaseSeconds / 5) * 2} seconds`)

      const output = node.output()
      expect(output).not.toContain("Shard lock storage is unhealthy")
      expect(yield* epochOf).toBe(epoch)
      // The stall did reach the renewal: it timed out, and the runner said why it kept its shards.
      expect(output).toContain("the shards are kept while the lease lasts")
      const history = (yield* api.get(`/v1/agents/${agentId}/history`, { token })).body
      expect(JSON.stringify(history)).toContain("one two three four five")
      // The agent answers on the same node and claim afterwards, too.
      upstream.script({ text: "after the stall" })
      const third = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "three" } })).body
      expect(yield* settled(third.id)).toMatchObject({ state: "completed" })
      expect(yield* epochOf).toBe(epoch)
    }),
  { timeout: 90_000 }
)
