/**
 * `node scripts/bench/runs.ts`: stateless runs beside agent turns, in one run
 * on one node (its own process, embedded PostgreSQL, the fake upstream
 * answering at once), so their ratio holds on a noisy machine.
 *
 * - turns/s: BENCH_CLIENTS clients, each with an agent of its own, prompting it and long-polling the request
 *   until it completes, one turn after another
 * - runs/s: the same clients, each creating runs with `wait` (one call: the run answered ended), one after
 *   another
 * - the node's CPU per turn and per run, and each phase's latency p50/p99
 * - the agents (runs included) the runner holds right after the phases and 30 s later: ended runs are let go
 *   10 s after they go idle, the agents stay
 *
 * The phases go turns, runs, turns, runs after a warm-up of both, and each figure is the better of its two
 * phases. Environment: BENCH_CLIENTS (default 16), BENCH_PER_PHASE (operations per phase, default 800),
 * BENCH_WARMUP (default 200).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as BenchNode from "./benchNode.ts"

const { json, percentile } = BenchNode

const clients = Number(process.env.BENCH_CLIENTS ?? 16)
const perPhase = Number(process.env.BENCH_PER_PHASE ?? 800)
const warmup = Number(process.env.BENCH_WARMUP ?? 200)

interface Phase {
  readonly perSecond: number
  readonly cpuMsPer: number
  readonly p50: number
  readonly p99: number
}

/** `count` operations over `clients` loops; each loop calls `one(client)` until the count is taken. */
const phase = async (pid: number, count: number, one: (client: number) => Promise<void>): Promise<Phase> => {
  let left = count
  const latencies: Array<number> = []
  const cpuBefore = await BenchNode.cpuSeconds(pid)
  const started = performance.now()
  await Promise.all(Array.from({ length: clients }, async (_, client) => {
    while (left > 0) {
      left--
      const at = performance.now()
      await one(client)
      latencies.push(performance.now() - at)
    }
  }))
  const seconds = (performance.now() - started) / 1000
  const cpu = (await BenchNode.cpuSeconds(pid)) - cpuBefore
  return {
    perSecond: Math.round((count / seconds) * 10) / 10,
    cpuMsPer: Math.round((cpu * 1000 / count) * 100) / 100,
    p50: Math.round(percentile(latencies, 50) * 10) / 10,
    p99: Math.round(percentile(latencies, 99) * 10) / 10
  }
}

const better = (a: Phase, b: Phase) => a.perSecond >= b.perSecond ? a : b

const program = Effect.scoped(Effect.gen(function*() {
  const { node, token } = yield* BenchNode.start("runs", { maxRecorded: 1000 })
  const base = node.rest
  const pid = node.process.pid!
  const agents = yield* Effect.promise(() =>
    Promise.all(
      Array.from({ length: clients }, () =>
        json(`${base}/v1/agents`, token, { method: "POST", body: { model: "fake/m1", mounts: [] } }).then(
          (created) =>
            created.id as string
        ))
    )
  )
  let n = 0
  const turn = async (client: number) => {
    const agentId = agents[client]!
    const request = await json(`${base}/v1/agents/${agentId}/prompt`, token, {
      method: "POST",
      body: { text: `turn ${n++}` }
    })
    let record = request
    while (record.state !== "completed") {
      record = await json(`${base}/v1/agents/${agentId}/requests/${request.id}?wait=25`, token)
    }
  }
  const run = async () => {
    let current = await json(`${base}/v1/runs`, token, {
      method: "POST",
      body: { model: "fake/m1", input: `run ${n++}`, wait: 60 }
    })
    while (current.status === "running") current = await json(`${base}/v1/runs/${current.id}?wait=25`, token)
    if (current.status !== "completed") throw new Error(`run ${current.id} ended ${current.status}`)
  }
  yield* Effect.promise(async () => {
    await phase(pid, warmup, turn)
    await phase(pid, warmup, run)
  })
  const [turnsA, runsA, turnsB, runsB] = yield* Effect.promise(async () => [
    await phase(pid, perPhase, turn),
    await phase(pid, perPhase, run),
    await phase(pid, perPhase, turn),
    await phase(pid, perPhase, run)
  ])
  // Ended runs are let go soon after (their entity's idle time): the agents the runner holds, as it reports them.
  const held = () =>
    json(`${base}/v1/admin/runners`, node.operatorToken).then((listing) => listing.data[0]?.agents as number)
  const heldAfterPhases = yield* Effect.promise(held)
  yield* Effect.sleep("30 seconds")
  const heldSettled = yield* Effect.promise(held)
  const turns = better(turnsA!, turnsB!)
  const runs = better(runsA!, runsB!)
  yield* Console.log(JSON.stringify(
    {
      clients,
      perPhase,
      turns,
      runs,
      runsPerTurnThroughput: Math.round((runs.perSecond / turns.perSecond) * 100) / 100,
      runCpuPerTurnCpu: Math.round((runs.cpuMsPer / turns.cpuMsPer) * 100) / 100,
      agentsHeld: { afterPhases: heldAfterPhases, settled30sLater: heldSettled },
      phases: { turns: [turnsA, turnsB], runs: [runsA, runsB] }
    },
    null,
    2
  ))
}))

NodeRuntime.runMain(program)
