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
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
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
