/**
 * `node scripts/bench/cluster.ts`: figures for the cluster, in one run, with
 * runner processes on one embedded PostgreSQL and the fake upstream on
 * loopback as the model provider.
 *
 * - drain: from SIGTERM of the runner owning a turn to the turn's next event on
 *   the new owner (turn_resumed, handoff drain), as a watcher long-polling
 *   another node receives it; the turn first finishes its current step, so the
 *   time from the old owner's last event to turn_resumed is shown too
 * - crash: the same for kill -9 (lease expiry, shard takeover, resume)
 * - prompts/s sustained by 1 runner and by 3 runners (BENCH_CLIENTS concurrent
 *   clients, each prompting and waiting for the outcome, for BENCH_SECONDS); the
 *   3 runners twice: clients spread over the nodes, and each agent's requests
 *   sent to its owner's node, as an agent-aware load balancer would
 * - the floor beside them, same clients and upstream: scripts/bench/floorServer.cjs,
 *   the same statements, requests and model call of a turn in plain Node; with
 *   3 runners, also in 3 processes, each agent at one of them (what three
 *   processes sharing this machine cost per turn against one, whatever runs)
 *
 * - CPU per turn: the runner processes, this process (load generator and fake
 *   upstream), and the rest of the machine (mostly PostgreSQL)
 * - SQL statements per turn on 1 runner and their planning and execution time in PostgreSQL (pg_stat_statements over the whole run,
 *   background work included), with the most frequent statements
 * - a runner's CPU per second with no load, after it (BENCH_IDLE_SECONDS, default 5): its own background work
 *
 * Environment: BENCH_CLIENTS (default 24), BENCH_SECONDS (15), BENCH_WARMUP_SECONDS (the same load first,
 * not counted, so the figures are the steady state after the JIT compiled the hot paths; default 10, for each
 * process: three processes each see a third of the load and compile their hot paths on their own, so they warm up
 * three times as long), BENCH_AGENTS (48),
 * RUNNER_LEASE_SECONDS (the nodes' lease; default 6), BENCH_ONLY ("throughput"
 * skips the drain and crash figures), BENCH_RUNNERS ("1" skips the 3-runner run),
 * BENCH_STATEMENTS (how many of the most frequent statements to list; default 12), BENCH_ROUNDS (the floor
 * and one runner measured that many times, alternated, each round's share of the floor beside it, and their
 * median, the upper of the middle two for an even K; default 1),
 * BENCH_NODE_OPTIONS (reaches the runners, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof").
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import * as Http from "@agent-runtime/testing/Http"
import * as TestCluster from "@agent-runtime/testing/TestCluster"
import * as TestWorld from "@agent-runtime/testing/TestWorld"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Redacted } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { serverFlags, serverScript } from "../serverScript.ts"
import * as BenchNode from "./benchNode.ts"

const clients = Number(process.env.BENCH_CLIENTS ?? 24)
const seconds = Number(process.env.BENCH_SECONDS ?? 15)
const warmup = Number(process.env.BENCH_WARMUP_SECONDS ?? 10)
const idleSeconds = Number(process.env.BENCH_IDLE_SECONDS ?? 5)
const agentCount = Number(process.env.BENCH_AGENTS ?? 48)
const lease = process.env.RUNNER_LEASE_SECONDS ?? "6"
const only = process.env.BENCH_ONLY
const listed = Number(process.env.BENCH_STATEMENTS ?? 12)
const roundCount = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 1))

const now = () => performance.timeOrigin + performance.now()

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0
}

/** A cluster of `size` runners on a fresh database, a tenant with the fake model and `agents` agents. */
const world = (databaseUrl: string, upstream: FakeUpstream.FakeUpstream, size: number, agents: number) =>
  Effect.gen(function*() {
    const cluster = yield* TestCluster.start({
      script: serverScript,
      flags: serverFlags,
      size,
      databaseUrl,
      env: {
        ALLOW_PRIVATE_URLS: "true",
        LOG_LEVEL: "Warn",
        RUNNER_LEASE_SECONDS: lease,
        ...(process.env.BENCH_NODE_OPTIONS === undefined ? {} : { NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS })
      }
    })
    const { token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "bench")
    const api = Http.client(cluster.members[0]!.node.rest)
    const ids = yield* Effect.forEach(
      Array.from({ length: agents }),
      () =>
        Effect.map(
          api.post("/v1/agents", { token, json: { model: "fake/m1", ttlSeconds: 3600 } }),
          (r) => r.body.id as string
        ),
      { concurrency: 8 }
    )
    return { cluster, token, ids }
  })

