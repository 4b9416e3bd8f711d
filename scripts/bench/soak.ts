/**
 * `node scripts/bench/soak.ts` (`npm run soak`): one node under a steady, mixed load for a bounded time, to see
 * whether it stays healthy — memory levels off, the event loop stays responsive, nothing piles up, and
 * every accepted request completes.
 *
 * Real parts: the node is its own process (`TestNode`) on an embedded PostgreSQL (fsync off); the fake
 * upstream on loopback is the model provider; the page server (`ToolServer`) is what the agents' `web_fetch`
 * builtin reads (the node runs with ALLOW_PRIVATE_URLS so it may fetch from loopback). The load, at fixed rates:
 *
 * - prompts to random agents (queued behind a running turn when one runs); each prompt queues, on the fake
 *   upstream, one streamed step that calls `web_fetch` on the page server; the turn's next model request finds
 *   nothing queued and gets the fake's short "ok", which ends the turn
 * - steers (`whileRunning: "steer"`) and aborts (POST .../abort) aimed at agents with a turn in flight
 * - watchers that come and go: server-sent event streams and long polls (`poll=1&wait=N`) with random lifetimes;
 *   half of the dropped streams reconnect with Last-Event-ID after a short pause, the others move to another agent
 *
 * Every accepted request is followed (GET .../requests/{id}?wait=25) until it completes; after the load stops
 * the script waits for the rest. Every SOAK_SAMPLE_SECONDS it samples the node: RSS and open file descriptors
 * from /proc, PostgreSQL connections from pg_stat_activity, and from inside the node — through a probe loaded
 * with NODE_OPTIONS=--import (scripts/bench/soak-probe.ts), so no product code changes — event-loop delay,
 * event-loop utilization, GC time, heap and active resources; and the agents' history in the journal (what
 * awake entities also hold in memory). After the load: what the replay buffers hold (read through the API),
 * the table over time, the counts, open handles and PostgreSQL connections once idle, the live heap after a
 * forced collection while idle, and a verdict on memory (the RSS slope of the last third of the run against the
 * first third, after a warm-up; the same for the live heap).
 *
 * Environment: SOAK_SECONDS (600), SOAK_AGENTS (200), SOAK_WATCHERS (100 at any time), SOAK_PROMPTS_PER_SECOND
 * (6), SOAK_STEERS_PER_SECOND (1), SOAK_ABORTS_PER_SECOND (0.5), SOAK_SAMPLE_SECONDS (10), SOAK_WARMUP_SECONDS
 * (60, at most a fifth of the run), SOAK_MAX_OUTSTANDING (150: prompts are held back while this many requests
 * are open, so a node that falls behind is not buried), SOAK_DRAIN_SECONDS (120: how long to wait for open
 * requests after the load stops), SOAK_IDLE_SECONDS (15: how long the node then idles, sampled, before the
 * final figures; past 300 its agents' entities have stopped), SOAK_NODE_OPTIONS (more options for the node,
 * e.g. --cpu-prof).
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import * as Http from "@agent-runtime/testing/Http"
import * as TestNode from "@agent-runtime/testing/TestNode"
import * as ToolServer from "@agent-runtime/testing/ToolServer"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Duration, Effect, Either, FiberSet, Redacted } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import Pg from "pg"
import { serverFlags, serverScript } from "../serverScript.ts"
import * as BenchNode from "./benchNode.ts"

const env = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback)
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number ≥ 0`)
  return value
}
const seconds = env("SOAK_SECONDS", 600)
const agentCount = Math.max(1, Math.floor(env("SOAK_AGENTS", 200)))
const watcherCount = Math.floor(env("SOAK_WATCHERS", 100))
const promptsPerSecond = env("SOAK_PROMPTS_PER_SECOND", 6)
const steersPerSecond = env("SOAK_STEERS_PER_SECOND", 1)
const abortsPerSecond = env("SOAK_ABORTS_PER_SECOND", 0.5)
const sampleSeconds = Math.max(1, env("SOAK_SAMPLE_SECONDS", 10))
const warmupSeconds = Math.min(env("SOAK_WARMUP_SECONDS", 60), seconds / 5)
const maxOutstanding = env("SOAK_MAX_OUTSTANDING", 150)
const drainSeconds = env("SOAK_DRAIN_SECONDS", 120)
const idleSeconds = Math.max(15, env("SOAK_IDLE_SECONDS", 15))

const probeModule = fileURLToPath(new URL("./soak-probe.ts", import.meta.url))
/** A provider lists at most 200 models; each agent gets a model of its own (see `modelOf`). */
const modelsPerProvider = 200

const now = () => performance.timeOrigin + performance.now()
const random = (low: number, high: number) => low + Math.random() * (high - low)
const pick = <A>(items: ReadonlyArray<A>) => items[Math.floor(Math.random() * items.length)]!
const MiB = 1024 * 1024

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0
}

/** Least-squares slope of y over x. */
const slope = (points: ReadonlyArray<readonly [number, number]>) => {
  if (points.length < 2) return 0
  const mx = points.reduce((s, [x]) => s + x, 0) / points.length
  const my = points.reduce((s, [, y]) => s + y, 0) / points.length
  const sxy = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0)
  const sxx = points.reduce((s, [x]) => s + (x - mx) ** 2, 0)
  return sxx === 0 ? 0 : sxy / sxx
}

