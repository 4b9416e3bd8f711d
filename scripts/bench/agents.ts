/**
 * `node scripts/bench/agents.ts`: figures for the agent runtime, in one run,
 * against a real node (its own process) on an embedded PostgreSQL, with the
 * fake upstream on loopback as the model provider.
 *
 * - prompt accept latency p50/p99 (POST .../prompt until the RequestRecord arrives), and the floor's beside
 *   it: scripts/bench/floorServer.cjs, the same prompts, the same turns, in plain Node
 * - first token to SSE frame: from the fake upstream receiving the model
 *   request (it answers its first token at once) to a watcher reading the
 *   first text_delta frame
 * - events/s delivered to 1,000 concurrent watchers of one agent
 * - memory per 10,000 idle agents (node RSS growth after waking them)
 *
 * Environment: BENCH_PROMPTS (default 300), BENCH_WARMUP_PROMPTS (prompts sent the same way first, not
 * counted, so the accept is measured after the JIT compiled its path, as cluster.ts measures turns; default
 * 100), BENCH_WATCHERS (1000), BENCH_AGENTS (10000).
 */
import * as Http from "@agent-runtime/testing/Http"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as BenchNode from "./benchNode.ts"

const prompts = Number(process.env.BENCH_PROMPTS ?? 300)
const warmupPrompts = Number(process.env.BENCH_WARMUP_PROMPTS ?? 100)
const watchers = Number(process.env.BENCH_WATCHERS ?? 1000)
const idleAgents = Number(process.env.BENCH_AGENTS ?? 10000)

const now = () => performance.timeOrigin + performance.now()

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

const rssKiB = (pid: number) =>
  Effect.promise(async () => {
    const status = await Fs.readFile(`/proc/${pid}/status`, "utf8")
    return Number(status.match(/VmRSS:\s+(\d+)/)![1])
  })

/** Opens an event stream and counts its frames; resolves when `until` frames have arrived. */
const watch = (url: string, token: string) => {
  const controller = new AbortController()
  let frames = 0
  let firstDeltaAt = 0
  const waiters: Array<{ count: number; resolve: () => void }> = []
  const ready = fetch(url, { headers: { authorization: `Bearer ${token}` }, signal: controller.signal }).then(
    async (response) => {
      const reader = response.body!.getReader()
      const decoder = new TextDecoder()
      let pending = ""
      ;(async () => {
        try {
          while (true) {
            const { done, value } = await reader.read()
            if (done) break
            pending += decoder.decode(value, { stream: true })
            let end: number
            while ((end = pending.indexOf("\n\n")) !== -1) {
              const block = pending.slice(0, end)
              pending = pending.slice(end + 2)
              if (!block.startsWith("id:")) continue
              frames++
              if (firstDeltaAt === 0 && block.includes('"text_delta"')) firstDeltaAt = now()
              for (const waiter of waiters) if (frames >= waiter.count) waiter.resolve()
            }
          }
        } catch {
          // closed by the benchmark
        }
      })()
    }
  )
  return {
    ready,
    frames: () => frames,
    firstDeltaAt: () => firstDeltaAt,
    until: (count: number) =>
      new Promise<void>((resolve) => frames >= count ? resolve() : waiters.push({ count, resolve })),
    close: () => controller.abort()
  }
}

/**
 * Prompts back to back to one agent, each accepted while the turns of those before it run; the accept times of
 * those after the first `warmupPrompts`, once the last has completed.
 */
const acceptTimes = (api: ReturnType<typeof Http.client>, token: string, agentId: string) =>
  Effect.gen(function*() {
    const accept: Array<number> = []
    let lastRequest = ""
    for (let i = 0; i < warmupPrompts + prompts; i++) {
      const started = now()
      const response = yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: `p${i}` } })
      if (i >= warmupPrompts) accept.push(now() - started)
      lastRequest = response.body.id
    }
    yield* api.get(`/v1/agents/${agentId}/requests/${lastRequest}?wait=25`, { token })
    return accept
  })

