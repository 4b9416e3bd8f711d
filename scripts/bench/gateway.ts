/**
 * `node scripts/bench/gateway.ts`: figures for the model gateway, in one
 * run, against a real node (its own process) on an embedded PostgreSQL, with
 * the fake upstream on loopback as a fixed-latency provider. Every figure
 * compares the same request sent to the fake upstream directly with the
 * one sent through the gateway (auth, model resolution, stream slots and
 * usage recording all on), so the difference is what the gateway adds.
 *
 * - added latency p50/p99, non-streamed chat completions, at concurrency 1
 *   and 100: same protocol (passed through) and translated (chat completions
 *   in, messages upstream); at concurrency 1 also a bare relay (node:http in,
 *   one undici pool out, no other work, its own process) as the floor any
 *   proxy in its own process pays on this machine
 * - method: at concurrency 1 the direct and the proxied requests alternate
 *   one by one (so drift on the shared machine hits both alike); at
 *   concurrency 100 they alternate in rounds. "added" is the proxied
 *   percentile minus the direct percentile, each over its own samples.
 * - streaming: added time to first byte, same protocol and translated
 * - requests/s at saturation (concurrency 50): the fake upstream alone, and
 *   through the gateway, and their ratio
 *
 * Environment: BENCH_REQUESTS (per measurement, default 4000), BENCH_LATENCY_MS
 * (the fake upstream's fixed latency, default 1), BENCH_NODE_OPTIONS (e.g. a profiler flag for the node),
 * BENCH_ONLY (some of relay,same,translated,c100,stream,rps), BENCH_PLACEMENT=split (node and relay on CPU 1,
 * everything else on CPU 0; see docs/benchmarks.md for why that is slower on a 2-vCPU VM).
 * Latencies are taken with process.hrtime.bigint().
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import * as Http from "@agent-runtime/testing/Http"
import * as TestNode from "@agent-runtime/testing/TestNode"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Redacted } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { Pool } from "undici"
import { serverFlags, serverScript } from "../serverScript.ts"

const requests = Number(process.env.BENCH_REQUESTS ?? 4000)
const latencyMs = Number(process.env.BENCH_LATENCY_MS ?? 1)
/** Which figures to measure (comma-separated): relay, same, translated, c100, stream, rps; all by default. */
const only = process.env.BENCH_ONLY === undefined ? undefined : new Set(process.env.BENCH_ONLY.split(","))
const wanted = (figure: string) => only === undefined || only.has(figure)
/**
 * BENCH_PLACEMENT=split: the load generator, the fake upstream (both in this process) and PostgreSQL on CPU 0,
 * the node and the bare relay on CPU 1 (taskset, every thread); unset: wherever the scheduler puts them.
 */
const split = process.env.BENCH_PLACEMENT === "split"
const pin = (pid: number, cpus: string) => {
  if (split) ChildProcess.execFileSync("taskset", ["-a", "-p", "-c", cpus, String(pid)], { stdio: "ignore" })
}

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

interface Target {
  readonly pool: Pool
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
}

/** One request; resolves with its latency in ms (to the last byte, or to the first with `firstByte`). */
const now = () => Number(process.hrtime.bigint()) / 1e6

const send = async (target: Target, firstByte = false): Promise<number> => {
  const start = now()
  const { body, statusCode } = await target.pool.request({
    path: target.path,
    method: "POST",
    headers: target.headers,
    body: target.body
  })
  let first = 0
  for await (const _ of body) if (first === 0) first = now()
  if (statusCode !== 200) throw new Error(`status ${statusCode} from ${target.path}`)
  return (firstByte ? first : now()) - start
}

/** `count` requests at `concurrency`: their latencies and the requests per second. */
const measure = async (target: Target, count: number, concurrency: number, firstByte = false) => {
  const latencies: Array<number> = []
  let next = 0
  const started = performance.now()
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < count) {
      next++
      latencies.push(await send(target, firstByte))
    }
  }))
  const seconds = (performance.now() - started) / 1000
  return { latencies, rps: count / seconds }
}

const ms = (value: number) => `${value.toFixed(3)} ms`

