/**
 * Database faults, a sibling of the fault suite: three runner processes on a
 * PostgreSQL of this file's own (so it can be restarted), each reaching it
 * through its own TCP proxy on loopback, under a steady workload of prompts
 * (replies streamed slowly, every third turn calling web_fetch on a counting
 * page server) with watchers on every node. Faults one after another: an
 * outage for every runner (short, then longer than the lease) in the middle
 * of a two-step turn; one runner cut off for more than twice the lease while
 * it still serves HTTP; a restart of PostgreSQL itself. During each, requests
 * that need the database answer 503 UNAVAILABLE with Retry-After, quickly, and
 * `/readyz` says the node cannot serve. Then, from outside: every accepted
 * request completed, histories are whole and in order, no tool call was sent
 * twice, event ids only grew for every watcher, and recovery times are logged.
 * Every other turn fetching a page also writes a file on its agent's
 * workspace and edits it (see FileWrites): no write ran twice, each file agrees with its
 * calls' results (a write refused for the outage wrote nothing), and a write
 * whose outcome is unknown is counted as uncertain. Stateless runs go beside
 * the agents' turns (each fetching a page; a 503 sent again with the same
 * Idempotency-Key after its Retry-After): every accepted run ends completed,
 * once per key, and no page is fetched twice.
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import {
  FakeUpstream,
  FileWrites,
  Histories,
  Http,
  PrepaidTenant,
  type TcpProxy,
  TestCluster,
  TestDatabase,
  TestWorld,
  ToolServer,
  Watchers
} from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Redacted, Schedule, Scope } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"

const leaseSeconds = 4
const agentCount = 9
const promptEveryMs = 200
/** What the spec promises a client during an outage: an answer, and a 503 at that, within this. */
const unavailableWithinMs = 5_000

interface Sent {
  readonly agentId: string
  readonly text: string
  readonly sentAt: number
  accepted: boolean
}

/**
 * How long `check` took to hold, polling every 100 ms; fails the test after
 * `timeoutMs`, saying what `seen` reports of the last look.
 */
const timeUntil = (what: string, check: Effect.Effect<boolean>, timeoutMs: number, seen?: () => string) =>
  Effect.gen(function*() {
    const started = Date.now()
    while (Date.now() - started < timeoutMs) {
      if (yield* check) return Date.now() - started
      yield* Effect.sleep("100 millis")
    }
    const last = seen === undefined ? "" : `; last seen: ${seen()}`
    return yield* Effect.die(new Error(`${what}: not within ${timeoutMs} ms${last}`))
  })

/** Debugging aid: says when the finalizers registered at this point have run (they run last to first). */
const mark = (name: string) =>
  process.env.DBFAULTS_DEBUG
    ? Effect.addFinalizer(() =>
      Effect.sync(() => console.log(`finalizers: reached ${name} at ${new Date().toISOString()}`))
    )
    : Effect.void

const readyz = (base: string) =>
  Http.attempt(base, "GET", "/readyz", {}, 3_000).pipe(
    Effect.map((response) => response.status),
    Effect.orElseSucceed(() => 0)
  )