/**
 * Each agent has a model of its own (`a<i>` on provider `soak<i / 200>`), so the step scripted for its prompt
 * is taken by its own turn and not by whichever agent asks the fake next.
 */
const modelOf = (index: number) => ({
  provider: `soak${Math.floor(index / modelsPerProvider)}`,
  model: `a${index}`
})

// ---------------------------------------------------------------------------
// Counts

interface Outstanding {
  readonly agent: number
  readonly kind: "prompt" | "steer"
  readonly acceptedAt: number
}

const counts = {
  prompts: { sent: 0, accepted: 0, completed: 0, heldBack: 0 },
  steers: { sent: 0, accepted: 0, completed: 0 },
  aborts: { sent: 0, answered: 0 },
  /** Outcome codes of completed requests ("ok" when none). */
  outcomes: new Map<string, number>(),
  /** Non-success answers, by operation and status ("network" when there was no answer). */
  errors: new Map<string, number>(),
  /** The first few of them in full. */
  errorExamples: [] as Array<string>,
  watchers: {
    sseConnects: 0,
    sseDrops: 0,
    sseReconnectsWithLastEventId: 0,
    sseReconnectFrames: 0,
    sseEndedByServer: 0,
    pollSessions: 0,
    polls: 0,
    pollDrops: 0,
    replayGaps: 0,
    events: 0,
    /** An id not above the one before it, on one watcher. */
    idsWentBack: 0,
    /** An id more than one above the one before it without a reconnect or a REPLAY_GAP in between. */
    idsSkipped: 0,
    examples: [] as Array<string>
  },
  completionMs: [] as Array<number>,
  /**
   * Requests whose completion a follower saw more than 3 s after the server's `endedAt` (whole seconds, so
   * up to 1 s of that is rounding): a long poll that did not wake when its request settled.
   */
  seenLate: 0,
  /** The slowest requests, accepted → seen completed, with the server's own times. */
  slowest: [] as Array<{ ms: number; detail: string }>
}
const outstanding = new Map<string, Outstanding>()
/** Agents with a request in flight, as far as this script knows: where steers and aborts are aimed. */
const busy = new Map<number, number>()

const bump = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1)
const note = (example: string) => {
  if (counts.watchers.examples.length < 10) counts.watchers.examples.push(example)
}

// ---------------------------------------------------------------------------
// The node, from outside (/proc, pg_stat_activity) and from inside (the probe)

interface ProbeLine {
  readonly at: number
  readonly loop: { p50: number; p99: number; max: number; ticks: number } | null
  readonly utilization: number
  readonly gc: { ms: number; count: number; maxMs: number; liveAfterMajorGc: number | null }
  readonly forcedGc: { ms: number; liveHeap: number } | null
  readonly memory: { rss: number; heapUsed: number; heapTotal: number; external: number; arrayBuffers: number }
  readonly resources: Record<string, number>
}

interface Sample {
  readonly t: number
  readonly rss: number
  readonly fds: number
  readonly probe: ProbeLine | undefined
  readonly pg: Record<string, number>
  /** JSON bytes of every agent's history in the journal: what awake entities also hold in memory. */
  readonly historyBytes: number
  readonly prompts: { sent: number; accepted: number; completed: number }
  readonly outstanding: number
  readonly watchersOpen: number
  readonly errors5xx: number
  /**
   * The longest event-loop delay of this script's own process over the period, in ms: it does little work, so a
   * long delay here at the same time as one in the node means the machine (shared, 2 cores) did not run them.
   */
  readonly generatorLoopMaxMs: number
}

const rssBytes = (pid: number) =>
  Effect.promise(async () => {
    const status = await Fs.readFile(`/proc/${pid}/status`, "utf8")
    return Number(status.match(/VmRSS:\s+(\d+)/)![1]) * 1024
  })

/** CPU seconds the process has used (see BenchNode.cpuSeconds). */
const cpuSeconds = (pid: number) => Effect.promise(() => BenchNode.cpuSeconds(pid))

const openFds = (pid: number) => Effect.promise(async () => (await Fs.readdir(`/proc/${pid}/fd`)).length)

/**
 * Asks the probe for a line now (SIGUSR2) and reads it; undefined when the node is too busy to answer within
 * 5 s. With `forceGc` (only while the node is idle) the probe runs a full collection first.
 */
const probe = (pid: number, file: string, forceGc: boolean) =>
  Effect.gen(function*() {
    const before = (yield* Effect.promise(() => Fs.readFile(file, "utf8").catch(() => ""))).length
    if (forceGc) yield* Effect.promise(() => Fs.writeFile(`${file}.gc`, ""))
    process.kill(pid, "SIGUSR2")
    const deadline = now() + 5000
    while (now() < deadline) {
      const text = yield* Effect.promise(() => Fs.readFile(file, "utf8").catch(() => ""))
      if (text.length > before && text.endsWith("\n")) {
        return JSON.parse(text.trimEnd().split("\n").at(-1)!) as ProbeLine
      }
      yield* Effect.sleep("20 millis")
    }
    return undefined
  })

const historyBytes = (client: Pg.Client) =>
  Effect.promise(async () =>
    Number(
      (await client.query(`SELECT coalesce(sum(octet_length(message::text)), 0) AS bytes FROM agent_messages`))
        .rows[0].bytes
    )
  )

