/**
 * `node scripts/bench/saturation.ts`: the node's CPU per request at saturation, by kind: 24 keep-alive
 * clients send one kind of request as fast as it is answered, in consecutive windows of BENCH_SECONDS
 * (default 5) after BENCH_WARMUP_SECONDS (10) of the same load, against the benchmarks' node (benchNode.ts).
 * Unlike requests.ts (one request at a time), this is the cost where a node spends its time under load.
 *
 * - `healthz`: the HttpApi pipeline with no handler work
 * - `settled`: `GET .../requests/{id}` of a settled request (a hot route)
 * - `accept`: a prompt accepted while its agent's turn is held by a slow answer (24 agents)
 * - `turn`: a prompt, then `GET .../requests/{id}?wait=20`, over 48 agents
 *
 * Environment: BENCH_ONLY (comma-separated kinds), BENCH_WINDOWS (windows per kind, default 3),
 * BENCH_PIN ("1": the node on CPU 1, this process and PostgreSQL on CPU 0, with taskset; start this script
 * under `taskset -c 0`), BENCH_NODE_OPTIONS (see benchNode.ts).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as ChildProcess from "node:child_process"
import { Agent, request } from "undici"
import * as BenchNode from "./benchNode.ts"

const only = process.env.BENCH_ONLY?.split(",")
const seconds = Number(process.env.BENCH_SECONDS ?? 5)
const warmup = Number(process.env.BENCH_WARMUP_SECONDS ?? 10)
const windows = Number(process.env.BENCH_WINDOWS ?? 3)
const clients = 24

const program = Effect.gen(function*() {
  const { api, node, token, upstream } = yield* BenchNode.start("saturation", { maxRecorded: 10 })
  const pid = node.process.pid!
  if (process.env.BENCH_PIN === "1") ChildProcess.execFileSync("taskset", ["-a", "-pc", "1", String(pid)])
  const selected = ["healthz", "settled", "accept", "turn"].filter((kind) => only === undefined || only.includes(kind))
  const dispatcher = new Agent({ connections: clients })
  const newAgent = Effect.map(
    api.post("/v1/agents", { token, json: { model: "fake/m1" } }),
    (response) => response.body.id as string
  )
  const agents = yield* Effect.forEach(Array.from({ length: 48 }), () => newAgent)
  const first = (yield* api.post(`/v1/agents/${agents[0]}/prompt`, { token, json: { text: "hi" } })).body.id
  yield* api.get(`/v1/agents/${agents[0]}/requests/${first}?wait=20`, { token })
  const held = selected.includes("accept") ? yield* Effect.forEach(Array.from({ length: clients }), () => newAgent) : []
  for (const agentId of held) {
    upstream.script({ text: "held", tokenDelayMs: 600_000 })
    yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "hold" } })
  }

  const call = async (method: "GET" | "POST", path: string, body?: unknown) => {
    const response = await request(`${node.rest}${path}`, {
      method,
      dispatcher,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" })
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    const text = await response.body.text()
    if (response.statusCode >= 300) throw new Error(`${method} ${path}: ${response.statusCode} ${text}`)
    return JSON.parse(text)
  }
  const kinds: Record<string, (client: number, n: number) => Promise<unknown>> = {
    healthz: () => call("GET", "/healthz"),
    settled: () => call("GET", `/v1/agents/${agents[0]}/requests/${first}`),
    accept: (client) => call("POST", `/v1/agents/${held[client]}/prompt`, { text: "queued" }),
    turn: async (client, n) => {
      const agentId = agents[(client + n * clients) % agents.length]
      const accepted = await call("POST", `/v1/agents/${agentId}/prompt`, { text: "hi" })
      await call("GET", `/v1/agents/${agentId}/requests/${accepted.id}?wait=20`)
    }
  }
  /** Each client sends `kind` again and again until `ms` have passed: how many were answered. */
  const drive = (kind: string, ms: number) =>
    Effect.promise(async () => {
      const end = Date.now() + ms
      let answered = 0
      await Promise.all(Array.from({ length: clients }, async (_, client) => {
        for (let n = 0; Date.now() < end; n++) {
          await kinds[kind]!(client, n)
          answered++
        }
      }))
      return answered
    })
  for (const kind of selected) {
    yield* drive(kind, warmup * 1000)
    for (let window = 1; window <= windows; window++) {
      const before = yield* Effect.promise(() => BenchNode.cpuSeconds(pid))
      const answered = yield* drive(kind, seconds * 1000)
      const after = yield* Effect.promise(() => BenchNode.cpuSeconds(pid))
      yield* Console.log(JSON.stringify({
        kind,
        window,
        perSecond: Math.round(answered / seconds),
        nodeCpuMs: Number((((after - before) * 1000) / answered).toFixed(3))
      }))
    }
  }
})

NodeRuntime.runMain(Effect.scoped(program))