it.scopedLive(
  "database faults: an outage, a partition and a restart answer 503, report not ready and lose nothing",
  () =>
    Effect.gen(function*() {
      // --- A PostgreSQL of our own, so it can be stopped and started on the same port.
      const dataDir = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-runtime-dbfaults-"))),
        (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
      )
      const postgresFlags = ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
      let postgresScope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Effect.suspend(() => Scope.close(postgresScope, Exit.void)))
      const postgres = yield* EmbeddedPostgres.start({ dataDir, postgresFlags }).pipe(Scope.extend(postgresScope))
      const databaseUrl = Redacted.value(yield* Effect.orDie(postgres.createDatabase("dbfaults")))

      yield* mark("postgres")
      const upstream = yield* FakeUpstream.start()
      yield* mark("upstream")
      const pages = yield* ToolServer.start
      yield* mark("pages")
      // The workload runs on the operator's platform key for a prepaid tenant: each response is charged from
      // credit, which the faults must never charge twice nor lose (checked at the end).
      const cluster = yield* TestCluster.start({
        size: 3,
        databaseUrl,
        proxied: true,
        env: {
          ALLOW_PRIVATE_URLS: "true",
          RUNNER_LEASE_SECONDS: String(leaseSeconds),
          DRAIN_TIMEOUT_SECONDS: "20",
          ...(yield* PrepaidTenant.catalogEnv(upstream))
        }
      })
      const members = cluster.members
      yield* mark("cluster")
      if (process.env.DBFAULTS_DEBUG) {
        const dump = () =>
          members.forEach((member, i) => FsSync.writeFileSync(`/tmp/dbfaults-node-${i}.log`, member.node.output()))
        const timer = setInterval(dump, 10_000)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            clearInterval(timer)
            dump()
          })
        )
      }
      const proxyOf = (index: number) => members[index]!.proxy as TcpProxy.TcpProxy
      // Should a check fail mid-fault, the nodes still reach the database to shut down.
      yield* Effect.addFinalizer(() => Effect.forEach(members, (_, index) => proxyOf(index).restore))
      const rest = (index: number) => members[index]!.node.rest
      /** How long until member `index`'s /readyz answers `status`; a failure says what it answered last. */
      const readyzBecomes = (name: string, index: number, status: 200 | 503, timeoutMs: number) => {
        let last = "no look yet"
        const check = Http.attempt(rest(index), "GET", "/readyz", {}, 3_000).pipe(
          Effect.map((response) => {
            last = `${response.status} ${response.text}`
            return response.status === status
          }),
          Effect.catchAll((error) => {
            // A node that died answers nothing either: say which, with what it logged last.
            last = `no answer within 3 s (${error.name === "TimeoutError" ? "timed out" : error.message})`
            return Effect.succeed(false)
          })
        )
        const logTail = () => members[index]!.node.output().split("\n").slice(-15).join("\n")
        return timeUntil(
          `${name}: /readyz ${status} on ${index}`,
          check,
          timeoutMs,
          () => `${last}; node ${index} logged last:\n${logTail()}`
        )
      }
      const { api, token } = yield* TestWorld.tenantWithModel({ node: members[0]!.node, upstream }, "dbfaults")
      // m1 for the workload; m2 for the probe turns, whose steps no workload turn can take.
      yield* api.put("/v1/providers/fake", {
        token,
        json: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          models: [
            { id: "m1", contextWindow: 100_000 },
            { id: "m2", contextWindow: 100_000 },
            { id: "r1", contextWindow: 100_000 }
          ]
        }
      })
      const tenantId = yield* PrepaidTenant.make(members[0]!.node.rest, members[0]!.node.operatorToken, token)
      const makeAgent = (model: string) =>
        Effect.map(
          api.post("/v1/agents", { token, json: { model, builtins: ["web_fetch"], ttlSeconds: 3600 } }),
          (response) => ({ id: response.body.id as string, token: response.body.token as string })
        )
      const agents = (yield* Effect.forEach(Array.from({ length: agentCount }), () => makeAgent(PrepaidTenant.model)))
        .map((a) => a.id)
      const probeAgent = yield* makeAgent("fake/m2")
      // A key the gateway has never seen: its lookup needs the database.
      const freshKey = (yield* api.post("/v1/tokens", { token, json: { name: "gateway during outage" } })).body
        .token as string

      const pick = () => rest(Math.floor(Math.random() * members.length))
      /** A request to any node, tried again (elsewhere) while it fails or answers 5xx. */
      const call = (method: string, path: string) =>
        Effect.suspend(() => Http.attempt(pick(), method, path, { token }, 30_000)).pipe(
          Effect.filterOrFail((response) => response.status < 500, () => new Error("5xx")),
          Effect.retry({ times: 100, schedule: Schedule.spaced("200 millis") })
        )

      // --- Watchers on every node: a live SSE stream pinned to each, and a long poll through any.
      const watchers = new Map<string, Array<Watchers.Watcher>>()
      for (const agentId of [...agents, probeAgent.id]) {
        const cursor = (yield* api.get(`/v1/agents/${agentId}/state`, { token })).body.cursor as number
        const pinned = yield* Effect.forEach(
          members,
          (_, index) => Watchers.sse(`${agentId} sse@${index}`, { agentId, token, cursor, base: () => rest(index) })
        )
        const polled = yield* Watchers.poll(`${agentId} poll`, { agentId, token, cursor, base: pick })
        watchers.set(agentId, [...pinned, polled])
      }

      yield* mark("watchers")
      // --- Workload: a prompt every 200 ms round-robin over the agents. A 503 is sent again, with the same
      // request id, to another node after its Retry-After, as a client would.
      const sent = new Map<string, Sent>()
      const answers = {
        accepted: 0,
        unavailable: 0,
        other: new Map<number, number>(),
        slowest503: 0,
        slowestInFault: 0
      }
      /** Which fault is in effect, if any: a prompt sent during it must be answered within the bound. */
      let fault = 0
      let faultActive = false
      const unavailableBodies = new Set<string>()
      let sequence = 0
      let inFlight = 0
      /** The file steps scripted (see FileWrites). */
      const fileSteps: Array<number> = []
      const sendOne = Effect.gen(function*() {
        const n = sequence++
        const agentId = agents[n % agentCount]!
        const requestId = `req_db_${n}`
        const text = `prompt ${n}`
        if (n % 3 === 0) {
          // Every other time with the page, whichever agent takes this script writes a file on its workspace and
          // edits it (one tenant's file writes commit one at a time: more would slow the whole workload).
          const writes = n % 6 === 0
          upstream.script({
            toolCalls: [
              { id: `call_${n}`, name: "web_fetch", arguments: { url: `${pages.url}/t/${n}?delay=600` } },
              ...(writes ? FileWrites.calls(n) : [])
            ]
          }, { model: "m1" })
          if (writes) fileSteps.push(n)
        }
        upstream.script({ text: "one two three four five six seven eight", tokenDelayMs: 60 }, { model: "m1" })
        const entry: Sent = { agentId, text, sentAt: Date.now(), accepted: false }
        sent.set(requestId, entry)
        // As a client would, for up to a minute: then its fate is read from the request itself (accepted or not).
        const giveUp = Date.now() + 60_000
        while (!entry.accepted && Date.now() < giveUp) {
          const started = Date.now()
          const inFault = faultActive ? fault : undefined
          const answer = yield* Effect.either(
            Http.attempt(pick(), "POST", `/v1/agents/${agentId}/prompt`, { token, json: { text, requestId } }, 15_000)
          )
          if (answer._tag === "Left") {
            yield* Effect.sleep("500 millis")
            continue
          }
          const { body, headers, status } = answer.right
          if (status === 202) {
            entry.accepted = true
            answers.accepted++
          } else if (status === 503) {
            answers.unavailable++
            answers.slowest503 = Math.max(answers.slowest503, Date.now() - started)
            // Sent and answered within one fault (a prompt already waiting when it began may take longer).
            if (inFault !== undefined && faultActive && fault === inFault) {
              answers.slowestInFault = Math.max(answers.slowestInFault, Date.now() - started)
            }
            unavailableBodies.add(`${body?.code} retry-after=${headers.get("retry-after")}`)
            yield* Effect.sleep(Duration.seconds(Number(headers.get("retry-after") ?? 1)))
          } else {
            answers.other.set(status, (answers.other.get(status) ?? 0) + 1)
            return
          }
        }
      }).pipe(
        Effect.ensuring(Effect.sync(() => inFlight--)),
        (send) => Effect.zipRight(Effect.sync(() => inFlight++), send)
      )
      // --- Stateless runs beside them, every fourth tick, on a model of their own: created as a client would,
      // again with the same Idempotency-Key after a 503 or a lost answer.
      const runKeys = new Map<string, { id?: string; body: unknown }>()
      let runSequence = 0
      const createRun = Effect.gen(function*() {
        const n = runSequence++
        const key = `run-db-${n}`
        const body = { model: "fake/r1", builtins: ["web_fetch"], input: `run ${n}` }
        // A spare answer per run: a run whose answer was lost with its node asks the model again, and every run
        // shares this queue, so without it the last run would find it empty.
        upstream.script([
          { toolCalls: [{ id: `rcall_${n}`, name: "web_fetch", arguments: { url: `${pages.url}/r/${n}?delay=600` } }] },
          { text: `run ${n} done`, tokenDelayMs: 60 },
          { text: `run ${n} done` }
        ], { model: "r1" })
        const entry: { id?: string; body: unknown } = { body }
        runKeys.set(key, entry)
        const giveUp = Date.now() + 60_000
        while (entry.id === undefined && Date.now() < giveUp) {
          const answer = yield* Effect.either(
            Http.attempt(pick(), "POST", "/v1/runs", { token, json: body, headers: { "idempotency-key": key } }, 15_000)
          )
          if (answer._tag === "Left") {
            yield* Effect.sleep("500 millis")
          } else if (answer.right.status === 200 || answer.right.status === 202) {
            entry.id = answer.right.body.id
          } else if (answer.right.status === 503 || answer.right.body?.code === "IDEMPOTENCY_IN_PROGRESS") {
            // 409 IDEMPOTENCY_IN_PROGRESS: the first request with this key still runs (its answer was lost).
            yield* Effect.sleep(Duration.seconds(Number(answer.right.headers.get("retry-after") ?? 1)))
          } else {
            answers.other.set(answer.right.status, (answers.other.get(answer.right.status) ?? 0) + 1)
            return
          }
        }
      }).pipe(
        Effect.ensuring(Effect.sync(() => inFlight--)),
        (send) => Effect.zipRight(Effect.sync(() => inFlight++), send)
      )
      let tick = 0
      const workload = yield* Effect.forkScoped(
        Effect.forever(
          Effect.zipRight(
            Effect.forkScoped(Effect.suspend(() => tick++ % 4 === 3 ? Effect.zipRight(createRun, sendOne) : sendOne)),
            Effect.sleep(Duration.millis(promptEveryMs))
          )
        )
      )

      const began = Date.now()
      let current = "starting"
      const phase = (name: string) =>
        Effect.sync(() => {
          current = name
          console.log(`database faults +${Date.now() - began} ms: ${name}`)
        })
      if (process.env.DBFAULTS_DEBUG) {
        const beat = setInterval(
          () => console.log(`+${Date.now() - began} ms: ${current}; sends in flight ${inFlight}`),
          10_000
        )
        yield* Effect.addFinalizer(() => Effect.sync(() => clearInterval(beat)))
      }
      const figures: Array<string> = []

      /** A two-step turn on the probe agent, waiting until its tool call is being answered: the middle of a turn. */
      let probes = 0
      const probeTurn = Effect.gen(function*() {
        const k = ++probes
        upstream.script([
          {
            toolCalls: [{
              id: `probe_${k}`,
              name: "web_fetch",
              arguments: { url: `${pages.url}/probe/${k}?delay=1500` }
            }]
          },
          { text: `probe ${k} done` }
        ], { model: "m2" })
        const requestId = `req_probe_${k}`
        const sentAt = Date.now()
        // Sent like the workload's prompts: again (same request id) until accepted, the cluster may still be settling.
        const accepted = yield* Effect.suspend(() =>
          Http.attempt(pick(), "POST", `/v1/agents/${probeAgent.id}/prompt`, {
            token,
            json: { text: `probe ${k}`, requestId }
          }, 15_000)
        ).pipe(
          Effect.filterOrFail((answer) => answer.status === 202, (answer) => new Error(`answered ${answer.status}`)),
          Effect.retry({ times: 30, schedule: Schedule.spaced("1 second") }),
          Effect.either
        )
        expect(accepted._tag, `probe ${k} accepted`).toBe("Right")
        sent.set(requestId, { agentId: probeAgent.id, text: `probe ${k}`, sentAt, accepted: true })
        yield* timeUntil(`probe ${k} calls its tool`, Effect.sync(() => pages.count(`/probe/${k}`) > 0), 20_000).pipe(
          // Once seen with no fault on: the probe's turn begun on a runner and stuck there while every runner's
          // shard locks timed out again and again. What the model was asked, and what the database holds and
          // waits on, are the next clues.
          Effect.tapDefect(() => describeProbe(requestId, sentAt))
        )
        return requestId
      })
      /** The probe's request and agent, and what PostgreSQL's sessions were doing, printed. */
      const describeProbe = (requestId: string, sentAt: number) =>
        Effect.gen(function*() {
          const read = (text: string) =>
            TestDatabase.query(databaseUrl, text).pipe(
              Effect.map((rows) => JSON.stringify(rows)),
              Effect.timeout("5 seconds"),
              Effect.catchAllCause((cause) => Effect.succeed(`unread: ${cause}`))
            )
          const lines = [
            `request: ${yield* read(`SELECT state, began_index, started_at, began_at, ended_at FROM agent_requests
              WHERE agent_id = '${probeAgent.id}' AND id = '${requestId}'`)}`,
            `agent: ${yield* read(`SELECT owner, owner_epoch, resume_after, resume_failures FROM agents
              WHERE id = '${probeAgent.id}'`)}`,
            `runners: ${members.map((member, i) => `${i}=${member.runnerAddress}`).join(" ")}`,
            // Each model request of the probe agent since the probe was sent: a second runner's call for the
            // same step takes the next scripted answer.
            `model requests: ${
              JSON.stringify(
                upstream.requests().filter((request: any) =>
                  request.body?.model === "m2" && request.receivedAt >= sentAt
                )
                  .map((request: any) => ({
                    at: new Date(request.receivedAt).toISOString(),
                    messages: request.body.messages?.length,
                    last: JSON.stringify(request.body.messages?.at(-1)).slice(0, 160)
                  }))
              )
            }`,
            `sessions: ${yield* read(`SELECT pid, application_name, state, wait_event_type, wait_event,
              now() - xact_start AS in_transaction, now() - query_start AS in_query, left(query, 160) AS query
              FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()`)}`,
            `waiting locks: ${yield* read(`SELECT l.pid, l.locktype, l.mode, l.relation::regclass AS relation,
              pg_blocking_pids(l.pid) AS blocked_by FROM pg_locks l WHERE NOT l.granted`)}`
          ]
          console.log(`probe ${requestId} did not reach its tool:\n${lines.join("\n")}`)
        })
      /** Whether the request completed, asked of any node (one that cannot reach the database answers 503). */
      const completed = (requestId: string) =>
        Effect.suspend(() =>
          Effect.map(
            Effect.either(
              Http.attempt(pick(), "GET", `/v1/agents/${probeAgent.id}/requests/${requestId}`, { token }, 5_000)
            ),
            (answer) => answer._tag === "Right" && answer.right.body?.state === "completed"
          )
        )

      /** What a client sees on a node that cannot reach the database: 503 UNAVAILABLE with Retry-After, fast. */
      const expectUnavailable = (index: number) =>
        Effect.gen(function*() {
          const base = rest(index)
          const started = Date.now()
          const prompt = yield* Http.attempt(base, "POST", `/v1/agents/${agents[0]}/prompt`, {
            token,
            json: { text: "during the outage" }
          }, 10_000)
          const took = Date.now() - started
          expect(prompt.status).toBe(503)
          expect(prompt.body).toMatchObject({ code: "UNAVAILABLE" })
          expect(Number(prompt.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
          expect(took).toBeLessThan(unavailableWithinMs)
          // The /clients routes, with the agent's own token.
          const history = yield* Http.attempt(base, "GET", `/clients/${probeAgent.id}/history`, {
            token: probeAgent.token
          }, 10_000)
          expect(history.status).toBe(503)
          expect(history.body.code).toBe("UNAVAILABLE")
          expect(history.headers.get("retry-after")).not.toBeNull()
          // The gateway, in each protocol's own error shape.
          const gateway = members[index]!.node.gateway
          const chat = yield* Http.attempt(gateway, "POST", "/v1/chat/completions", {
            token: freshKey,
            json: { model: "fake/m1", messages: [{ role: "user", content: "hi" }] }
          }, 10_000)
          expect(chat.status).toBe(503)
          expect(chat.body.error).toMatchObject({ type: "server_error", code: "UNAVAILABLE" })
          expect(chat.headers.get("retry-after")).not.toBeNull()
          const messages = yield* Http.attempt(gateway, "POST", "/v1/messages", {
            headers: { "x-api-key": freshKey, "anthropic-version": "2023-06-01" },
            json: { model: "fake/m1", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }
          }, 10_000)
          expect(messages.status).toBe(503)
          expect(messages.body).toMatchObject({
            type: "error",
            error: { type: "overloaded_error", code: "UNAVAILABLE" }
          })
          const responses = yield* Http.attempt(gateway, "POST", "/v1/responses", {
            token: freshKey,
            json: { model: "fake/m1", input: "hi" }
          }, 10_000)
          expect(responses.status).toBe(503)
          expect(responses.body.error.code).toBe("UNAVAILABLE")
          // /healthz is about the process, which is fine.
          expect((yield* Http.attempt(base, "GET", "/healthz", {}, 3_000)).status).toBe(200)
          return took
        })

      /** Every member cut off for `seconds` in the middle of a two-step turn. */
      const outage = (name: string, seconds: number) =>
        Effect.gen(function*() {
          yield* phase(name)
          const requestId = yield* probeTurn
          const cutAt = Date.now()
          yield* Effect.forEach(members, (_, index) => proxyOf(index).cut("refuse"))
          fault++
          faultActive = true
          const notReady = yield* Effect.forEach(members, (_, index) => readyzBecomes(name, index, 503, 10_000), {
            concurrency: "unbounded"
          })
          const took = yield* expectUnavailable(1)
          yield* Effect.sleep(Duration.millis(Math.max(0, cutAt + seconds * 1000 - Date.now())))
          faultActive = false
          yield* Effect.forEach(members, (_, index) => proxyOf(index).restore)
          // Both measured from the moment the database is back.
          const [ready, turn] = yield* Effect.all([
            Effect.forEach(members, (_, index) => readyzBecomes(name, index, 200, 30_000), {
              concurrency: "unbounded"
            }),
            timeUntil(`${name}: the interrupted turn completes`, completed(requestId), 60_000)
          ], { concurrency: "unbounded" })
          figures.push(
            `${name}: /readyz 503 after ${Math.max(...notReady)} ms; a prompt answered 503 in ${took} ms; ` +
              `after the database was back: /readyz 200 in ${
                Math.max(...ready)
              } ms, the interrupted turn completed in ${turn} ms`
          )
        })

      yield* Effect.sleep("3 seconds")
      yield* outage("outage of every runner, 3 s", 3)
      yield* Effect.sleep("4 seconds")
      yield* outage(`outage of every runner past the lease, ${leaseSeconds + 3} s`, leaseSeconds + 3)
      yield* Effect.sleep("4 seconds")

      // --- One runner cut off from the database (new connections go unanswered) while it serves HTTP.
      {
        const name = `partition of one runner, ${2 * leaseSeconds + 2} s`
        yield* phase(name)
        const requestId = yield* probeTurn
        const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${probeAgent.id}'`)
        const cut = members.findIndex((member) => member.runnerAddress === row?.owner)
        expect(cut).toBeGreaterThanOrEqual(0)
        const others = members.map((_, index) => index).filter((index) => index !== cut)
        const cutAt = Date.now()
        yield* proxyOf(cut).cut("hold")
        fault++
        faultActive = true
        // The others take its turns on: measured from the cut.
        const turnTaken = yield* Effect.fork(
          timeUntil(`${name}: the cut runner's turn completes elsewhere`, completed(requestId), 30_000)
        )
        const notReady = yield* readyzBecomes(name, cut, 503, leaseSeconds * 1000)
        for (const index of others) expect(yield* readyz(rest(index))).toBe(200)
        const took = yield* expectUnavailable(cut)
        const turn = yield* Fiber.join(turnTaken)
        const record = (yield* call("GET", `/v1/agents/${probeAgent.id}/requests/${requestId}`)).body
        // Its tool call's result could not be journaled there: another runner resumed the turn.
        expect(record.outcome.result).toMatchObject({ resumed: true })
        // Past the lease, the operator sees it from any node that reaches the database.
        yield* Effect.sleep(Duration.millis(Math.max(0, cutAt + (leaseSeconds + 1) * 1000 - Date.now())))
        const listing =
          (yield* Http.client(rest(others[0]!)).get("/v1/admin/runners", { token: cluster.operatorToken })).body
        const listed = listing.data.find((runner: any) => runner.address === members[cut]!.runnerAddress)
        expect(listed).toMatchObject({ state: "unresponsive", healthy: false, database: "unreachable" })
        for (const index of others) {
          expect(listing.data.find((runner: any) => runner.address === members[index]!.runnerAddress)?.database).toBe(
            "reachable"
          )
        }
        const fromCut = yield* Http.attempt(
          rest(cut),
          "GET",
          "/v1/admin/runners",
          { token: cluster.operatorToken },
          10_000
        )
        expect(fromCut.status).toBe(503)
        yield* Effect.sleep(Duration.millis(Math.max(0, cutAt + (2 * leaseSeconds + 2) * 1000 - Date.now())))
        faultActive = false
        yield* proxyOf(cut).restore
        const ready = yield* readyzBecomes(name, cut, 200, 30_000)
        figures.push(
          `${name}: /readyz 503 on the cut runner after ${notReady} ms (lease ${leaseSeconds} s); a prompt there ` +
            `answered 503 in ${took} ms; its turn completed on another runner ${turn} ms after the cut; ` +
            `/readyz 200 ${ready} ms after the database was back`
        )
      }
      yield* Effect.sleep("4 seconds")

      // --- A restart of PostgreSQL itself (fast shutdown: every session ends), on the same port.
      {
        const name = "restart of PostgreSQL"
        yield* phase(name)
        const requestId = yield* probeTurn
        yield* Scope.close(postgresScope, Exit.void)
        const stoppedAt = Date.now()
        fault++
        faultActive = true
        const notReady = yield* Effect.forEach(members, (_, index) => readyzBecomes(name, index, 503, 10_000), {
          concurrency: "unbounded"
        })
        const took = yield* expectUnavailable(2)
        yield* Effect.sleep(Duration.millis(Math.max(0, stoppedAt + 3_000 - Date.now())))
        faultActive = false
        postgresScope = yield* Scope.make()
        yield* EmbeddedPostgres.start({ dataDir, postgresFlags, port: postgres.port }).pipe(
          Scope.extend(postgresScope),
          Effect.orDie
        )
        const startedAt = Date.now()
        const [ready, turn] = yield* Effect.all([
          Effect.forEach(members, (_, index) => readyzBecomes(name, index, 200, 30_000), {
            concurrency: "unbounded"
          }),
          timeUntil(`${name}: the interrupted turn completes`, completed(requestId), 60_000)
        ], { concurrency: "unbounded" })
        figures.push(
          `${name}: down ${startedAt - stoppedAt} ms; /readyz 503 after ${
            Math.max(...notReady)
          } ms; a prompt answered ` +
            `503 in ${took} ms; after it was back: /readyz 200 in ${Math.max(...ready)} ms, the interrupted turn ` +
            `completed in ${turn} ms`
        )
      }
      yield* Effect.sleep("3 seconds")
      yield* Fiber.interrupt(workload)
      // Sends still in flight (and their retries) get their answer before the checks.
      yield* timeUntil(
        "every send answered",
        Effect.sync(() => inFlight === 0),
        75_000
      )

      yield* phase("faults done; waiting for every request")
      // --- Every accepted request completes (and a send whose answer was lost either completed or never arrived).
      // Each agent's requests are asked after in the order they were sent (an agent runs them in that order),
      // all agents at once: asked a few at a time in one list, the requests of an agent still working through
      // its backlog held every asker, and those of other agents, long done, were never asked before the deadline.
      const outcomes = new Map<string, any>()
      const deadline = Date.now() + 60_000
      const sentByAgent = new Map<string, Array<[string, Sent]>>()
      for (const [requestId, entry] of sent) {
        sentByAgent.set(entry.agentId, [...(sentByAgent.get(entry.agentId) ?? []), [requestId, entry]])
      }
      yield* Effect.forEach(sentByAgent.values(), (agentSent) =>
        Effect.forEach(agentSent, ([requestId, entry]) =>
          Effect.gen(function*() {
            while (Date.now() < deadline) {
              const record = yield* call("GET", `/v1/agents/${entry.agentId}/requests/${requestId}?wait=20`)
              if (record.status === 404 && !entry.accepted) {
                return
              }
              // It arrived after all: it must complete like any accepted request.
              if (record.status === 200) {
                entry.accepted = true
              }
              if (record.status === 200 && record.body.state === "completed") {
                outcomes.set(requestId, record.body)
                return
              }
              if (record.status !== 200) yield* Effect.sleep("200 millis")
            }
          }), { discard: true }), { concurrency: "unbounded", discard: true })
      const accepted = [...sent].filter(([, entry]) => entry.accepted)
      // One not completed says where it is: its state and its agent's.
      const lost = yield* Effect.forEach(
        accepted.filter(([requestId]) => !outcomes.has(requestId)),
        ([requestId, entry]) =>
          Effect.map(
            call("GET", `/v1/agents/${entry.agentId}/requests/${requestId}`),
            (record) => `${requestId} ${record.body?.state ?? record.status} (agent ${entry.agentId})`
          )
      )
      expect(lost).toEqual([])
      for (const [requestId, record] of outcomes) {
        expect(record.outcome.error, requestId).toBeUndefined()
        expect(record.outcome.result.error, requestId).toBeNull()
      }
      // --- Every run created ended completed, one per key.
      const runsEnded = new Map<string, any>()
      const runsDeadline = Date.now() + 60_000
      yield* Effect.forEach(runKeys, ([key, entry]) =>
        Effect.gen(function*() {
          if (entry.id === undefined) return
          while (Date.now() < runsDeadline) {
            const run = yield* call("GET", `/v1/runs/${entry.id}?wait=20`)
            if (run.status === 200 && run.body.status !== "running") {
              runsEnded.set(key, run.body)
              return
            }
          }
        }), { concurrency: 6, discard: true })
      const runsCreated = [...runKeys].filter(([, entry]) => entry.id !== undefined)
      expect(runsCreated.length).toBeGreaterThan(0)
      // A run still going says where it is: its record, and the row its wake-ups are counted in.
      const unended = yield* Effect.forEach(runsCreated.filter(([key]) => !runsEnded.has(key)), ([key, entry]) =>
        Effect.gen(function*() {
          const run = yield* call("GET", `/v1/runs/${entry.id}`)
          const rows = yield* TestDatabase.query(
            databaseUrl,
            `SELECT owner, resume_failures, resume_after FROM agents WHERE id = '${entry.id}'`
          )
          return `${key} ${JSON.stringify(run.body)} ${JSON.stringify(rows)}`
        }))
      expect(unended).toEqual([])
      for (const [key, run] of runsEnded) {
        expect(run.status, `${key}: ${JSON.stringify(run.error)}`).toBe("completed")
      }
      expect(
        new Set(runsCreated.map(([, entry]) =>
          entry.id
        )).size
      ).toBe(runsCreated.length)
      const runsUncertain = [...runsEnded.values()].filter((run) => run.error?.uncertain === true).length

      // Every response on the platform key charged once, none lost: the ledger's model charges are the usage
      // records' costs, each rounded to the micro-USD; the balance is what the ledger adds up to.
      expect((yield* PrepaidTenant.charges(databaseUrl, tenantId)).problems).toEqual([])

      // A node that could not reach the database said so: never a 500.
      expect([...answers.other.keys()]).toEqual([])
      expect([...unavailableBodies].filter((body) => !/^UNAVAILABLE retry-after=\d+$/.test(body))).toEqual([])
      expect(answers.slowestInFault).toBeLessThan(unavailableWithinMs)

      yield* phase("requests settled; checking histories")
      // --- Histories are whole and in order: every prompt once, every tool call answered once, right after its call.
      let toolCallsInHistory = 0
      const histories = new Map<string, ReadonlyArray<FileWrites.Entry>>()
      for (const agentId of [...agents, probeAgent.id]) {
        let entries: Array<{ index: number; message: any }> = []
        let before: number | null = null
        do {
          const page: any =
            (yield* call("GET", `/v1/agents/${agentId}/history${before === null ? "" : `?before=${before}`}`))
              .body
          entries = [...page.entries, ...entries]
          before = page.next
        } while (before !== null)
        expect(entries.map((entry) => entry.index)).toEqual(entries.map((_, i) => i))
        histories.set(agentId, entries)
        const prompts = entries.filter((entry) => entry.message.role === "user").map((entry) => entry.message.content)
        expect(new Set(prompts.map((prompt) => JSON.stringify(prompt))).size, agentId).toBe(prompts.length)
        for (const [requestId, record] of outcomes) {
          if (sent.get(requestId)!.agentId === agentId && record.steeredInto === undefined) {
            const around = entries.slice(Math.max(0, record.began - 3), record.began + 4).map((entry) =>
              `${entry.index} ${entry.message.role} ${JSON.stringify(entry.message.content).slice(0, 80)}`
            )
            expect(JSON.stringify(prompts), `${requestId}: ${JSON.stringify(record)}\n${around.join("\n")}`).toContain(
              sent.get(requestId)!.text
            )
          }
        }
        toolCallsInHistory += Histories.expectToolCallsAnswered(entries, agentId)
      }

      // --- No tool call was sent twice.
      const duplicated = pages.requestedTwice()
      expect(duplicated).toEqual([])

      // --- File writes: none ran twice, each file agrees with its calls' results, the unknown ones are counted.
      const files = yield* FileWrites.check({ scripted: fileSteps, histories, get: (path) => call("GET", path) })
      expect(files.problems).toEqual([])
      expect(files.confirmed).toBeGreaterThan(0)

      // --- Event ids only grew for every watcher, none skipped an event untold, every moved turn said so. Each
      // watcher is read once it caught up with its agent's log as the agent's state says it ends (a watcher still
      // reconnecting after the last fault on a loaded machine is late, not wrong; one that never catches up is).
      const reached = (watcher: Watchers.Watcher) => {
        const last = watcher.marks.at(-1)
        return last === undefined ? -1 : last._tag === "event" ? last.id : last.to
      }
      // The end is the furthest of the state's cursor and what any of the agent's watchers reached: a state read
      // from an owner about to be replaced can answer a cursor behind what watchers of its successor saw.
      const lagging = Effect.map(
        Effect.forEach([...watchers], ([agentId, agentWatchers]) =>
          Effect.map(call("GET", `/v1/agents/${agentId}/state`), (state) => {
            const end = Math.max(state.body.cursor as number, ...agentWatchers.map(reached))
            // One behind says where its last connections went and how they ended.
            return agentWatchers.filter((watcher) =>
              reached(watcher) < end
            ).map((watcher) =>
              `${watcher.name}: at ${reached(watcher)} of ${end}\n  ${watcher.journal.slice(-6).join("\n  ")}`
            )
          })),
        (behind) =>
          behind.flat()
      )
      yield* lagging.pipe(
        Effect.repeat({ until: (behind) => behind.length === 0, schedule: Schedule.spaced("500 millis") }),
        Effect.timeout("60 seconds"),
        Effect.ignore
      )
      const neverCaughtUp = yield* lagging
      if (process.env.DBFAULTS_DEBUG) {
        for (const watcher of [...watchers.values()].flat()) {
          FsSync.writeFileSync(
            `/tmp/dbfaults-watcher-${watcher.name.replace(/\W/g, "_")}.log`,
            [
              ...watcher.journal,
              ...watcher.marks.map((mark) =>
                mark._tag === "gap"
                  ? `gap ${mark.from}..${mark.to}`
                  : `${mark.id} ${mark.data?.type} ${mark.data?.requestId ?? ""} ${mark.data?.event?.type ?? ""}`
              )
            ].join("\n")
          )
        }
      }
      const moved = [...outcomes].filter(([, record]) => record.outcome.result?.resumed === true)
      const violations = {
        neverCaughtUp,
        wentBack: [] as Array<string>,
        skipped: [] as Array<string>,
        missedResumes: [] as Array<string>
      }
      const resumesLost = new Set<string>()
      for (const [agentId, agentWatchers] of watchers) {
        const mine = moved.filter(([requestId]) => sent.get(requestId)!.agentId === agentId).map(([requestId]) =>
          requestId
        )
        const found = Watchers.verify(agentWatchers, {
          moved: mine,
          sentAt: new Map(mine.map((requestId) => [requestId, sent.get(requestId)!.sentAt]))
        })
        for (const violation of found.wentBack) violations.wentBack.push(violation)
        for (const violation of found.skipped) violations.skipped.push(violation)
        for (const violation of found.missedResumes) violations.missedResumes.push(violation)
        // A turn resumed, then lost again with its new owner's buffer at the next fault before any watcher read
        // it, every watcher told (see Watchers.verify).
        for (const requestId of found.resumesLost) resumesLost.add(requestId)
      }
      const all = [...watchers.values()].flat()
      const sum = (f: (watcher: Watchers.Watcher) => number) => all.reduce((total, watcher) => total + f(watcher), 0)
      const uncertain = [...outcomes].filter(([, record]) => record.outcome.uncertain === true).length
      console.log(
        `database faults: requests sent ${sent.size}, accepted ${accepted.length}, completed ${outcomes.size}, ` +
          `answered 503 ${answers.unavailable} times (slowest ${answers.slowest503} ms; of those sent during a fault ` +
          `${answers.slowestInFault} ms), moved turns ${moved.length} (turn_resumed lost with a buffer, every watcher ` +
          `told: ${resumesLost.size}), ` +
          `uncertain ${uncertain}, tool calls ${toolCallsInHistory} (pages fetched ${pages.calls.length}), ` +
          `lost ${lost.length}, duplicated tool calls ${duplicated.length}; watchers ${all.length}: reconnects ` +
          `${sum((w) => w.reconnects)}, cut off ${sum((w) => w.cutOff)}, stalls ${sum((w) => w.stalls)}, gaps ${
            sum((w) => w.marks.filter((mark) => mark._tag === "gap").length)
          }, unreachable ${sum((w) => w.unreachable)}; ${FileWrites.summary(files)}; stateless runs created ` +
          `${runsCreated.length}, ended completed ${runsEnded.size} (uncertain ${runsUncertain})\n${figures.join("\n")}`
      )
      expect(violations).toEqual({ neverCaughtUp: [], wentBack: [], skipped: [], missedResumes: [] })
      expect(moved.length).toBeGreaterThan(0)
    }),
  { timeout: 240_000 }
)
