/**
 * `node scripts/bench/webhooks.ts`: webhook delivery figures, in one run,
 * against a real node (its own process) on an embedded PostgreSQL, with a
 * fast receiver on loopback (it answers 204 at once and checks a sample of
 * deliveries with the `standardwebhooks` library).
 *
 * - deliveries/s of a backlog of events to one endpoint and to eight
 *   endpoints, beside the floor: this process posting the same signed
 *   bodies to the same receiver, as many at once as the node sends to one
 *   endpoint, with no database between
 * - the delay from a run's end (its run.completed event's `created`, the
 *   database's clock in the statement that settles the run) to the
 *   receiver having its delivery, p50/p99: one client prompting in turn, then
 *   eight at once (the node busy running turns)
 *
 * Environment: BENCH_EVENTS (default 4000), BENCH_RUNS (300).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as NodeHttp from "node:http"
import type { AddressInfo } from "node:net"
import Pg from "pg"
import { Webhook } from "standardwebhooks"
import { Agent, fetch as undiciFetch } from "undici"
import * as BenchNode from "./benchNode.ts"

const backlog = Number(process.env.BENCH_EVENTS ?? 4000)
const runs = Number(process.env.BENCH_RUNS ?? 300)

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits

interface Arrival {
  readonly path: string
  readonly body: string
  readonly headers: Record<string, string>
  readonly at: number
}

/** Answers 204 at once and remembers each arrival; `waitFor` resolves when a path has had `count`. */
const receiver = () =>
  new Promise<{
    url: string
    arrivals: Array<Arrival>
    waitFor: (path: string, count: number) => Promise<void>
    close: () => void
  }>((resolve) => {
    const arrivals: Array<Arrival> = []
    const counts = new Map<string, number>()
    const waiters: Array<{ path: string; count: number; done: () => void }> = []
    const server = NodeHttp.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        const path = request.url ?? "/"
        arrivals.push({
          path,
          body: Buffer.concat(chunks).toString("utf8"),
          headers: request.headers as Record<string, string>,
          at: Date.now()
        })
        const count = (counts.get(path) ?? 0) + 1
        counts.set(path, count)
        for (const waiter of waiters.filter((waiter) => waiter.path === path && count >= waiter.count)) {
          waiters.splice(waiters.indexOf(waiter), 1)
          waiter.done()
        }
        response.writeHead(204).end()
      })
    })
    server.keepAliveTimeout = 60_000
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        arrivals,
        waitFor: (path, count) =>
          new Promise((done) => (counts.get(path) ?? 0) >= count ? done() : waiters.push({ path, count, done })),
        close: () => {
          server.closeAllConnections()
          server.close()
        }
      }))
  })