/** The node's PostgreSQL connections by state (the sampler's own connection excluded). */
const pgConnections = (client: Pg.Client) =>
  Effect.promise(async () => {
    const rows = (await client.query(
      `SELECT coalesce(state, 'none') AS state, count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1`
    )).rows as Array<{ state: string; n: number }>
    return Object.fromEntries(rows.map((row) => [row.state, row.n]))
  })

/**
 * The live heap: exact after a forced collection (idle samples), else the heap after the node's latest own full
 * collection (the probe keeps it from one sample to the next, so under load it lags by up to a few samples).
 */
const live = (sample: Sample) => sample.probe?.forcedGc?.liveHeap ?? sample.probe?.gc.liveAfterMajorGc ?? undefined

const total = (record: Record<string, number>) => Object.values(record).reduce((sum, n) => sum + n, 0)
const fixed = (value: number | undefined, digits = 1) => value === undefined ? "–" : value.toFixed(digits)

const row = (sample: Sample) =>
  `| ${sample.t.toFixed(0)} | ${fixed(sample.rss / MiB, 0)} | ` +
  `${fixed(sample.probe && sample.probe.memory.heapTotal / MiB, 0)} | ` +
  `${fixed(sample.probe && sample.probe.memory.heapUsed / MiB, 0)} | ` +
  `${fixed(live(sample) === undefined ? undefined : live(sample)! / MiB, 0)}${sample.probe?.forcedGc ? "*" : ""} | ` +
  `${fixed(sample.probe && (sample.probe.memory.external + sample.probe.memory.arrayBuffers) / MiB, 0)} | ` +
  `${fixed(sample.probe?.loop?.p50)} | ${fixed(sample.probe?.loop?.p99)} | ${fixed(sample.probe?.loop?.max)} | ` +
  `${fixed(sample.probe && sample.probe.utilization * 100, 0)} | ${fixed(sample.probe?.gc.ms, 0)} | ` +
  `${fixed(sample.probe?.gc.maxMs, 0)} | ${fixed(sample.historyBytes / MiB)} | ` +
  `${sample.fds} | ${sample.probe ? total(sample.probe.resources) : "–"} | ${total(sample.pg)} | ` +
  `${sample.prompts.sent}/${sample.prompts.accepted}/${sample.prompts.completed} | ${sample.outstanding} | ` +
  `${sample.watchersOpen} | ${sample.errors5xx} | ${fixed(sample.generatorLoopMaxMs, 0)} |`

const header = "| t s | RSS MiB | heap total MiB | heap used MiB | live heap MiB | ext+buf MiB | " +
  "loop p50 ms | loop p99 ms | loop max ms | ELU % | GC ms | GC max ms | history MiB | fds | " +
  "handles | PG conns | prompts sent/acc/done | open reqs | watchers | 5xx | script loop max ms |\n" +
  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

