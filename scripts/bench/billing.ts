/**
 * `node scripts/bench/billing.ts`: what prepaid billing costs a turn, in one
 * run on one node (its own process, embedded PostgreSQL, the fake upstream
 * answering at once), so the ratio holds on a noisy machine.
 *
 * Two tenants on the node, both on the operator's platform key for the same
 * catalog model: one not billed, the other prepaid, so each of its turns is
 * admitted against its credit, checked before each model request, and
 * charged (the response's cost with its usage record, the agent time with
 * the turn's end). Phases alternate off, on, off, on after a warm-up of
 * both; each figure is the better of its two phases. Then the ledger is
 * checked against the usage records: every response charged once.
 *
 * Environment: BENCH_CLIENTS (default 16), BENCH_PER_PHASE (turns per phase, default 600), BENCH_WARMUP
 * (default 200).
 */
import * as PrepaidTenant from "@agent-runtime/testing/PrepaidTenant"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as BenchNode from "./benchNode.ts"

const { better, json, ratio, turns } = BenchNode

const clients = Number(process.env.BENCH_CLIENTS ?? 16)
const perPhase = Number(process.env.BENCH_PER_PHASE ?? 600)
const warmup = Number(process.env.BENCH_WARMUP ?? 200)

const program = Effect.scoped(Effect.gen(function*() {
  const { databaseUrl, node, token } = yield* BenchNode.start("billing", {
    maxRecorded: 1000,
    env: PrepaidTenant.catalogEnv
  })
  const base = node.rest
  const payingToken = yield* Effect.promise(() =>
    json(`${base}/v1/admin/tenants`, node.operatorToken, { method: "POST", body: { name: "paying" } })
  ).pipe(Effect.map((tenant) => tenant.token as string))
  // Both on the platform key; only the second is billed.
  const payingId = yield* PrepaidTenant.make(base, node.operatorToken, payingToken)
  const agentsOf = (owner: string) =>
    Promise.all(
      Array.from({ length: clients }, () =>
        json(`${base}/v1/agents`, owner, { method: "POST", body: { model: PrepaidTenant.model, mounts: [] } })
          .then((created) =>
            created.id as string
          ))
    )
  const [free, paying] = yield* Effect.promise(() => Promise.all([agentsOf(token), agentsOf(payingToken)]))
  const [offA, onA, offB, onB] = yield* Effect.promise(async () => {
    await turns(base, token, free, warmup)
    await turns(base, payingToken, paying, warmup)
    return [
      await turns(base, token, free, perPhase),
      await turns(base, payingToken, paying, perPhase),
      await turns(base, token, free, perPhase),
      await turns(base, payingToken, paying, perPhase)
    ]
  })
  const off = better(offA!, offB!)
  const on = better(onA!, onB!)
  const charges = yield* PrepaidTenant.charges(databaseUrl, payingId)
  yield* Console.log(JSON.stringify(
    {
      clients,
      perPhase,
      billingOff: off,
      billingOn: on,
      onPerOff: {
        throughput: ratio(on.perSecond, off.perSecond),
        p50: ratio(on.p50, off.p50),
        p99: ratio(on.p99, off.p99)
      },
      phases: { off: [offA, offB], on: [onA, onB] },
      ledger: charges
    },
    null,
    2
  ))
}))

NodeRuntime.runMain(program)