/** CPU seconds used so far by the machine (all cores), and by each of `pids`. */
const cpuSeconds = (pids: ReadonlyArray<number>) =>
  Effect.promise(async () => {
    const ticks = 100
    const machine = (await Fs.readFile("/proc/stat", "utf8")).split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait
    const busy = machine.slice(0, 8).reduce((sum, value, i) => i === 3 || i === 4 ? sum : sum + value, 0) / ticks
    const processes = await Promise.all(pids.map(BenchNode.cpuSeconds))
    const own = process.cpuUsage()
    return { busy, processes, own: (own.user + own.system) / 1e6 }
  })

/**
 * Statements run since the last reset, most frequent first (this connection's own left out), with the time
 * PostgreSQL spent executing them.
 */
const statements = (databaseUrl: string) =>
  BenchNode.withPg(databaseUrl, async (client) =>
    (await client.query(
      `SELECT calls::int, total_exec_time::float8 AS ms, total_plan_time::float8 AS plan_ms,
         regexp_replace(query, '\\s+', ' ', 'g') AS query
       FROM pg_stat_statements
       WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC`
    )).rows as Array<{ calls: number; ms: number; plan_ms: number; query: string }>)

/** Prompts/s: each client prompts an agent of its own set and waits for the outcome, again and again. */
const throughput = (databaseUrl: string, upstream: FakeUpstream.FakeUpstream, size: number, affinity = false) =>
  Effect.scoped(Effect.gen(function*() {
    const { cluster, ids, token } = yield* world(databaseUrl, upstream, size, agentCount)
    const owners = new Map<string, string>()
    /** Each agent's owner now, read from the journal: the node its requests go to. */
    const readOwners = Effect.map(
      BenchNode.withPg(databaseUrl, (client) => client.query("SELECT id, owner FROM agents")),
      (rows) => {
        let moved = 0
        for (const row of rows.rows) {
          const member = cluster.members.find((member) => member.runnerAddress === row.owner)
          if (member === undefined) continue
          if (owners.has(row.id) && owners.get(row.id) !== member.node.rest) moved++
          owners.set(row.id, member.node.rest)
        }
        return moved
      }
    )
    if (affinity) {
      // Each agent started once, then its requests sent to the node its owner runs on.
      const api = Http.client(cluster.members[0]!.node.rest)
      yield* Effect.forEach(ids, (id) => api.get(`/v1/agents/${id}/state`, { token }), { discard: true })
      yield* readOwners
    }
    const pids = cluster.members.map((member) => member.node.process.pid!)
    const figures = yield* load({
      databaseUrl,
      bases: cluster.live(),
      ids,
      token,
      pids,
      baseOf: (agentId) => owners.get(agentId),
      // Shards still move while the runners settle: an agent-aware balancer follows them, so the owners are
      // read again once the warm-up is over, and the agents that moved while measured are counted.
      ...(affinity ? { readOwners } : {})
    })
    // Then no load: what a runner spends per second on its own (sweeps, probes, reports), whatever the turns.
    const idleBefore = yield* cpuSeconds(pids)
    yield* Effect.sleep(`${idleSeconds} seconds`)
    const idleAfter = yield* cpuSeconds(pids)
    const idle = idleAfter.processes.reduce((sum, value, i) => sum + value - idleBefore.processes[i]!, 0)
    return {
      runners: size,
      ...(affinity ? { affinity: owners.size } : {}),
      ...figures,
      idleCpuMsPerSecondPerRunner: Number(((idle * 1000) / idleSeconds / size).toFixed(2))
    }
  }))

