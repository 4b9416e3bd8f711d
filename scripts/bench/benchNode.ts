/**
 * What most benchmarks stand on: one node (its own process) on a fresh
 * embedded PostgreSQL (fsync off), the fake upstream on loopback, and a
 * tenant whose custom provider `fake` is that upstream (model `fake/m1`).
 * `BENCH_NODE_OPTIONS` reaches the node (e.g. "--cpu-prof
 * --cpu-prof-dir=/tmp/prof" to profile it under load).
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import * as Http from "@agent-runtime/testing/Http"
import * as TestNode from "@agent-runtime/testing/TestNode"
import { Effect, Redacted, type Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import Pg from "pg"
import { serverFlags, serverScript } from "../serverScript.ts"

/** CPU seconds a process has used (user + system), from /proc/<pid>/stat (clock ticks of 1/100 s). */
export const cpuSeconds = async (pid: number): Promise<number> => {
  const stat = await Fs.readFile(`/proc/${pid}/stat`, "utf8")
  // Fields after the command name (which may hold spaces, so split after its closing parenthesis).
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

export const start = (
  name: string,
  options: {
    readonly maxRecorded: number
    /** More of the node's environment, which may name the upstream (a catalog file pointing at it). */
    readonly env?: (upstream: FakeUpstream.FakeUpstream) => Effect.Effect<Record<string, string>, never, Scope.Scope>
  }
) =>
  Effect.gen(function*() {
    const dataDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), `bench-${name}-`)))
    yield* Effect.addFinalizer(() => Effect.promise(() => Fs.rm(dataDir, { recursive: true, force: true })))
    const postgres = yield* EmbeddedPostgres.start({
      dataDir,
      postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off"]
    })
    const databaseUrl = Redacted.value(yield* postgres.createDatabase("bench"))
    const upstream = yield* FakeUpstream.start({ maxRecorded: options.maxRecorded })
    const node = yield* TestNode.start({
      script: serverScript,
      flags: serverFlags,
      databaseUrl,
      env: {
        ALLOW_PRIVATE_URLS: "true",
        LOG_LEVEL: "Warn",
        ...(options.env === undefined ? {} : yield* options.env(upstream)),
        ...(process.env.BENCH_NODE_OPTIONS === undefined ? {} : { NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS })
      }
    })
    const api = Http.client(node.rest)
    const tenant = (yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "bench" } }))
      .body
    const token = tenant.token as string
    yield* api.put("/v1/providers/fake", {
      token,
      json: {
        type: "openai-completions",
        baseUrl: `${upstream.url}/v1`,
        models: [{ id: "m1", contextWindow: 1_000_000 }]
      }
    })
    return { node, upstream, databaseUrl, api, token, tenantId: tenant.id as string }
  })

/** Runs `f` with a connection of its own to the benchmark's database. */
export const withPg = <A>(databaseUrl: string, f: (client: Pg.Client) => Promise<A>) =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: databaseUrl })
    await client.connect()
    try {
      return await f(client)
    } finally {
      await client.end()
    }
  })

const floorScript = fileURLToPath(new URL("floorServer.cjs", import.meta.url))

/**
 * The floor beside a benchmark: scripts/bench/floorServer.cjs on `databaseUrl` with the agents `ids` and a
 * token, its tables made first, in `processes` processes of its own (like nodes); each keeps its agents in
 * memory, so an agent's requests go to one of them (`baseOf`). Stopped when the scope closes.
 */