// ---------------------------------------------------------------------------

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "bench-soak-")))
  yield* Effect.addFinalizer(() => Effect.promise(() => Fs.rm(dataDir, { recursive: true, force: true })))
  // A directory of its own: the embedded PostgreSQL takes it over (owner and mode) for its user.
  const postgresDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "bench-soak-pg-")))
  yield* Effect.addFinalizer(() => Effect.promise(() => Fs.rm(postgresDir, { recursive: true, force: true })))
  const postgres = yield* EmbeddedPostgres.start({
    dataDir: postgresDir,
    postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off"]
  })
  const databaseUrl = Redacted.value(yield* postgres.createDatabase("soak"))
  // Few recorded requests: the fake keeps them for tests, a soak only needs them not to grow.
  const upstream = yield* FakeUpstream.start({ maxRecorded: 100 })
  const pages = yield* ToolServer.start
  const probeFile = Path.join(dataDir, "probe.jsonl")
  const node = yield* TestNode.start({
    script: serverScript,
    flags: serverFlags,
    databaseUrl,
    env: {
      ALLOW_PRIVATE_URLS: "true",
      LOG_LEVEL: "Warn",
      NODE_OPTIONS: [process.env.SOAK_NODE_OPTIONS ?? "", `--import ${probeModule}`].join(" ").trim(),
      SOAK_PROBE_FILE: probeFile,
      // The script asks for each line with SIGUSR2, so the probe's windows are exactly the sampling periods.
      SOAK_PROBE_MS: "0"
    }
  })
  const pid = node.process.pid!
  const pg = new Pg.Client({ connectionString: databaseUrl })
  yield* Effect.acquireRelease(Effect.promise(() => pg.connect()), () => Effect.promise(() => pg.end()))

  /** Counts a non-success answer and keeps the first few in full. */
  const failed = (key: string, request: string, body: string) => {
    bump(counts.errors, key)
    if (counts.errorExamples.length < 10) {
      counts.errorExamples.push(`t=${((now() - began) / 1000).toFixed(1)} s ${request}: ${key} ${body.slice(0, 300)}`)
    }
  }

  /** A call that may fail (counted by operation and status), never a defect: the soak goes on. */
  const call = (op: string, method: string, path: string, options: Http.RequestOptions, timeoutMs = 30_000) =>
    Http.attempt(node.rest, method, path, { token, ...options }, timeoutMs).pipe(
      Effect.either,
      Effect.map((answer) => {
        if (Either.isLeft(answer)) {
          bump(counts.errors, `${op} network`)
          return undefined
        }
        if (answer.right.status >= 300) failed(`${op} ${answer.right.status}`, `${method} ${path}`, answer.right.text)
        return answer.right
      })
    )

  // --- The tenant, a model per agent, the agents.
  const api = Http.client(node.rest)
  const tenant = (yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "soak" } })).body
  const token = tenant.token as string
  for (let provider = 0; provider * modelsPerProvider < agentCount; provider++) {
    const first = provider * modelsPerProvider
    const models = Array.from(
      { length: Math.min(modelsPerProvider, agentCount - first) },
      (_, i) => ({ id: modelOf(first + i).model, contextWindow: 1_000_000 })
    )
    const saved = yield* api.put(`/v1/providers/${modelOf(first).provider}`, {
      token,
      json: { type: "openai-completions", baseUrl: `${upstream.url}/v1`, models }
    })
    if (saved.status !== 200) return yield* Effect.die(new Error(`provider: ${saved.status} ${saved.text}`))
  }
  const agents = yield* Effect.forEach(Array.from({ length: agentCount }, (_, i) => i), (i) =>
    Effect.flatMap(
      api.post("/v1/agents", {
        token,
        json: { model: `${modelOf(i).provider}/${modelOf(i).model}`, builtins: ["web_fetch"], ttlSeconds: 86_400 }
      }),
      (created) =>
        created.status === 201
          ? Effect.succeed(created.body.id as string)
          : Effect.die(new Error(`agent: ${created.status} ${created.text}`))
    ), { concurrency: 8 })
  // Wake every agent once so the baseline holds their entities, as the load will.
  yield* Effect.forEach(agents, (id) => api.get(`/v1/agents/${id}/state`, { token }), { concurrency: 8, discard: true })

  const samples: Array<Sample> = []
  const began = now()
  const deadline = began + seconds * 1000
  /** When waiting for open requests gives up; set once the load stops. */
  let giveUpAt = Number.POSITIVE_INFINITY
  const stopWatchers = new AbortController()
  let watchersOpen = 0

  const generatorLoop = monitorEventLoopDelay({ resolution: 10 })
  generatorLoop.enable()
  const takeSample = (forceGc: boolean) =>
    Effect.gen(function*() {
      const probeLine = yield* probe(pid, probeFile, forceGc)
      const sample: Sample = {
        t: (now() - began) / 1000,
        rss: yield* rssBytes(pid),
        fds: yield* openFds(pid),
        probe: probeLine,
        pg: yield* pgConnections(pg),
        historyBytes: yield* historyBytes(pg),
        prompts: { sent: counts.prompts.sent, accepted: counts.prompts.accepted, completed: counts.prompts.completed },
        outstanding: outstanding.size,
        watchersOpen,
        errors5xx: [...counts.errors].filter(([key]) => / 5\d\d$/.test(key)).reduce((sum, [, n]) => sum + n, 0),
        // The same correction as the probe's: the histogram counts the 10 ms timer period itself.
        generatorLoopMaxMs: Math.max(0, generatorLoop.max / 1e6 - 10)
      }
      generatorLoop.reset()
      return sample
    })

  yield* Console.log(
    `soak: ${seconds} s, ${agentCount} agents, ${watcherCount} watchers, ${promptsPerSecond} prompts/s, ` +
      `${steersPerSecond} steers/s, ${abortsPerSecond} aborts/s, node pid ${pid}`
  )
  // The first sample is taken before any load: the baseline the end is compared with.
  const baseline = yield* takeSample(true)
  const loadAtStart = Os.loadavg()
  const cpuAtStart = { node: yield* cpuSeconds(pid), generator: process.cpuUsage() }
  yield* Console.log(`${header}\n${row(baseline)}`)

  // --- Requests: each accepted one is followed until it completes.
  const followers = yield* FiberSet.make()
  const follow = (id: string, entry: Outstanding) =>
    Effect.gen(function*() {
      outstanding.set(id, entry)
      busy.set(entry.agent, (busy.get(entry.agent) ?? 0) + 1)
      let polls = 0
      while (now() < giveUpAt) {
        polls++
        const answer = yield* call(
          "wait",
          "GET",
          `/v1/agents/${agents[entry.agent]}/requests/${id}?wait=25`,
          {},
          35_000
        )
        if (answer === undefined || answer.status !== 200) {
          yield* Effect.sleep("1 second")
          continue
        }
        if (answer.body.state !== "completed") continue
        bump(counts.outcomes, `${entry.kind} ${answer.body.code ?? "ok"}`)
        counts[entry.kind === "prompt" ? "prompts" : "steers"].completed++
        const seen = now()
        counts.completionMs.push(seen - entry.acceptedAt)
        const record = answer.body as {
          startedAt?: number
          endedAt?: number
          code?: string
          steeredInto?: string
          stopped?: string
          outcome?: { result?: { toolCalls?: ReadonlyArray<unknown> } }
        }
        const lateSeconds = record.endedAt === undefined ? 0 : seen / 1000 - record.endedAt
        if (lateSeconds > 3) counts.seenLate++
        const at = (unixSeconds: number | undefined) =>
          unixSeconds === undefined ? "?" : `${(unixSeconds - entry.acceptedAt / 1000).toFixed(1)} s`
        counts.slowest.push({
          ms: seen - entry.acceptedAt,
          detail:
            `${entry.kind} ${agents[entry.agent]} ${id} at t=${((entry.acceptedAt - began) / 1000).toFixed(0)} s: ` +
            `seen done after ${((seen - entry.acceptedAt) / 1000).toFixed(1)} s over ${polls} polls; ` +
            `server startedAt ${at(record.startedAt)}, endedAt ${at(record.endedAt)}; code ${record.code ?? "ok"}, ` +
            `${record.outcome?.result?.toolCalls?.length ?? 0} tool calls` +
            (record.stopped === undefined ? "" : `, stopped ${record.stopped}`) +
            (record.steeredInto === undefined ? "" : `, steered into ${record.steeredInto}`)
        })
        counts.slowest.sort((a, b) => b.ms - a.ms)
        counts.slowest.length = Math.min(counts.slowest.length, 5)
        outstanding.delete(id)
        break
      }
      const left = (busy.get(entry.agent) ?? 1) - 1
      if (left === 0) busy.delete(entry.agent)
      else busy.set(entry.agent, left)
    })

  let sequence = 0
  const sendPrompt = Effect.gen(function*() {
    if (outstanding.size >= maxOutstanding) {
      counts.prompts.heldBack++
      return
    }
    const agent = Math.floor(Math.random() * agentCount)
    const n = sequence++
    // The turn's two model responses, queued on the agent's own model: a streamed first step (20 deltas, 15 ms
    // apart) that calls web_fetch on a page held for 50–400 ms, then a short streamed reply that ends the turn.
    // Long enough for steers and aborts to land inside a turn. Both are queued so that a prompt queued behind a
    // running turn does not feed that turn another tool call (which would chain its rounds up to the turn
    // limit); an abort or a steer can still shift the pairing by one step, which never chains.
    upstream.script([
      {
        text: Array.from({ length: 20 }, (_, i) => `w${i}`).join(" "),
        toolCalls: [{
          name: "web_fetch",
          arguments: { url: `${pages.url}/soak/${agent}/${n}?delay=${Math.round(random(50, 400))}` }
        }],
        tokenDelayMs: 15
      },
      { text: "the page says 42", tokenDelayMs: 15 }
    ], { model: modelOf(agent).model })
    counts.prompts.sent++
    const answer = yield* call("prompt", "POST", `/v1/agents/${agents[agent]}/prompt`, {
      json: { text: `prompt ${n}` }
    })
    if (answer?.status !== 202) return
    counts.prompts.accepted++
    yield* FiberSet.run(followers, follow(answer.body.id, { agent, kind: "prompt", acceptedAt: now() }))
  })

  /** An agent with a turn in flight when there is one, else any. */
  const target = () => busy.size > 0 ? pick([...busy.keys()]) : Math.floor(Math.random() * agentCount)

  const sendSteer = Effect.gen(function*() {
    const agent = target()
    counts.steers.sent++
    const answer = yield* call("steer", "POST", `/v1/agents/${agents[agent]}/prompt`, {
      json: { text: `steer ${sequence++}`, whileRunning: "steer" }
    })
    if (answer?.status !== 202) return
    counts.steers.accepted++
    yield* FiberSet.run(followers, follow(answer.body.id, { agent, kind: "steer", acceptedAt: now() }))
  })

  const sendAbort = Effect.gen(function*() {
    counts.aborts.sent++
    const answer = yield* call("abort", "POST", `/v1/agents/${agents[target()]}/abort`, { json: {} })
    if (answer?.status === 200) counts.aborts.answered++
  })

  // --- Watchers.

  /** How a stream ended, and the last id it read. */
  interface SseEnd {
    readonly last: number | undefined
    readonly ended: "dropped" | "reconnect" | "server" | "gap" | "failed"
  }

  /** Reads one event stream until its lifetime ends, the server ends it, or the run stops. */
  const sseSession = (agentId: string, lastEventId: number | undefined, lifetimeMs: number) =>
    Effect.promise(async (interrupted): Promise<SseEnd> => {
      const signal = AbortSignal.any([interrupted, stopWatchers.signal, AbortSignal.timeout(lifetimeMs)])
      let last = lastEventId
      let ended: SseEnd["ended"] = "failed"
      watchersOpen++
      try {
        const response = await fetch(`${node.rest}/v1/agents/${agentId}/events`, {
          headers: {
            authorization: `Bearer ${token}`,
            accept: "text/event-stream",
            ...(last === undefined ? {} : { "last-event-id": String(last) })
          },
          signal
        })
        if (response.status === 409) {
          counts.watchers.replayGaps++
          await response.body?.cancel()
          return { last: undefined, ended: "gap" }
        }
        if (response.status !== 200) {
          failed(`events ${response.status}`, `GET events of ${agentId}`, await response.text())
          return { last, ended }
        }
        counts.watchers.sseConnects++
        if (last !== undefined) counts.watchers.sseReconnectsWithLastEventId++
        const reader = response.body!.getReader()
        const decoder = new TextDecoder()
        let pending = ""
        while (true) {
          const { done, value } = await reader.read()
          if (done) {
            ended = "server"
            break
          }
          pending += decoder.decode(value, { stream: true })
          let end: number
          while ((end = pending.indexOf("\n\n")) !== -1) {
            const block = pending.slice(0, end)
            pending = pending.slice(end + 2)
            if (block.startsWith("event: reconnect")) {
              ended = "reconnect"
              await reader.cancel()
              return { last, ended }
            }
            if (!block.startsWith("id:")) continue
            const id = Number(block.slice(3, block.indexOf("\n")))
            counts.watchers.events++
            if (last !== undefined && id <= last) {
              counts.watchers.idsWentBack++
              note(`sse ${agentId}: id ${id} after ${last}`)
            } else if (last !== undefined && id > last + 1) {
              counts.watchers.idsSkipped++
              note(`sse ${agentId}: id ${id} after ${last}`)
            }
            last = id
          }
        }
      } catch {
        ended = signal.aborted ? "dropped" : "failed"
        if (!signal.aborted) bump(counts.errors, "events network")
      } finally {
        watchersOpen--
      }
      return { last, ended }
    })

  /** Long-polls one agent from `cursor` until the lifetime ends (a poll in flight then is dropped). */
  const pollSession = (agentId: string, lifetimeMs: number) =>
    Effect.promise(async (interrupted) => {
      const signal = AbortSignal.any([interrupted, stopWatchers.signal, AbortSignal.timeout(lifetimeMs)])
      counts.watchers.pollSessions++
      watchersOpen++
      const headers = { authorization: `Bearer ${token}` }
      try {
        const state = await fetch(`${node.rest}/v1/agents/${agentId}/state`, { headers, signal })
        if (state.status !== 200) {
          failed(`state ${state.status}`, `GET state of ${agentId}`, await state.text())
          // Not at once to the next agent: a node answering errors is not to be hammered.
          await new Promise((resolve) => setTimeout(resolve, 1000))
          return
        }
        let cursor = ((await state.json()) as { cursor: number }).cursor
        while (!signal.aborted) {
          const wait = Math.ceil(random(0, 10))
          const response = await fetch(`${node.rest}/v1/agents/${agentId}/events?poll=1&wait=${wait}`, {
            headers: { ...headers, "last-event-id": String(cursor) },
            signal
          })
          counts.watchers.polls++
          const text = await response.text()
          let body: any = undefined
          try {
            body = JSON.parse(text)
          } catch {
            // Not JSON: reported below by its status.
          }
          if (response.status === 409) {
            counts.watchers.replayGaps++
            cursor = Number(/oldest (\d+)/.exec(body?.error ?? "")?.[1] ?? cursor + 1) - 1
            continue
          }
          if (response.status !== 200) {
            failed(`poll ${response.status}`, `GET events?poll=1 of ${agentId}`, text)
            await new Promise((resolve) => setTimeout(resolve, 1000))
            continue
          }
          for (const event of body.events as Array<{ id: number }>) {
            counts.watchers.events++
            if (event.id <= cursor) {
              counts.watchers.idsWentBack++
              note(`poll ${agentId}: id ${event.id} after ${cursor}`)
            } else if (event.id > cursor + 1) {
              counts.watchers.idsSkipped++
              note(`poll ${agentId}: id ${event.id} after ${cursor}`)
            }
            cursor = event.id
          }
        }
      } catch {
        if (signal.aborted) counts.watchers.pollDrops++
        else bump(counts.errors, "poll network")
      } finally {
        watchersOpen--
      }
    })

  /**
   * One watcher slot, kept filled until the run ends: a stream (two in three) or a long poll on a random agent,
   * for a random lifetime (mostly seconds, a few up to a minute and a half). A dropped stream reconnects with
   * Last-Event-ID after up to 2 s half of the time, as a client on a flaky network would; otherwise the slot
   * moves to another agent.
   */
  const lifetime = () => Math.round(Math.min(90_000, Math.max(200, -Math.log(1 - Math.random()) * 15_000)))
  const watcherSlot = Effect.gen(function*() {
    while (now() < deadline) {
      const agentId = pick(agents)
      if (Math.random() < 1 / 3) {
        yield* pollSession(agentId, lifetime())
        continue
      }
      let last: number | undefined = undefined
      while (now() < deadline) {
        const session: SseEnd = yield* sseSession(agentId, last, lifetime())
        last = session.last
        if (session.ended === "dropped") counts.watchers.sseDrops++
        if (session.ended === "server") counts.watchers.sseEndedByServer++
        if (session.ended === "reconnect") counts.watchers.sseReconnectFrames++
        // A reconnect frame or a server end asks for an immediate reconnect; a drop of our own, a coin toss.
        if (session.ended === "failed") yield* Effect.sleep("1 second")
        if (session.ended === "gap" || session.ended === "failed") break
        if (session.ended === "dropped") {
          if (Math.random() < 0.5) break
          yield* Effect.sleep(Duration.millis(random(0, 2000)))
        }
      }
    }
  })

  // --- The load, at fixed rates until the deadline (a late loop catches up at most a second's worth).
  const operations = yield* FiberSet.make()
  const atRate = (perSecond: number, operation: Effect.Effect<void>) =>
    Effect.gen(function*() {
      if (perSecond <= 0) return
      const interval = 1000 / perSecond
      let next = now()
      while (now() < deadline) {
        yield* FiberSet.run(operations, operation)
        next = Math.max(next + interval, now() - 1000)
        yield* Effect.sleep(Duration.millis(Math.max(0, next - now())))
      }
    })

  const sampler = Effect.gen(function*() {
    let next = began + sampleSeconds * 1000
    while (next <= deadline + 1) {
      yield* Effect.sleep(Duration.millis(Math.max(0, next - now())))
      const sample = yield* takeSample(false)
      samples.push(sample)
      yield* Console.log(row(sample))
      next += sampleSeconds * 1000
    }
  })

  yield* Effect.all([
    atRate(promptsPerSecond, sendPrompt),
    atRate(steersPerSecond, sendSteer),
    atRate(abortsPerSecond, sendAbort),
    Effect.forEach(Array.from({ length: watcherCount }), () => watcherSlot, {
      concurrency: "unbounded",
      discard: true
    }),
    sampler,
    // Watchers are cut at the deadline, not left to their lifetimes.
    Effect.sleep(Duration.millis(deadline - now())).pipe(Effect.andThen(Effect.sync(() => stopWatchers.abort())))
  ], { concurrency: "unbounded", discard: true }).pipe(
    Effect.ensuring(Effect.sync(() => stopWatchers.abort()))
  )

  // --- The load has stopped: wait for what was accepted, then let the node go idle.
  const stoppedAt = now()
  const cpu = {
    node: (yield* cpuSeconds(pid)) - cpuAtStart.node,
    generator: (() => {
      const used = process.cpuUsage(cpuAtStart.generator)
      return (used.user + used.system) / 1e6
    })()
  }
  giveUpAt = stoppedAt + drainSeconds * 1000
  yield* FiberSet.awaitEmpty(operations)
  yield* FiberSet.awaitEmpty(followers)
  const drainedMs = now() - stoppedAt
  const neverCompleted = yield* Effect.forEach([...outstanding], ([id, entry]) =>
    Effect.map(
      call("final", "GET", `/v1/agents/${agents[entry.agent]}/requests/${id}`, {}),
      (answer) => `${agents[entry.agent]} ${id} (${entry.kind}): ${answer?.status} ${answer?.text.slice(0, 300)}`
    ))
  // Idle: client keep-alive sockets time out (undici's within 5 s) and the node's idle work settles.
  yield* Effect.sleep("15 seconds")
  const idle = yield* takeSample(true)
  // What the agents' replay buffers hold now (each at most 512 events or 2 MiB), read through the API: the
  // oldest id from the REPLAY_GAP a cursor of 0 gets, then everything after it as one poll.
  const buffers = yield* Effect.forEach(agents, (id) =>
    Effect.gen(function*() {
      // A 409 is the expected answer here, so these calls are not counted as errors.
      const gap = yield* api.get(`/v1/agents/${id}/events?poll=1&wait=0`, { token, headers: { "last-event-id": "0" } })
      const oldest = Number(/oldest (\d+)/.exec(gap.body?.error ?? "")?.[1])
      const all = Number.isNaN(oldest) ? gap : yield* api.get(`/v1/agents/${id}/events?poll=1&wait=0`, {
        token,
        headers: { "last-event-id": String(oldest - 1) }
      })
      return { events: (all.body?.events ?? []).length as number, bytes: all.text.length }
    }), { concurrency: 4 })
  // Optionally rest longer, sampling on: entities stop after 5 idle minutes, so a rest past that shows what
  // memory the node keeps once no agent is awake.
  const idleSamples = [idle]
  const restUntil = now() + (idleSeconds - 15) * 1000
  while (now() < restUntil) {
    yield* Effect.sleep(Duration.millis(Math.min(sampleSeconds * 1000, restUntil - now())))
    const sample = yield* takeSample(true)
    idleSamples.push(sample)
    yield* Console.log(row(sample))
  }
  const rested = idleSamples.at(-1)!
  const tables = yield* Effect.promise(async () =>
    (await pg.query(
      `SELECT relname AS table, n_live_tup::int AS rows, pg_total_relation_size(relid)::bigint AS bytes
       FROM pg_stat_user_tables ORDER BY pg_total_relation_size(relid) DESC LIMIT 8`
    )).rows as Array<{ table: string; rows: number; bytes: string }>
  )
  const pgIdle = yield* Effect.promise(async () =>
    (await pg.query(
      `SELECT coalesce(application_name, '') AS app, coalesce(state, 'none') AS state, count(*)::int AS n
       FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1, 2`
    )).rows
  )

  // --- Verdict on memory: RSS slope of the last third against the first third, after the warm-up.
  const measured = samples.filter((sample) => sample.t >= warmupSeconds)
  const third = Math.floor(measured.length / 3)
  const perMinute = (part: ReadonlyArray<Sample>, value: (sample: Sample) => number) =>
    slope(part.map((sample) => [sample.t / 60, value(sample) / MiB] as const))
  const firstThird = measured.slice(0, third)
  const lastThird = measured.slice(measured.length - third)
  const rssFirst = perMinute(firstThird, (sample) => sample.rss)
  const rssLast = perMinute(lastThird, (sample) => sample.rss)
  const liveFirst = perMinute(firstThird.filter((sample) => live(sample) !== undefined), (sample) => live(sample)!)
  const liveLast = perMinute(lastThird.filter((sample) => live(sample) !== undefined), (sample) => live(sample)!)
  // Levelled off: the last third grows by less than 1 MiB a minute, or at most a quarter as fast as the first.
  const levelledOff = (first: number, last: number) => last < 1 || last <= first / 4
  const verdict = (first: number, last: number) =>
    third < 2
      ? "too few samples after the warm-up for a verdict"
      : levelledOff(first, last)
      ? "levelled off"
      : "still growing"
  const loops = samples.flatMap((sample) => sample.probe?.loop ? [sample.probe.loop] : [])

  yield* Console.log(
    `\n${header}\n${[baseline, ...samples].map(row).join("\n")}\n(load stopped, requests drained, then idle)\n` +
      idleSamples.map(row).join("\n")
  )
  const report = {
    machine: {
      cpus: Os.cpus().length,
      memoryGiB: Math.round(Os.totalmem() / 1024 ** 3),
      node: process.version,
      loadAverageAtStart: loadAtStart,
      loadAverageAtEnd: Os.loadavg()
    },
    // Average share of one core over the load phase; the machine has `cpus` of them, shared by all.
    cpuPercentOfOneCore: {
      node: Math.round((cpu.node / seconds) * 100),
      loadGeneratorWithFakeUpstreamAndPages: Math.round((cpu.generator / seconds) * 100)
    },
    settings: {
      seconds,
      agents: agentCount,
      watchers: watcherCount,
      promptsPerSecond,
      steersPerSecond,
      abortsPerSecond,
      sampleSeconds,
      warmupSeconds
    },
    counts: {
      prompts: counts.prompts,
      steers: counts.steers,
      aborts: counts.aborts,
      outcomes: Object.fromEntries(counts.outcomes),
      errors: Object.fromEntries(counts.errors),
      errorExamples: counts.errorExamples,
      completionMs: {
        p50: Math.round(percentile(counts.completionMs, 50)),
        p99: Math.round(percentile(counts.completionMs, 99)),
        max: Math.round(Math.max(0, ...counts.completionMs)),
        over10s: counts.completionMs.filter((ms) => ms > 10_000).length,
        seenMoreThan3sAfterEndedAt: counts.seenLate,
        slowest: counts.slowest.map((slow) => slow.detail)
      },
      pagesFetched: pages.calls.length,
      watchers: counts.watchers
    },
    completion: {
      accepted: counts.prompts.accepted + counts.steers.accepted,
      completed: counts.prompts.completed + counts.steers.completed,
      neverCompleted: neverCompleted.length,
      ...(neverCompleted.length === 0 ? {} : { examples: neverCompleted.slice(0, 10) }),
      drainedSecondsAfterLoad: Number((drainedMs / 1000).toFixed(1))
    },
    eventLoopDelayMs: {
      worstP50: Math.max(0, ...loops.map((loop) => loop.p50)),
      worstP99: Math.max(0, ...loops.map((loop) => loop.p99)),
      max: Math.max(0, ...loops.map((loop) => loop.max)),
      samplesWithoutAnswer: samples.filter((sample) => sample.probe === undefined).length
    },
    memory: {
      baselineRssMiB: Math.round(baseline.rss / MiB),
      peakRssMiB: Math.round(Math.max(...samples.map((sample) => sample.rss)) / MiB),
      endRssMiB: Math.round((samples.at(-1)?.rss ?? 0) / MiB),
      idleRssMiB: Math.round(idle.rss / MiB),
      restedRssMiB: Math.round(rested.rss / MiB),
      rssSlopeMiBPerMinute: { firstThird: Number(rssFirst.toFixed(2)), lastThird: Number(rssLast.toFixed(2)) },
      liveHeapSlopeMiBPerMinute: { firstThird: Number(liveFirst.toFixed(2)), lastThird: Number(liveLast.toFixed(2)) },
      liveHeapMiB: {
        afterWarmup: Number(((live(measured[0]!) ?? 0) / MiB).toFixed(1)),
        end: Number(((live(samples.at(-1)!) ?? 0) / MiB).toFixed(1)),
        idle: Number(((live(idle) ?? 0) / MiB).toFixed(1)),
        rested: Number(((live(rested) ?? 0) / MiB).toFixed(1))
      },
      rule: "levelled off when the last third's slope is under 1 MiB/min or at most a quarter of the first third's",
      verdict: verdict(rssFirst, rssLast),
      liveHeapVerdict: verdict(liveFirst, liveLast)
    },
    replayBuffers: {
      events: buffers.reduce((sum, buffer) => sum + buffer.events, 0),
      fullAgents: buffers.filter((buffer) => buffer.events >= 512).length,
      jsonMiB: Number((buffers.reduce((sum, buffer) => sum + buffer.bytes, 0) / MiB).toFixed(1))
    },
    history: {
      baselineJsonMiB: Number((baseline.historyBytes / MiB).toFixed(1)),
      endJsonMiB: Number((rested.historyBytes / MiB).toFixed(1))
    },
    handles: {
      baseline: baseline.probe?.resources,
      idle: idle.probe?.resources,
      rested: rested.probe?.resources,
      fds: { baseline: baseline.fds, idle: idle.fds, rested: rested.fds }
    },
    postgres: {
      connections: {
        baseline: baseline.pg,
        peak: Math.max(...samples.map((sample) => total(sample.pg))),
        idle: pgIdle
      },
      largestTables: tables.map((table) => ({ ...table, MiB: Number((Number(table.bytes) / MiB).toFixed(1)) }))
    },
    nodeLog: {
      lines: node.output().split("\n").filter((line) => line.trim() !== "").length,
      byLevel: node.output().split("\n").reduce<Record<string, number>>((byLevel, line) => {
        const level = /level=(\w+)/.exec(line)?.[1]
        if (level !== undefined) byLevel[level] = (byLevel[level] ?? 0) + 1
        return byLevel
      }, {}),
      first: node.output().split("\n").filter((line) => /level=(WARN|ERROR|FATAL)/i.test(line)).slice(0, 5)
    }
  }
  yield* Console.log(JSON.stringify(report, null, 2))
  const exit = yield* node.stop()
  yield* Console.log(`node stopped: ${JSON.stringify(exit)}`)
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