/** The clients' loop against `bases` (prompt, then wait for the outcome), with CPU and statements per turn. */
const load = (
  options: {
    readonly databaseUrl: string
    readonly bases: ReadonlyArray<string>
    readonly ids: ReadonlyArray<string>
    readonly token: string
    readonly pids: ReadonlyArray<number>
    /** The node each agent's requests go to (its owner's, as an agent-aware load balancer would); else any. */
    readonly baseOf?: (agentId: string) => string | undefined
    /** Reads the owners `baseOf` answers with again, answering how many agents moved since the last read. */
    readonly readOwners?: Effect.Effect<number>
  }
) =>
  Effect.gen(function*() {
    const { bases, databaseUrl, ids, token } = options
    yield* BenchNode.withPg(
      databaseUrl,
      (client) =>
        client.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").then(() =>
          client.query("SELECT pg_stat_statements_reset()")
        )
    )
    const runnerPids = options.pids
    let completed = 0
    const latencies: Array<number> = []
    const failed: Array<string> = []
    const drive = (deadline: number) =>
      Effect.forEach(Array.from({ length: clients }, (_, i) => i), (client) =>
        Effect.gen(function*() {
          const any = Http.client(bases[client % bases.length]!)
          let n = 0
          while (now() < deadline) {
            const agentId = ids[(client + n * clients) % ids.length]!
            const owner = options.baseOf?.(agentId)
            const api = owner === undefined ? any : Http.client(owner)
            n++
            const started = now()
            const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "hi" } })
            if (accepted.status !== 202) {
              failed.push(`prompt ${accepted.status} ${accepted.text.slice(0, 200)}`)
              continue
            }
            const done = yield* api.get(`/v1/agents/${agentId}/requests/${accepted.body.id}?wait=20`, { token })
            if (done.body?.state === "completed") {
              completed++
              latencies.push(now() - started)
            } else {
              failed.push(`wait ${done.status} ${done.text.slice(0, 200)}`)
            }
          }
        }), { concurrency: "unbounded", discard: true })
    // The same load first, uncounted: the figures are the steady state, after the JIT compiled the hot paths.
    // Each process compiles its own and sees its share of the load: the warm-up is as long for each of them.
    yield* drive(now() + warmup * runnerPids.length * 1000)
    completed = 0
    latencies.length = 0
    failed.length = 0
    if (options.readOwners !== undefined) yield* options.readOwners
    yield* BenchNode.withPg(databaseUrl, (client) => client.query("SELECT pg_stat_statements_reset()"))
    const cpuBefore = yield* cpuSeconds(runnerPids)
    yield* drive(now() + seconds * 1000)
    const cpuAfter = yield* cpuSeconds(runnerPids)
    const movedWhileMeasured = options.readOwners === undefined ? undefined : yield* options.readOwners
    const ran = yield* statements(databaseUrl)
    const perTurn = (calls: number) => Number((calls / Math.max(1, completed)).toFixed(2))
    const msPerTurn = (cpu: number) => Number(((cpu * 1000) / Math.max(1, completed)).toFixed(2))
    const runnersCpu = cpuAfter.processes.reduce((sum, value, i) => sum + value - cpuBefore.processes[i]!, 0)
    const ownCpu = cpuAfter.own - cpuBefore.own
    const busy = cpuAfter.busy - cpuBefore.busy
    return {
      promptsPerSecond: Math.round(completed / seconds),
      cpuMsPerTurn: {
        runners: msPerTurn(runnersCpu),
        loadAndUpstream: msPerTurn(ownCpu),
        rest: msPerTurn(busy - runnersCpu - ownCpu),
        machineBusy: Number((busy / seconds).toFixed(2))
      },
      statementsPerTurn: perTurn(ran.reduce((sum, row) => sum + row.calls, 0)),
      executionMsPerTurn: perTurn(ran.reduce((sum, row) => sum + row.ms, 0)),
      planningMsPerTurn: perTurn(ran.reduce((sum, row) => sum + row.plan_ms, 0)),
      frequentStatements: ran.slice(0, listed).map((row) => ({
        perTurn: perTurn(row.calls),
        executionMsPerTurn: perTurn(row.ms),
        planningMsPerTurn: perTurn(row.plan_ms),
        query: row.query.slice(0, 160)
      })),
      ...(movedWhileMeasured === undefined ? {} : { movedWhileMeasured }),
      failed: failed.length,
      ...(failed.length === 0 ? {} : { firstFailure: failed[0] }),
      turnLatencyMs: { p50: Math.round(percentile(latencies, 50)), p99: Math.round(percentile(latencies, 99)) }
    }
  })

/**
 * The same load against scripts/bench/floorServer.cjs: the statements, requests and model call of a turn in
 * plain Node, with the same agents and a token; in `processes` processes of their own (like runners), each
 * agent's requests sent to the one that holds it.
 */
const floor = (databaseUrl: string, upstream: FakeUpstream.FakeUpstream, processes = 1) =>
  Effect.scoped(Effect.gen(function*() {
    const ids = Array.from({ length: agentCount }, (_, i) => `client_floor${i}`)
    const { baseOf, bases, pids, token } = yield* BenchNode.startFloor(databaseUrl, upstream, ids, processes)
    return yield* load({ databaseUrl, bases, ids, token, pids, baseOf })
  }))

type FloorFigures = Effect.Effect.Success<ReturnType<typeof floor>>
type RunnerFigures = Effect.Effect.Success<ReturnType<typeof throughput>>