/** The least a proxy does: take the body, send it on over a kept-alive pool, send the answer back. */
const relaySource = `
const http = require("node:http")
const { Pool } = require("undici")
const pool = new Pool(process.env.UPSTREAM, { connections: 128 })
http.createServer({ keepAliveTimeout: 65000 }, (req, res) => {
  const chunks = []
  req.on("data", (chunk) => chunks.push(chunk))
  req.on("end", async () => {
    const answer = await pool.request({
      path: req.url,
      method: "POST",
      headers: { "content-type": "application/json", authorization: req.headers.authorization },
      body: Buffer.concat(chunks)
    })
    const body = Buffer.from(await answer.body.arrayBuffer())
    res.writeHead(answer.statusCode, { "content-type": answer.headers["content-type"], "content-length": body.length })
    res.end(body)
  })
}).listen(0, "127.0.0.1", function () { console.log(this.address().port) })
`

/** The bare relay in its own process, like the node; its URL. */
const startRelay = (upstream: string) =>
  Effect.acquireRelease(
    Effect.async<{ child: ChildProcess.ChildProcess; url: string }>((resume) => {
      const child = ChildProcess.spawn(process.execPath, ["-e", relaySource], {
        env: { ...process.env, UPSTREAM: upstream },
        stdio: ["ignore", "pipe", "inherit"]
      })
      child.stdout.once("data", (port: Buffer) =>
        resume(Effect.succeed({ child, url: `http://127.0.0.1:${String(port).trim()}` })))
    }),
    ({ child }) =>
      Effect.sync(() => child.kill())
  )

