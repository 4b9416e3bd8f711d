/**
 * `node scripts/bench/requests.ts`: the node's CPU per request, by kind, one
 * client sending one request at a time (so nothing else runs in the node
 * and its CPU time, read from /proc, is the request's own), against the
 * benchmarks' node (benchNode.ts):
 *
 * - `GET /healthz`: the HTTP pipeline with no handler work
 * - `GET /v1/me`: plus the API key's lookup
 * - `GET /v1/agents/{id}`: plus the agent's row and its owner's status
 * - a turn: `POST .../prompt`, then `GET .../requests/{id}?wait=20`, over 30 agents in turn
 * - `GET .../requests/{id}` of a settled request
 * - a prompt accepted while the agent's turn is held by a slow answer: the accept alone
 *
 * Environment: BENCH_REQUESTS (per kind, default 300), BENCH_ONLY (only the kinds whose name contains
 * it, e.g. "turn" under a profiler), BENCH_NODE_OPTIONS (see benchNode.ts).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as BenchNode from "./benchNode.ts"

const count = Number(process.env.BENCH_REQUESTS ?? 300)
const agentCount = 30
const only = process.env.BENCH_ONLY

/** CPU milliseconds the node has used. */
const cpuMs = (pid: number) => Effect.promise(async () => (await BenchNode.cpuSeconds(pid)) * 1000)

const program = Effect.gen(function*() {
  const { api, node, token, upstream } = yield* BenchNode.start("requests", { maxRecorded: 10 })
  const newAgent = Effect.map(
    api.post("/v1/agents", { token, json: { model: "fake/m1" } }),
    (response) => response.body.id as string
  )
  const agents = yield* Effect.forEach(Array.from({ length: agentCount }), () => newAgent)
  const figures: Record<string, { cpuMs: number; wallMs: number }> = {}

  /** `count` requests one after the other, after 20 to warm up: the node's CPU and the wall time per request. */
  const measure = (kind: string, one: (i: number) => Effect.Effect<unknown>) =>
    Effect.gen(function*() {
      if (only !== undefined && !kind.includes(only)) return
      for (let i = 0; i < 20; i++) yield* one(i)
      const before = yield* cpuMs(node.process.pid!)
      const started = performance.now()
      for (let i = 0; i < count; i++) yield* one(i)
      const wall = (performance.now() - started) / count
      const cpu = ((yield* cpuMs(node.process.pid!)) - before) / count
      figures[kind] = { cpuMs: Number(cpu.toFixed(2)), wallMs: Number(wall.toFixed(2)) }
      yield* Console.log(`${kind}: ${cpu.toFixed(2)} ms CPU, ${wall.toFixed(2)} ms wall`)
    })

  let settled = ""
  const turn = (i: number) =>
    Effect.gen(function*() {
      const agentId = agents[i % agentCount]!
      const accepted = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "hi" } })).body
      settled = `/v1/agents/${agentId}/requests/${accepted.id}`
      yield* api.get(`${settled}?wait=20`, { token })
    })

  yield* measure("GET /healthz", () => api.get("/healthz"))
  yield* measure("GET /v1/me", () => api.get("/v1/me", { token }))
  yield* measure("GET /v1/agents/{id}", () => api.get(`/v1/agents/${agents[0]}`, { token }))
  yield* measure("turn (prompt, then wait for the outcome)", turn)
  if (settled !== "") yield* measure("GET a settled request", () => api.get(settled, { token }))
  if (only === undefined || "accept with the turn held".includes(only)) {
    // The accept alone: prompts queue behind a turn held by a slow answer.
    const held = yield* newAgent
    upstream.script({ text: "held", tokenDelayMs: 600_000 })
    yield* api.post(`/v1/agents/${held}/prompt`, { token, json: { text: "hold" } })
    yield* Effect.sleep("500 millis")
    yield* measure(
      "accept with the turn held",
      () => api.post(`/v1/agents/${held}/prompt`, { token, json: { text: "queued" } })
    )
  }
  yield* Console.log(JSON.stringify({ requests: count, figures }, null, 2))
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