const program = Effect.gen(function*() {
  const { api, databaseUrl, node, token, upstream } = yield* BenchNode.start("agents", { maxRecorded: 1000 })
  const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
  // Warm up: the entity starts, the first turn runs.
  const warm = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "warm up" } })).body
  yield* api.get(`/v1/agents/${agentId}/requests/${warm.id}?wait=20`, { token })

  // 1. Accept latency: prompts back to back, each accepted while the turns of those before it run.
  const accept = yield* acceptTimes(api, token, agentId)
  for (let i = 0; i < 10; i++) {
    const state = (yield* api.get(`/v1/agents/${agentId}`, { token })).body
    if (!state.running && state.queuedRuns.length === 0) break
    yield* Effect.sleep("1 second")
  }
  // The same against the floor, on the same database, upstream and client.
  const floorAccept = yield* Effect.scoped(Effect.flatMap(
    BenchNode.startFloor(databaseUrl, upstream, ["client_floor0"]),
    (floor) => acceptTimes(Http.client(floor.bases[0]!), floor.token, "client_floor0")
  ))

  // 2. First token to SSE frame, over 20 turns.
  const firstToken: Array<number> = []
  for (let i = 0; i < 20; i++) {
    const watcher = watch(`${node.rest}/v1/agents/${agentId}/events`, token)
    yield* Effect.promise(() => watcher.ready)
    yield* Effect.sleep("50 millis")
    upstream.script({ text: "a b c d", tokenDelayMs: 0 })
    const before = upstream.requests().length
    const request = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: `t${i}` } })).body
    yield* api.get(`/v1/agents/${agentId}/requests/${request.id}?wait=20`, { token })
    const modelRequest = upstream.requests().slice(before).find((recorded) => recorded.protocol === "openai-chat")!
    if (watcher.firstDeltaAt() > 0) firstToken.push(watcher.firstDeltaAt() - modelRequest.receivedAt)
    watcher.close()
  }

  // 3. Fan-out to many watchers of one agent.
  const many = Array.from({ length: watchers }, () => watch(`${node.rest}/v1/agents/${agentId}/events`, token))
  yield* Effect.promise(() => Promise.all(many.map((watcher) => watcher.ready)))
  yield* Effect.sleep("1 second")
  const words = 300
  upstream.script({ text: Array.from({ length: words }, (_, i) => `w${i}`).join(" "), tokenDelayMs: 0 })
  const fanStarted = now()
  const fanRequest = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "fan out" } })).body
  yield* api.get(`/v1/agents/${agentId}/requests/${fanRequest.id}?wait=25`, { token })
  const expected = Math.min(...many.map((watcher) => watcher.frames())) || 1
  yield* Effect.promise(() =>
    Promise.race([
      Promise.all(many.map((watcher) => watcher.until(expected))),
      new Promise((resolve) => setTimeout(resolve, 30_000))
    ])
  )
  const fanElapsed = (now() - fanStarted) / 1000
  const delivered = many.reduce((sum, watcher) => sum + watcher.frames(), 0)
  for (const watcher of many) watcher.close()

  // 4. Memory per idle agent: make them, wake each entity once, compare the node's RSS.
  yield* Effect.sleep("2 seconds")
  const rssBefore = yield* rssKiB(node.process.pid!)
  const ids: Array<string> = []
  yield* Effect.forEach(
    Array.from({ length: idleAgents }, (_, i) => i),
    () =>
      Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1" } }), (response) => {
        ids.push(response.body.id)
      }),
    { concurrency: 32, discard: true }
  )
  yield* Effect.forEach(ids, (id) => api.get(`/v1/agents/${id}/state`, { token }), { concurrency: 32, discard: true })
  yield* Effect.sleep("2 seconds")
  const rssAfter = yield* rssKiB(node.process.pid!)

  const figures = {
    acceptLatencyMs: {
      p50: percentile(accept, 50),
      p99: percentile(accept, 99),
      samples: accept.length,
      floor: { p50: percentile(floorAccept, 50), p99: percentile(floorAccept, 99) }
    },
    firstTokenToFrameMs: {
      p50: percentile(firstToken, 50),
      p99: percentile(firstToken, 99),
      samples: firstToken.length
    },
    fanOut: {
      watchers,
      framesPerWatcher: expected,
      delivered,
      eventsPerSecond: Math.round(delivered / fanElapsed),
      seconds: Number(fanElapsed.toFixed(2))
    },
    idleAgents: {
      agents: ids.length,
      rssBeforeMiB: Math.round(rssBefore / 1024),
      rssAfterMiB: Math.round(rssAfter / 1024),
      bytesPerAgent: Math.round(((rssAfter - rssBefore) * 1024) / Math.max(1, ids.length))
    }
  }
  yield* Console.log(JSON.stringify(figures, null, 2))
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
