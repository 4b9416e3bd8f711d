import { EmbeddedPostgres } from "@agent-runtime/store"
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import * as Http from "@agent-runtime/testing/Http"
import * as TestNode from "@agent-runtime/testing/TestNode"
import * as TestWorld from "@agent-runtime/testing/TestWorld"
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Redacted } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { serverScript } from "../serverScript.ts"

const cpuOf = async (pid: number) => {
  const fields = (await Fs.readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1]!.split(" ")
  return (Number(fields[11]) + Number(fields[12])) * 10 // ms (100 Hz)
}

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "probe-")))
  const postgres = yield* EmbeddedPostgres.start({ dataDir, postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off"] })
  const databaseUrl = Redacted.value(yield* postgres.createDatabase("probe"))
  const upstream = yield* FakeUpstream.start({ maxRecorded: 10 })
  const node = yield* TestNode.start({ script: serverScript, databaseUrl, env: { ALLOW_PRIVATE_URLS: "true", LOG_LEVEL: "Warn", ...(process.env.PROBE_NODE_OPTIONS ? { NODE_OPTIONS: process.env.PROBE_NODE_OPTIONS } : {}) } })
  const { token } = yield* TestWorld.tenantWithModel({ node, upstream }, "probe")
  const api = Http.client(node.rest)
  const agent = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
  const pid = node.process.pid!
  const measure = (label: string, n: number, one: (i: number) => Effect.Effect<unknown, unknown>) =>
    Effect.gen(function*() {
      for (let i = 0; i < 20; i++) yield* one(-1 - i)
      const before = yield* Effect.promise(() => cpuOf(pid))
      const t = performance.now()
      for (let i = 0; i < n; i++) yield* one(i)
      const wall = (performance.now() - t) / n
      const after = yield* Effect.promise(() => cpuOf(pid))
      console.log(label.padEnd(40), "server cpu ms/op", ((after - before) / n).toFixed(2), "wall ms/op", wall.toFixed(2))
    })
  const n = Number(process.env.PROBE_N ?? 300)
  const agents = yield* Effect.forEach(Array.from({ length: 30 }), () => Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1" } }), (r) => r.body.id as string))
  const only = process.env.PROBE_ONLY
  if (only === "turn") {
    yield* measure("turn (30 agents round robin)", n, (i) => Effect.gen(function*() {
      const id = agents[(i + 30) % 30]!
      const accepted = (yield* api.post(`/v1/agents/${id}/prompt`, { token, json: { text: "hi" } })).body
      yield* api.get(`/v1/agents/${id}/requests/${accepted.id}?wait=20`, { token })
    }))
    return
  }
  yield* measure("GET /healthz", n, () => api.get("/healthz"))
  yield* measure("GET /v1/me", n, () => api.get("/v1/me", { token }))
  yield* measure("GET /v1/agents/{id}", n, () => api.get(`/v1/agents/${agent}`, { token }))
  yield* measure("turn (30 agents round robin)", n, (i) => Effect.gen(function*() {
    const id = agents[(i + 30) % 30]!
    const accepted = (yield* api.post(`/v1/agents/${id}/prompt`, { token, json: { text: "hi" } })).body
    yield* api.get(`/v1/agents/${id}/requests/${accepted.id}?wait=20`, { token })
  }))
  let last = ""
  yield* measure("turn: POST prompt + GET ?wait", n, () => Effect.gen(function*() {
    const accepted = (yield* api.post(`/v1/agents/${agent}/prompt`, { token, json: { text: "hi" } })).body
    last = accepted.id
    yield* api.get(`/v1/agents/${agent}/requests/${accepted.id}?wait=20`, { token })
  }))
  yield* measure("GET settled request", n, () => api.get(`/v1/agents/${agent}/requests/${last}`, { token }))
  // Accept only: a turn held by a slow answer; the prompts queue behind it.
  const held = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
  upstream.script({ text: "one two three four five six seven eight nine ten", tokenDelayMs: 10_000 })
  yield* api.post(`/v1/agents/${held}/prompt`, { token, json: { text: "hold" } })
  yield* Effect.sleep("500 millis")
  yield* measure("accept (turn held)", n, () => api.post(`/v1/agents/${held}/prompt`, { token, json: { text: "q", whileRunning: "queue" } }))
})
NodeRuntime.runMain(Effect.scoped(program))