const program = Effect.gen(function*() {
  const { api, databaseUrl, tenantId, token, upstream } = yield* BenchNode.start("webhooks", { maxRecorded: 1000 })
  const hooks = yield* Effect.promise(receiver)
  yield* Effect.addFinalizer(() => Effect.sync(hooks.close))
  const db = new Pg.Client({ connectionString: databaseUrl })
  yield* Effect.promise(() => db.connect())
  yield* Effect.addFinalizer(() => Effect.promise(() => db.end()))

  const endpoint = (path: string, events: ReadonlyArray<string>) =>
    Effect.map(
      api.post("/v1/webhooks", { token, json: { url: `${hooks.url}${path}`, events } }),
      (made) => made.body as { id: string; secret: string }
    )

  /** A backlog of `count` events of `type`, written in one statement: the trigger fans them out. */
  const flood = (type: string, count: number, label: string) =>
    Effect.promise(() =>
      db.query(
        `INSERT INTO webhook_events (id, tenant_id, type, created, data, kinds)
         SELECT 'evt_${label}_' || g, $1, $2, extract(epoch from clock_timestamp()), jsonb_build_object('n', g),
           '{endpoint,usage}'
         FROM generate_series(1, $3::int) g`,
        [tenantId, type, count]
      )
    )

  // 1. Deliveries/s of a backlog to one endpoint.
  const one = yield* endpoint("/one", ["billing.balance.low"])
  const oneStarted = Date.now()
  yield* flood("billing.balance.low", backlog, "one")
  yield* Effect.promise(() => hooks.waitFor("/one", backlog))
  const oneSeconds = (Date.now() - oneStarted) / 1000

  // 2. The same backlog spread over eight endpoints.
  const eight = yield* Effect.forEach(
    Array.from({ length: 8 }, (_, i) => `/eight${i}`),
    (path) => endpoint(path, ["billing.balance.depleted"])
  )
  const eightStarted = Date.now()
  yield* flood("billing.balance.depleted", Math.ceil(backlog / 8), "eight")
  yield* Effect.promise(() =>
    Promise.all(Array.from({ length: 8 }, (_, i) => hooks.waitFor(`/eight${i}`, Math.ceil(backlog / 8))))
  )
  const eightSeconds = (Date.now() - eightStarted) / 1000

  // 3. The floor: the same signed posts from here, eight at once (the node's per-endpoint limit), no database.
  const signer = new Webhook(one.secret)
  const dispatcher = new Agent({ connections: 8 })
  const floorStarted = Date.now()
  let next = 0
  yield* Effect.promise(() =>
    Promise.all(Array.from({ length: 8 }, async () => {
      while (next < backlog) {
        const n = next++
        const body = JSON.stringify({ id: `evt_floor_${n}`, type: "billing.balance.low", created: 0, data: { n } })
        const timestamp = new Date()
        const response = await undiciFetch(`${hooks.url}/floor`, {
          method: "POST",
          body,
          dispatcher,
          headers: {
            "content-type": "application/json",
            "webhook-id": `evt_floor_${n}`,
            "webhook-timestamp": String(Math.floor(timestamp.getTime() / 1000)),
            "webhook-signature": signer.sign(`evt_floor_${n}`, timestamp, body)
          }
        })
        await response.body?.cancel()
      }
    }))
  )
  const floorSeconds = (Date.now() - floorStarted) / 1000
  yield* Effect.promise(() => dispatcher.close())

  // 4. From a run's end to its delivery: one client prompting in turn (an idle node), then eight at once.
  const delaysOf = (path: string, clients: number, count: number) =>
    Effect.gen(function*() {
      yield* endpoint(path, ["run.completed"])
      const agents = yield* Effect.forEach(
        Array.from({ length: clients }),
        () =>
          Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1" } }), (made) => made.body.id as string)
      )
      let started = 0
      yield* Effect.forEach(agents, (agentId) =>
        Effect.gen(function*() {
          while (started < count) {
            started++
            upstream.script({ text: "ok" })
            const accepted = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "hi" } })).body
            yield* api.get(`/v1/agents/${agentId}/requests/${accepted.id}?wait=25`, { token })
          }
        }), { concurrency: "unbounded" })
      yield* Effect.promise(() => hooks.waitFor(path, count))
      // Each event once: other endpoints of the tenant subscribed to run.completed get it too.
      return hooks.arrivals.filter((arrival) => arrival.path === path).map((arrival) =>
        arrival.at - JSON.parse(arrival.body).created * 1000
      )
    })
  const idle = yield* delaysOf("/idle", 1, Math.min(runs, 100))
  // The idle endpoint would be served beside the loaded one: it is removed first.
  const idleEndpoint = (yield* api.get("/v1/webhooks", { token })).body.find((hook: any) => hook.url.endsWith("/idle"))
  yield* api.delete(`/v1/webhooks/${idleEndpoint.id}`, { token })
  const delays = yield* delaysOf("/runs", 8, runs)

  // Every delivery of the sample is signed with the endpoint's secret.
  const verifier = new Webhook(one.secret)
  const sample = hooks.arrivals.filter((arrival) => arrival.path === "/one").filter((_, i) => i % 100 === 0)
  for (const arrival of sample) verifier.verify(arrival.body, arrival.headers)
  const ids = new Set(
    hooks.arrivals.filter((arrival) => arrival.path === "/one").map((arrival) => arrival.headers["webhook-id"])
  )

  const figures = {
    backlog,
    oneEndpoint: { deliveriesPerSecond: round(backlog / oneSeconds), distinctIds: ids.size },
    eightEndpoints: {
      deliveriesPerSecond: round((Math.ceil(backlog / 8) * 8) / eightSeconds),
      endpoints: eight.length
    },
    floorEightAtOnce: { deliveriesPerSecond: round(backlog / floorSeconds) },
    runEndToDelivery: {
      idle: { runs: idle.length, p50Ms: round(percentile(idle, 50)), p99Ms: round(percentile(idle, 99)) },
      eightClients: { runs, p50Ms: round(percentile(delays, 50)), p99Ms: round(percentile(delays, 99)) }
    },
    verifiedSample: sample.length
  }
  yield* Console.log(JSON.stringify(figures, null, 2))
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