/** One runner's turns a second as a share of the floor's. */
const shareOf = (one: RunnerFigures, bare: FloorFigures) =>
  Number((one.promptsPerSecond / Math.max(1, bare.promptsPerSecond)).toFixed(2))

/** The runner that owns the agent now, read from the journal. */
const ownerOf = (databaseUrl: string, agentId: string) =>
  BenchNode.withPg(
    databaseUrl,
    async (client) =>
      (await client.query("SELECT owner FROM agents WHERE id = $1", [agentId])).rows[0]?.owner as string | undefined
  )

/**
 * An agent's events as a watcher on `base` long-polls them, with arrival times: from the cursor on, jumping
 * to the oldest event the owner holds when the cursor is behind it (after a crash).
 */
const follow = (base: string, agentId: string, token: string, from: number) => {
  const events: Array<{ at: number; data: any }> = []
  let stopped = false
  const run = async () => {
    let cursor = from
    while (!stopped) {
      try {
        const response = await fetch(`${base}/v1/agents/${agentId}/events?poll=1&wait=5`, {
          headers: { authorization: `Bearer ${token}`, "last-event-id": String(cursor) }
        })
        const body: any = await response.json()
        if (response.status === 409) {
          cursor = Number(/oldest (\d+)/.exec(body.error)?.[1]) - 1
          continue
        }
        for (const event of body.events ?? []) {
          events.push({ at: now(), data: event.data })
          cursor = event.id
        }
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
  }
  void run()
  return { events, stop: () => void (stopped = true) }
}

const typeOf = (entry: { data?: any }) => entry.data?.type === "event" ? entry.data.event.type : entry.data?.type

/** A turn on the runner that owns `agentId`, cut by `signal` mid-stream; times to the resumed turn. */
const handover = (databaseUrl: string, upstream: FakeUpstream.FakeUpstream, signal: "SIGTERM" | "SIGKILL") =>
  Effect.scoped(Effect.gen(function*() {
    const { cluster, ids, token } = yield* world(databaseUrl, upstream, 3, 12)
    const api = Http.client(cluster.members[0]!.node.rest)
    // Wake the agents so each has an owner, then pick one and a node that does not own it.
    yield* Effect.forEach(ids, (id) => api.get(`/v1/agents/${id}/state`, { token }), { concurrency: 4 })
    const agentId = ids[0]!
    const owner = yield* ownerOf(databaseUrl, agentId)
    const victim = cluster.members.findIndex((member) => member.runnerAddress === owner)
    const observer = cluster.members.find((_, i) => i !== victim)!.node.rest
    const { cursor } = (yield* Http.client(observer).get(`/v1/agents/${agentId}/state`, { token })).body
    const watcher = follow(observer, agentId, token, cursor)
    // Two steps: a streamed response with a tool call, then the reply; the cut lands in the first step.
    upstream.script({
      text: Array.from({ length: 20 }, (_, i) => `w${i}`).join(" "),
      toolCalls: [{ name: "lookup", arguments: { q: "x" } }],
      tokenDelayMs: 50
    })
    upstream.script({ text: "after the move" })
    const accepted =
      (yield* Http.client(observer).post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "go" } }))
        .body
    while (!watcher.events.some((entry) => typeOf(entry) === "message_update")) yield* Effect.sleep("10 millis")
    yield* Effect.sleep("300 millis")
    // Shards still settle while the runners join: cut the runner that owns the agent now.
    const ownerNow = yield* ownerOf(databaseUrl, agentId)
    const running = cluster.members.findIndex((member) => member.runnerAddress === ownerNow)
    const cut = now()
    yield* cluster.members[running === -1 ? victim : running]!.node.signal(signal)
    const done = (yield* Http.client(observer).get(`/v1/agents/${agentId}/requests/${accepted.id}?wait=25`, { token }))
      .body
    yield* Effect.sleep("500 millis")
    watcher.stop()
    const resumed = watcher.events.find((entry) => typeOf(entry) === "turn_resumed")
    // The old owner's last word before the move: the end of the step it finished (drain) or was in (crash).
    const before = watcher.events.filter((entry) => entry.at < (resumed?.at ?? 0) && typeOf(entry) !== "turn_resumed")
      .at(-1)
    return {
      signal,
      completed: done.state === "completed",
      reply: done.outcome?.result?.reply,
      handoff: resumed?.data?.event?.handoff ?? null,
      signalToResumedMs: resumed === undefined ? null : Math.round(resumed.at - cut),
      lastOldEventToResumedMs: resumed !== undefined && before !== undefined ? Math.round(resumed.at - before.at) : null
    }
  }))

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "bench-cluster-")))
  const postgres = yield* EmbeddedPostgres.start({
    dataDir,
    postgresFlags: [
      "-c",
      "fsync=off",
      "-c",
      "synchronous_commit=off",
      "-c",
      "max_connections=300",
      "-c",
      "shared_preload_libraries=pg_stat_statements",
      "-c",
      "pg_stat_statements.track_planning=on"
    ]
  })
  const database = (name: string) => Effect.map(postgres.createDatabase(name), Redacted.value)
  const upstream = yield* FakeUpstream.start({ maxRecorded: 1000 })

  const drain = only === "throughput" ? null : yield* handover(yield* database("drain"), upstream, "SIGTERM")
  yield* Console.log(JSON.stringify({ drain }))
  const crash = only === "throughput" ? null : yield* handover(yield* database("crash"), upstream, "SIGKILL")
  yield* Console.log(JSON.stringify({ crash }))
  // The floor and one runner, alternated: the machine drifts between stages, and each round's share is taken
  // of the floor just beside it. The figures below are the first round's.
  const rounds: Array<
    {
      readonly floor: FloorFigures
      readonly one: RunnerFigures
      readonly oneOfFloor: number
      readonly cpuOfFloor: number
    }
  > = []
  for (let round = 0; round < roundCount; round++) {
    const suffix = round === 0 ? "" : `_${round}`
    const floorHere = yield* floor(yield* database(`floor${suffix}`), upstream)
    yield* Console.log(JSON.stringify({ floor: floorHere }, null, 2))
    const oneHere = yield* throughput(yield* database(`one${suffix}`), upstream, 1)
    yield* Console.log(JSON.stringify({ one: oneHere }, null, 2))
    rounds.push({
      floor: floorHere,
      one: oneHere,
      oneOfFloor: shareOf(oneHere, floorHere),
      cpuOfFloor: BenchNode.ratio(oneHere.cpuMsPerTurn.runners, floorHere.cpuMsPerTurn.runners)
    })
  }
  const { floor: bare, one } = rounds[0]!
  const three = process.env.BENCH_RUNNERS === "1" ? null : yield* throughput(yield* database("three"), upstream, 3)
  const threeToOwners = process.env.BENCH_RUNNERS === "1"
    ? null
    : yield* throughput(yield* database("owners"), upstream, 3, true)
  // What three processes on this machine cost per turn against one, whatever they run.
  const threeFloors = process.env.BENCH_RUNNERS === "1" ? null : yield* floor(yield* database("floors"), upstream, 3)
  const figures = {
    leaseSeconds: Number(lease),
    drain,
    crash,
    throughput: {
      clients,
      seconds,
      agents: agentCount,
      floor: bare,
      threeFloors,
      one,
      three,
      threeToOwners,
      ratio: three === null ? null : Number((three.promptsPerSecond / Math.max(1, one.promptsPerSecond)).toFixed(2)),
      ratioToOwners: threeToOwners === null
        ? null
        : Number((threeToOwners.promptsPerSecond / Math.max(1, one.promptsPerSecond)).toFixed(2)),
      oneOfFloor: shareOf(one, bare),
      ...(roundCount === 1 ? {} : {
        rounds: rounds.map((round) => ({
          floor: { promptsPerSecond: round.floor.promptsPerSecond, cpuMsPerTurn: round.floor.cpuMsPerTurn.runners },
          one: { promptsPerSecond: round.one.promptsPerSecond, cpuMsPerTurn: round.one.cpuMsPerTurn.runners },
          oneOfFloor: round.oneOfFloor,
          cpuOfFloor: round.cpuOfFloor
        })),
        oneOfFloorMedian: percentile(rounds.map((round) => round.oneOfFloor), 50),
        cpuOfFloorMedian: percentile(rounds.map((round) => round.cpuOfFloor), 50)
      }),
      // CPU per turn: three against one, the runners' and the floor's.
      threeCpuOfOne: three === null ? null : BenchNode.ratio(three.cpuMsPerTurn.runners, one.cpuMsPerTurn.runners),
      threeToOwnersCpuOfOne: threeToOwners === null
        ? null
        : BenchNode.ratio(threeToOwners.cpuMsPerTurn.runners, one.cpuMsPerTurn.runners),
      threeFloorsCpuOfOne: threeFloors === null
        ? null
        : BenchNode.ratio(threeFloors.cpuMsPerTurn.runners, bare.cpuMsPerTurn.runners)
    }
  }
  yield* Console.log(JSON.stringify(figures, null, 2))
  yield* Effect.promise(() => Fs.rm(dataDir, { recursive: true, force: true }))
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