export const startFloor = (
  databaseUrl: string,
  upstream: FakeUpstream.FakeUpstream,
  ids: ReadonlyArray<string>,
  processes = 1
) =>
  Effect.gen(function*() {
    const token = "floor-token"
    yield* withPg(databaseUrl, async (client) => {
      await client.query(`
        CREATE TABLE floor_tokens (hash text PRIMARY KEY, tenant_id text NOT NULL);
        CREATE TABLE floor_agents (id text PRIMARY KEY, tenant_id text NOT NULL, model text NOT NULL);
        CREATE TABLE floor_requests (agent_id text NOT NULL, id text NOT NULL, state text NOT NULL, input jsonb,
          outcome jsonb, began_at timestamptz, ended_at timestamptz, PRIMARY KEY (agent_id, id));
        CREATE TABLE floor_messages (agent_id text NOT NULL, seq int NOT NULL, message jsonb NOT NULL,
          PRIMARY KEY (agent_id, seq));
        CREATE TABLE floor_usage (agent_id text NOT NULL, request_id text NOT NULL, input int, output int)`)
      await client.query("INSERT INTO floor_tokens VALUES (encode(sha256($1::bytea), 'hex'), 'tenant')", [token])
      await client.query("INSERT INTO floor_agents SELECT id, 'tenant', 'fake/m1' FROM unnest($1::text[]) AS id", [ids])
    })
    const started = yield* Effect.forEach(Array.from({ length: processes }), () =>
      Effect.acquireRelease(
        Effect.async<{ child: ChildProcess.ChildProcess; base: string }>((resume) => {
          const child = ChildProcess.spawn(process.execPath, [floorScript], {
            env: { ...process.env, DATABASE_URL: databaseUrl, UPSTREAM: upstream.url },
            stdio: ["ignore", "pipe", "inherit"]
          })
          child.stdout.once(
            "data",
            (port: Buffer) => resume(Effect.succeed({ child, base: `http://127.0.0.1:${String(port).trim()}` }))
          )
        }),
        ({ child }) => Effect.sync(() => child.kill())
      ))
    const bases = started.map(({ base }) => base)
    const place = new Map(ids.map((id, i) => [id, bases[i % bases.length]!]))
    return {
      bases,
      pids: started.map(({ child }) => child.pid!),
      token,
      baseOf: (agentId: string) => place.get(agentId)
    }
  })

/** The p-th percentile of `values` (nearest rank). */
export const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

/** A JSON call with a bearer token; throws with the answer on a 4xx or 5xx. */
export const json = async (url: string, token: string, init: { method?: string; body?: unknown } = {}) => {
  const response = await fetch(url, {
    method: init.method ?? "GET",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) })
  })
  const body = await response.json() as any
  if (response.status >= 400) {
    throw new Error(`${init.method ?? "GET"} ${url}: ${response.status} ${JSON.stringify(body)}`)
  }
  return body
}

/** Turns per second and each turn's latency (prompt to completed), in ms, of one phase of a benchmark. */
export interface Phase {
  readonly perSecond: number
  readonly p50: number
  readonly p99: number
}

/** The better of two phases of the same load: a noisy neighbour slows one, not both. */
export const better = (a: Phase, b: Phase) => a.perSecond >= b.perSecond ? a : b

/** `later` as a ratio of `earlier`, to three places. */
export const ratio = (later: number, earlier: number) => Math.round((later / earlier) * 1000) / 1000

let turnNumber = 0

/** Runs `count` turns on `agents` of `owner` (one client per agent, each prompting and waiting in turn). */
export const turns = async (
  base: string,
  owner: string,
  agents: ReadonlyArray<string>,
  count: number
): Promise<Phase> => {
  let left = count
  const latencies: Array<number> = []
  const started = performance.now()
  await Promise.all(agents.map(async (agentId) => {
    while (left > 0) {
      left--
      const at = performance.now()
      const request = await json(`${base}/v1/agents/${agentId}/prompt`, owner, {
        method: "POST",
        body: { text: `turn ${turnNumber++}` }
      })
      let record = request
      while (record.state !== "completed") {
        record = await json(`${base}/v1/agents/${agentId}/requests/${request.id}?wait=25`, owner)
      }
      latencies.push(performance.now() - at)
    }
  }))
  const seconds = (performance.now() - started) / 1000
  return {
    perSecond: Math.round((count / seconds) * 10) / 10,
    p50: Math.round(percentile(latencies, 50) * 10) / 10,
    p99: Math.round(percentile(latencies, 99) * 10) / 10
  }
}