const program = Effect.gen(function*() {
  // Children (PostgreSQL among them) inherit it; the node and the relay are moved off it below.
  pin(process.pid, "0")
  const dataDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "bench-gateway-")))
  const postgres = yield* EmbeddedPostgres.start({
    dataDir,
    postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off"]
  })
  const databaseUrl = Redacted.value(yield* postgres.createDatabase("bench"))
  const upstream = yield* FakeUpstream.start({ latencyMs, maxRecorded: 100 })
  const relay = yield* startRelay(upstream.url)
  const node = yield* TestNode.start({
    script: serverScript,
    flags: serverFlags,
    databaseUrl,
    env: {
      ALLOW_PRIVATE_URLS: "true",
      LOG_LEVEL: "Warn",
      ...(process.env.BENCH_NODE_OPTIONS === undefined ? {} : { NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS })
    }
  })
  pin(node.process.pid!, "1")
  pin(relay.child.pid!, "1")
  const api = Http.client(node.rest)
  const tenant = (yield* api.post("/v1/admin/tenants", { token: node.operatorToken, json: { name: "bench" } })).body
  const token = tenant.token as string
  for (
    const [name, type, baseUrl] of [
      ["chat", "openai-completions", `${upstream.url}/v1`],
      ["msg", "anthropic-messages", upstream.url]
    ] as const
  ) {
    yield* api.put(`/v1/providers/${name}`, {
      token,
      json: {
        type,
        baseUrl,
        apiKey: "sk-bench",
        models: [{ id: "m1", contextWindow: 1_000_000, pricing: { input: 1, output: 2 } }]
      }
    })
  }
  // Enough slots for the saturation run: slots stay on, they just do not queue.
  yield* Http.client(node.gateway).put(`/v1/admin/tenants/${tenant.id}/gateway`, {
    token: node.operatorToken,
    json: { streamSlots: 200 }
  })

  const connections = 128
  const direct = new Pool(upstream.url, { connections })
  const gateway = new Pool(node.gateway, { connections })
  const bare = new Pool(relay.url, { connections })
  const messages = [{ role: "user", content: "Say hello in one short sentence." }]
  const chatBody = (model: string, stream = false) =>
    JSON.stringify({
      model,
      messages,
      max_tokens: 64,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {})
    })
  const json = { "content-type": "application/json" }
  const targets = {
    direct: {
      pool: direct,
      path: "/v1/chat/completions",
      headers: { ...json, authorization: "Bearer sk-bench" },
      body: chatBody("m1")
    },
    relay: {
      pool: bare,
      path: "/v1/chat/completions",
      headers: { ...json, authorization: "Bearer sk-bench" },
      body: chatBody("m1")
    },
    directMessages: {
      pool: direct,
      path: "/v1/messages",
      headers: { ...json, "x-api-key": "sk-bench", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "m1", messages, max_tokens: 64 })
    },
    same: {
      pool: gateway,
      path: "/v1/chat/completions",
      headers: { ...json, authorization: `Bearer ${token}` },
      body: chatBody("chat/m1")
    },
    translated: {
      pool: gateway,
      path: "/v1/chat/completions",
      headers: { ...json, authorization: `Bearer ${token}` },
      body: chatBody("msg/m1")
    }
  } satisfies Record<string, Target>
  const streamed = (target: Target, body: string): Target => ({ ...target, body })
  const streams = {
    direct: streamed(targets.direct, chatBody("m1", true)),
    directMessages: streamed(
      targets.directMessages,
      JSON.stringify({ model: "m1", messages, max_tokens: 64, stream: true })
    ),
    same: streamed(targets.same, chatBody("chat/m1", true)),
    translated: streamed(targets.translated, chatBody("msg/m1", true))
  }

  const rows: Array<[string, string]> = []
  yield* Effect.promise(async () => {
    // Warm up every path (connections, caches, JIT).
    for (const target of [...Object.values(targets), ...Object.values(streams)]) await measure(target, 300, 4)

    const added = async (label: string, via: Target, base: Target, concurrency: number, firstByte = false) => {
      // Interleaved (one by one at concurrency 1, else in rounds), so drift on the shared machine hits both sides alike.
      const viaAll: Array<number> = []
      const baseAll: Array<number> = []
      if (concurrency === 1) {
        for (let i = 0; i < requests; i++) {
          baseAll.push(await send(base, firstByte))
          viaAll.push(await send(via, firstByte))
        }
      } else {
        for (let round = 0; round < 4; round++) {
          for (const latency of (await measure(base, requests / 4, concurrency, firstByte)).latencies) {
            baseAll.push(latency)
          }
          for (const latency of (await measure(via, requests / 4, concurrency, firstByte)).latencies) {
            viaAll.push(latency)
          }
        }
      }
      const p50 = percentile(viaAll, 50) - percentile(baseAll, 50)
      const p99 = percentile(viaAll, 99) - percentile(baseAll, 99)
      rows.push([
        label,
        `added p50 ${ms(p50)}, p99 ${ms(p99)} (direct p50 ${ms(percentile(baseAll, 50))} p99 ${
          ms(percentile(baseAll, 99))
        }; ` +
        `gateway p50 ${ms(percentile(viaAll, 50))} p99 ${ms(percentile(viaAll, 99))})`
      ])
    }
    if (wanted("relay")) {
      await added("bare relay (floor: no gateway work), concurrency 1", targets.relay, targets.direct, 1)
    }
    if (wanted("same")) {
      await added("same protocol (chat → chat upstream), concurrency 1", targets.same, targets.direct, 1)
    }
    if (wanted("translated")) {
      await added("translated (chat → messages upstream), concurrency 1", targets.translated, targets.directMessages, 1)
    }
    if (wanted("c100")) {
      await added("same protocol, concurrency 100", targets.same, targets.direct, 100)
      await added("translated, concurrency 100", targets.translated, targets.directMessages, 100)
    }
    if (wanted("stream")) {
      await added("streamed, time to first byte, same protocol, concurrency 1", streams.same, streams.direct, 1, true)
      await added(
        "streamed, time to first byte, translated, concurrency 1",
        streams.translated,
        streams.directMessages,
        1,
        true
      )
    }
    if (!wanted("rps")) return
    const saturation = requests * 2
    const alone = await measure(targets.direct, saturation, 50)
    const through = await measure(targets.same, saturation, 50)
    const translatedRps = await measure(targets.translated, saturation, 50)
    rows.push([
      "requests/s at concurrency 50 (non-streamed chat)",
      `fake upstream alone ${alone.rps.toFixed(0)}/s; through the gateway ${through.rps.toFixed(0)}/s ` +
      `(${(100 * through.rps / alone.rps).toFixed(0)}%); translated ${translatedRps.rps.toFixed(0)}/s ` +
      `(${(100 * translatedRps.rps / alone.rps).toFixed(0)}%)`
    ])
  })
  yield* Effect.promise(() => Promise.all([direct.close(), gateway.close(), bare.close()]))
  yield* Console.log(
    `\nfake upstream latency ${latencyMs} ms, ${requests} requests per measurement` +
      (split ? ", node and relay on CPU 1, the rest on CPU 0" : "") + "\n"
  )
  yield* Console.log("| figure | value |\n|---|---|")
  for (const [figure, value] of rows) yield* Console.log(`| ${figure} | ${value} |`)
})

program.pipe(Effect.scoped, NodeRuntime.runMain)
