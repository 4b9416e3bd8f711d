/**
 * The fault suite: three runner processes on one embedded PostgreSQL, a
 * steady stream of prompts on many agents (replies streamed slowly, every
 * third prompt's turn calling a tool on a counting page server), and faults
 * injected one after another: SIGTERM of a runner, kill -9 of a runner,
 * SIGSTOP past the lease then SIGCONT, and a restart of every runner. Then,
 * from outside only: every accepted request completed, histories are whole
 * and in order, no tool call was sent twice, event cursors only grew, every
 * moved turn said turn_resumed, and every drained runner exited in time. A
 * few agents are also watched as clients watch them, with a live SSE stream
 * on every node and a long poll: each watcher got every event after its
 * cursor in order, or was told it could not (REPLAY_GAP, snapshot). A few
 * agents' tools are served by their application (the SDK, reaching whichever
 * node is up, as through a load balancer): no call reached it twice, and a
 * call without its answer told the model its outcome is unknown (or that it
 * was not sent). A webhook receiver gets the runs' events: every settled run's
 * run.completed arrives, written once whatever moved or crashed, and every
 * moved turn's run.started says it resumed. Every other turn fetching a page
 * also writes a file on its agent's workspace and edits it (the file tools,
 * see FileWrites): no write ran twice, each file agrees with its calls'
 * results, and a write whose outcome is unknown is counted as uncertain,
 * never passed as missing. Stateless runs go beside the agents' turns (each
 * fetching a page, created with an Idempotency-Key and retried on another
 * node when the answer is lost): every accepted run ends completed, once,
 * and none fetched its page twice.
 */
import { Serve } from "@agent-runtime/sdk"
import {
  FakeUpstream,
  FileWrites,
  Histories,
  Http,
  PrepaidTenant,
  TestCluster,
  TestDatabase,
  TestWorld,
  ToolServer,
  Watchers,
  WebhookReceiver
} from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Schedule } from "effect"
import * as Fs from "node:fs"

const agentCount = 12
const leaseSeconds = 4
const drainTimeoutSeconds = 20
const promptEveryMs = 150
/** Agents also watched by an SSE stream on every node and a poll. */
const closelyWatched = 3
/** Agents whose tools their application serves (the last ones). */
const served = 3

interface Sent {
  readonly agentId: string
  readonly text: string
  readonly sentAt: number
  accepted: boolean
}

it.scopedLive(
  "fault suite: drains, crashes, a paused runner and a full restart lose no accepted request",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const pages = yield* ToolServer.start
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({
        size: 3,
        databaseUrl,
        env: {
          ALLOW_PRIVATE_URLS: "true",
          RUNNER_LEASE_SECONDS: String(leaseSeconds),
          DRAIN_TIMEOUT_SECONDS: String(drainTimeoutSeconds),
          WEBHOOK_LEASE_SECONDS: String(leaseSeconds),
          ...(yield* PrepaidTenant.catalogEnv(upstream))
        }
      })
      // FAULTS_DEBUG=dir: every node's log and each poll watcher's trace are written there when the run ends.
      const debugDir = process.env.FAULTS_DEBUG
      const traces = new Map<string, Array<string>>()
      /** The closely watched agents' watchers. */
      const watched = new Map<string, Array<Watchers.Watcher>>()
      const trace = (agentId: string, line: string) => {
        if (debugDir !== undefined) traces.set(agentId, [...(traces.get(agentId) ?? []), line])
      }
      if (debugDir !== undefined) {
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            Fs.mkdirSync(debugDir, { recursive: true })
            cluster.started.forEach(({ index, node }, n) =>
              Fs.writeFileSync(`${debugDir}/node-${n}-member-${index}.log`, node.output())
            )
            for (const [agentId, lines] of traces) Fs.writeFileSync(`${debugDir}/${agentId}.trace`, lines.join("\n"))
            for (const watcher of [...watched.values()].flat()) {
              const file = `${debugDir}/${watcher.name.replace(/\W/g, "_")}`
              Fs.writeFileSync(`${file}.journal`, watcher.journal.join("\n"))
              Fs.writeFileSync(
                `${file}.marks`,
                watcher.marks.map((mark) =>
                  mark._tag === "gap"
                    ? `gap ${mark.from} -> ${mark.to}`
                    : `${mark.id} ${Watchers.typeOf(mark.data)} ${mark.data?.requestId ?? ""}`
                ).join("\n")
              )
            }
          })
        )
      }
      const { api, token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "faults")
      // The workload runs on the operator's platform key for a prepaid tenant: each response is charged from
      // credit, which no crash, drain or moved turn may charge twice or lose (checked at the end).
      const { node: first } = cluster.members[0]!
      const tenantId = yield* PrepaidTenant.make(first.rest, first.operatorToken, token)
      // Runs have a model of their own, so they take only the steps scripted for them.
      const runsModel = yield* api.put("/v1/providers/fakeruns", {
        token,
        json: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          models: [{ id: "r1", contextWindow: 100_000 }]
        }
      })
      expect(runsModel.status, runsModel.text).toBe(200)
      const receiver = yield* WebhookReceiver.start
      const hook = yield* api.post("/v1/webhooks", {
        token,
        json: { url: `${receiver.url}/runs`, events: ["run.started", "run.completed", "run.failed"] }
      })
      expect(hook.status, hook.text).toBe(201)
      receiver.trust("/runs", [hook.body.secret])
      const agentTokens = new Map<string, string>()
      const agents = yield* Effect.forEach(Array.from({ length: agentCount }), () =>
        Effect.map(
          api.post("/v1/agents", {
            token,
            json: { model: PrepaidTenant.model, builtins: ["web_fetch"], ttlSeconds: 3600 }
          }),
          (response) => {
            agentTokens.set(response.body.id, response.body.token)
            return response.body.id as string
          }
        ))

      const pick = () => {
        const live = cluster.live()
        return live.length === 0 ? undefined : live[Math.floor(Math.random() * live.length)]
      }
      /**
       * A request to any live node, tried again elsewhere while nodes come and go, and after a 503 (an owner that
       * did not answer in time on a crowded machine: a watcher that took the 503's body for the state once read
       * from an undefined cursor for the whole run).
       */
      const call = (method: string, path: string, json?: unknown, headers?: Record<string, string>) =>
        Effect.suspend(() => {
          const base = pick()
          return base === undefined
            ? Effect.fail(new Error("no live node"))
            : Http.attempt(base, method, path, {
              token,
              ...(json === undefined ? {} : { json }),
              ...(headers === undefined ? {} : { headers })
            }, 30_000)
        }).pipe(
          Effect.filterOrFail((response) => response.status !== 503, () => new Error("503")),
          Effect.retry({ times: 200, schedule: Schedule.spaced("200 millis") })
        )

      // --- Watchers: one long-polling reader per agent, through any node, for the whole run.
      const lastSeen = new Map<string, number>()
      const resumedSeen = new Set<string>()
      /**
       * What each agent's poll watcher read, in order: the requests its events belonged to, and where it was
       * told it missed events (409 REPLAY_GAP), with when.
       */
      type Read = { readonly requestId: string; readonly id: number } | { readonly gapAt: number }
      const readLog = new Map<string, Array<Read>>()
      const logRead = (agentId: string, entry: Read) => {
        const log = readLog.get(agentId) ?? []
        log.push(entry)
        readLog.set(agentId, log)
      }
      let cursorsWentBack = 0
      let gaps = 0
      const watch = (agentId: string) =>
        Effect.gen(function*() {
          let cursor = (yield* call("GET", `/v1/agents/${agentId}/state`)).body.cursor as number
          while (true) {
            const base = pick()
            if (base === undefined) {
              yield* Effect.sleep("200 millis")
              continue
            }
            const polled = yield* Effect.either(
              Http.attempt(base, "GET", `/v1/agents/${agentId}/events?poll=1&wait=5`, {
                token,
                headers: { "last-event-id": String(cursor) }
              }, 15_000)
            )
            if (polled._tag === "Left" || polled.right.status >= 500) {
              yield* Effect.sleep("200 millis")
              continue
            }
            const response = polled.right
            trace(
              agentId,
              `${new Date().toISOString()} ${base} after ${cursor}: ${response.status} ${
                response.status === 200
                  ? (response.body.events as Array<any>).map((event) =>
                    `${event.id}:${event.data.type === "event" ? event.data.event.type : event.data.type}${
                      event.data.requestId === undefined ? "" : `(${event.data.requestId})`
                    }`
                  ).join(" ")
                  : JSON.stringify(response.body)
              }`
            )
            if (response.status === 409) {
              // The previous owner was lost: read on from the oldest event the new owner holds.
              gaps++
              logRead(agentId, { gapAt: Date.now() })
              const oldest = Number(/oldest (\d+)/.exec(response.body.error)?.[1])
              if (oldest - 1 < cursor) cursorsWentBack++
              cursor = oldest - 1
              continue
            }
            for (const event of response.body.events as Array<{ id: number; data: any }>) {
              if (event.id <= cursor) cursorsWentBack++
              cursor = event.id
              if (event.data.type === "event") logRead(agentId, { requestId: event.data.requestId, id: event.id })
              if (
                event.data.type === "event" &&
                (event.data.event.type === "turn_resumed" || event.data.event.type === "turn_recovered")
              ) {
                resumedSeen.add(event.data.requestId)
              }
            }
            lastSeen.set(agentId, cursor)
          }
        })
      const watchers = yield* Effect.forkScoped(Effect.forEach(agents, watch, { concurrency: "unbounded" }))

      // --- Watchers as clients hold them: an SSE stream pinned to every node (elsewhere while it is down) and a poll.
      const anyLive = () => cluster.live()[0]
      const pinned = (index: number) => () => cluster.members[index]!.up ? cluster.members[index]!.node.rest : anyLive()
      for (const agentId of agents.slice(0, closelyWatched)) {
        const cursor = (yield* call("GET", `/v1/agents/${agentId}/state`)).body.cursor as number
        const live = yield* Effect.forEach(cluster.members, (_, index) =>
          Watchers.sse(`${agentId} sse@${index}`, { agentId, token, cursor, base: pinned(index) }))
        const polled = yield* Watchers.poll(`${agentId} poll`, { agentId, token, cursor, base: anyLive })
        watched.set(agentId, [...live, polled])
      }
      // --- Applications serving tools for the last agents, through whichever node is up (a load balancer).
      /** Every tool call the applications received, by the model's tool call id. */
      const appCalls = new Map<string, number>()
      const echo = Serve.tool({
        name: "app_echo",
        description: "Echoes its argument after a moment",
        execute: async (args, ctx) => {
          appCalls.set(ctx.toolCallId!, (appCalls.get(ctx.toolCallId!) ?? 0) + 1)
          await new Promise((resolve) =>
            setTimeout(resolve, 400)
          )
          return `echo ${JSON.stringify(args)}`
        }
      })
      const appAgents = agents.slice(-served)
      const servers = yield* Effect.forEach(appAgents, (agentId) =>
        Effect.acquireRelease(
          Effect.promise(() =>
            Serve.serve(
              { baseUrl: cluster.members[0]!.node.rest, agentId, token: agentTokens.get(agentId)! },
              [echo],
              { fetch: cluster.fetchThroughLive }
            )
          ),
          (server) => Effect.promise(() => server.close({ timeoutMs: 0 }))
        ))
      yield* Effect.forEach(appAgents, (agentId) =>
        Effect.gen(function*() {
          while (!(yield* call("GET", `/v1/agents/${agentId}`)).body.connected) yield* Effect.sleep("100 millis")
        }))

      /** How long each SIGTERM took to end its runner: at most the drain timeout and a few seconds. */
      const drainTimes: Array<number> = []
      const drainStop = (index: number) =>
        Effect.gen(function*() {
          const started = Date.now()
          yield* cluster.stop(index, "SIGTERM")
          drainTimes.push(Date.now() - started)
        })

      // --- Workload: a prompt every 150 ms, round-robin over the agents, each with its own request id.
      const sent = new Map<string, Sent>()
      /** The file steps scripted (see FileWrites). */
      const fileSteps: Array<number> = []
      let sequence = 0
      const sendOne = Effect.gen(function*() {
        const n = sequence++
        const agentId = agents[n % agentCount]!
        const requestId = `req_fault_${n}`
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
          })
          if (writes) fileSteps.push(n)
        } else if (n % 3 === 1) {
          // Whichever agent takes this script calls app_echo: served by its application, or not its tool.
          upstream.script({ toolCalls: [{ id: `call_${n}`, name: "app_echo", arguments: { n } }] })
        }
        upstream.script({ text: "one two three four five six seven eight", tokenDelayMs: 60 })
        const entry: Sent = { agentId, text, sentAt: Date.now(), accepted: false }
        sent.set(requestId, entry)
        const base = pick()
        if (base === undefined) {
          return
        }
        const answer = yield* Effect.either(
          Http.attempt(base, "POST", `/v1/agents/${agentId}/prompt`, {
            token,
            // While its application reconnects (its node was lost), the prompt runs; the calls say not connected.
            json: { text, requestId, allowDisconnected: true }
          }, 30_000)
        )
        if (answer._tag === "Right" && answer.right.status === 202) {
          entry.accepted = true
        }
      })
      // --- Stateless runs beside them: every tenth tick, one fetching a page; a lost answer is sent again, with
      // the same Idempotency-Key, to another node.
      const runKeys = new Map<string, { accepted: boolean; id?: string; body: unknown }>()
      const postRun = (key: string, body: unknown) =>
        Effect.either(call("POST", "/v1/runs", body, { "idempotency-key": key }).pipe(Effect.timeout("60 seconds")))
      let runSequence = 0
      const createRun = Effect.gen(function*() {
        const n = runSequence++
        const key = `run-fault-${n}`
        const body = { model: "fakeruns/r1", builtins: ["web_fetch"], input: `run ${n}` }
        // A spare answer per run: a run whose answer was lost with its node asks the model again, and every run
        // shares this queue, so without it the last run would find it empty.
        upstream.script([
          { toolCalls: [{ id: `rcall_${n}`, name: "web_fetch", arguments: { url: `${pages.url}/r/${n}?delay=600` } }] },
          { text: `run ${n} done`, tokenDelayMs: 60 },
          { text: `run ${n} done` }
        ], { model: "r1" })
        const entry: { accepted: boolean; id?: string; body: unknown } = { accepted: false, body }
        runKeys.set(key, entry)
        const answer = yield* postRun(key, body)
        if (answer._tag === "Right" && (answer.right.status === 202 || answer.right.status === 200)) {
          entry.accepted = true
          entry.id = answer.right.body.id
        }
      })
      let tick = 0
      const workload = yield* Effect.forkScoped(
        Effect.forever(
          Effect.zipRight(
            Effect.forkScoped(Effect.suspend(() => tick++ % 10 === 9 ? Effect.zipRight(sendOne, createRun) : sendOne)),
            Effect.sleep(Duration.millis(promptEveryMs))
          )
        )
      )

      // --- Faults.
      const began = Date.now()
      const phase = (name: string) => Effect.sync(() => console.log(`fault suite +${Date.now() - began} ms: ${name}`))
      const faults: Array<string> = []
      yield* Effect.sleep("3 seconds")
      faults.push("SIGTERM")
      yield* phase(faults.at(-1)!)
      yield* drainStop(0)
      yield* cluster.start(0)
      yield* Effect.sleep("3 seconds")
      faults.push("kill -9")
      yield* phase(faults.at(-1)!)
      yield* cluster.stop(1, "SIGKILL")
      yield* Effect.sleep(Duration.seconds(leaseSeconds + 2))
      yield* cluster.start(1)
      yield* Effect.sleep("3 seconds")
      faults.push("SIGSTOP past the lease, then SIGCONT")
      yield* phase(faults.at(-1)!)
      yield* cluster.pause(2)
      yield* Effect.sleep(Duration.seconds(leaseSeconds * 2 + 2))
      yield* cluster.resume(2)
      yield* Effect.sleep("4 seconds")
      faults.push("restart of every runner")
      yield* phase(faults.at(-1)!)
      yield* Effect.forEach([0, 1, 2], drainStop, { concurrency: "unbounded" })
      yield* Effect.forEach([0, 1, 2], (i) => cluster.start(i), { concurrency: "unbounded" })
      yield* Effect.sleep("3 seconds")
      yield* Fiber.interrupt(workload)
      // Sends still in flight get their answer (or time out) before the checks.
      yield* Effect.sleep("2 seconds")

      yield* phase("faults done; waiting for every request")
      // --- Every accepted request completes (and a send whose answer was lost either completed or never arrived).
      const outcomes = new Map<string, any>()
      const deadline = Date.now() + 120_000
      for (const [requestId, entry] of sent) {
        while (Date.now() < deadline) {
          const record = yield* call("GET", `/v1/agents/${entry.agentId}/requests/${requestId}?wait=20`)
          if (record.status === 404 && !entry.accepted) break
          // It arrived after all: it must complete like any accepted request.
          if (record.status === 200) entry.accepted = true
          if (record.status === 200 && record.body.state === "completed") {
            outcomes.set(requestId, record.body)
            break
          }
        }
      }
      const accepted = [...sent].filter(([, entry]) => entry.accepted)
      const lost = accepted.filter(([requestId]) => !outcomes.has(requestId))
      expect(lost.map(([requestId]) => requestId)).toEqual([])
      for (const [requestId, record] of outcomes) {
        expect(record.outcome.error, requestId).toBeUndefined()
        expect(record.outcome.result.error, requestId).toBeNull()
      }

      // --- Every accepted run ended, completed, as one run per key (retries found the same run).
      const runsEnded = new Map<string, any>()
      const runsDeadline = Date.now() + 120_000
      for (const [key, entry] of runKeys) {
        if (entry.id === undefined) {
          // Its answer was lost: the same key and body again find the run, or start it if it never arrived.
          const again = yield* postRun(key, entry.body)
          if (again._tag === "Left" || again.right.body?.id === undefined) continue
          entry.accepted = true
          entry.id = again.right.body.id
        }
        while (Date.now() < runsDeadline) {
          const run = yield* call("GET", `/v1/runs/${entry.id}?wait=20`)
          if (run.status === 200 && run.body.status !== "running") {
            runsEnded.set(key, run.body)
            break
          }
        }
      }
      const runsAccepted = [...runKeys.values()].filter((entry) => entry.accepted)
      expect(runsAccepted.length).toBeGreaterThan(0)
      expect([...runKeys].filter(([key, entry]) => entry.accepted && !runsEnded.has(key)).map(([key]) => key))
        .toEqual([])
      for (const [key, run] of runsEnded) {
        expect(run.status, `${key}: ${JSON.stringify(run.error)}`).toBe("completed")
        expect(run.text, key).toMatch(/^run \d+ done$/)
      }
      const listedRuns: Array<{ id: string }> = []
      for (let path: string | null = "/v1/runs?limit=100"; path !== null;) {
        const page: Http.Response = yield* call("GET", path)
        expect(page.status, page.text).toBe(200)
        for (const run of page.body) listedRuns.push(run)
        // The next page's URL, from the Link header; none on the last page.
        const link = page.headers.get("link")
        path = link === null ? null : /^<([^>]+)>; rel="next"$/.exec(link)![1]!
      }
      expect(new Set(listedRuns.map((run) => run.id))).toEqual(
        new Set([...runKeys.values()].flatMap((entry) => entry.id === undefined ? [] : [entry.id]))
      )
      const runsUncertain = [...runsEnded.values()].filter((run) => run.error?.uncertain === true).length

      yield* phase("requests settled; checking histories")
      // --- Histories are whole and in order: every prompt once, every tool call answered once, right after its call.
      let toolCallsInHistory = 0
      let appResults = 0
      let appNotSent = 0
      let appUnknown = 0
      const histories = new Map<string, ReadonlyArray<FileWrites.Entry>>()
      for (const agentId of agents) {
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
        expect(new Set(prompts).size, agentId).toBe(prompts.length)
        for (const [requestId, record] of outcomes) {
          if (sent.get(requestId)!.agentId === agentId && record.steeredInto === undefined) {
            expect(prompts, requestId).toContain(sent.get(requestId)!.text)
          }
        }
        toolCallsInHistory += Histories.expectToolCallsAnswered(entries, agentId)
        // Every app_echo call of a served agent: answered by its application (which got it), or told the model
        // its outcome is unknown, or that it was not sent (and then the application never got it).
        if (appAgents.includes(agentId)) {
          for (const entry of entries) {
            const message = entry.message
            if (message.role !== "toolResult" || message.toolName !== "app_echo") continue
            const text = JSON.stringify(message.content)
            appResults++
            if (!message.isError) {
              expect(appCalls.get(message.toolCallId), message.toolCallId).toBe(1)
            } else if (text.includes("was not made") || text.includes("is not connected")) {
              appNotSent++
              expect(appCalls.has(message.toolCallId), message.toolCallId).toBe(false)
            } else {
              appUnknown++
              expect(text, message.toolCallId).toMatch(/is unknown/)
            }
          }
        }
      }
      // No call reached an application twice (as its SDK counted them, too).
      expect([...appCalls].filter(([, times]) => times > 1)).toEqual([])
      expect(servers.reduce((sum, server) => sum + (server.calls.app_echo ?? 0), 0)).toBe(appCalls.size)

      // --- No tool call was sent twice.
      const duplicated = pages.requestedTwice()
      expect(duplicated).toEqual([])

      // --- Every response on the platform key charged once, none lost; the balance is what the ledger adds up to.
      expect((yield* PrepaidTenant.charges(databaseUrl, tenantId)).problems).toEqual([])

      // --- File writes: none ran twice, each file agrees with its calls' results, the unknown ones are counted.
      const files = yield* FileWrites.check({ scripted: fileSteps, histories, get: (path) => call("GET", path) })
      expect(files.problems).toEqual([])
      expect(files.confirmed).toBeGreaterThan(0)

      // --- Cursors only grew, and every moved turn said so. Each poll watcher is read once it caught up with
      // its agent's log as the agent's state says it ends (a loaded machine may hold a poll a while).
      const behind = Effect.filter(agents, (agentId) =>
        Effect.map(call("GET", `/v1/agents/${agentId}/state`), (state) =>
          (lastSeen.get(agentId) ?? -1) < (state.body.cursor as number)))
      yield* behind.pipe(
        Effect.repeat({
          until: (lagging) =>
            lagging.length === 0,
          schedule: Schedule.spaced("500 millis")
        }),
        Effect.timeout("60 seconds"),
        Effect.ignore
      )
      yield* Fiber.interrupt(watchers)
      expect(cursorsWentBack).toBe(0)
      const moved = [...outcomes].filter(([, record]) =>
        record.outcome.result?.resumed === true
      )
      // Seen, or the agent's watcher was told it missed events after the last event of the turn it read, and all
      // it read of the turn came from one owner (one block of ids): the gap held the rest of the turn, its
      // turn_resumed included (it moved twice, the second time off a lost runner, before the watcher read the
      // first turn_resumed). A watcher that read the turn from a later owner without its turn_resumed skipped
      // it silently.
      const toldOfTheRest = (requestId: string) => {
        const log = readLog.get(sent.get(requestId)!.agentId) ?? []
        const mine = log.flatMap((entry) => "requestId" in entry && entry.requestId === requestId ? [entry.id] : [])
        const blocks = new Set(mine.map((id) => Math.floor((id - 1) / 100_000)))
        const last = log.findLastIndex((entry) => "requestId" in entry && entry.requestId === requestId)
        return blocks.size <= 1 && log.slice(last + 1).some((entry) =>
          "gapAt" in entry && (last !== -1 || entry.gapAt >= sent.get(requestId)!.sentAt)
        )
      }
      expect(
        moved.filter(([requestId]) => !resumedSeen.has(requestId) && !toldOfTheRest(requestId))
          .map(([requestId]) => requestId)
      ).toEqual([])
      const uncertain = [...outcomes].filter(([, record]) => record.outcome.uncertain === true).length

      // --- The closely watched agents: every watcher on every node followed them through every fault.
      let told = 0
      let resumesLost = 0
      for (const [agentId, agentWatchers] of watched) {
        const mine = [...outcomes].filter(([requestId]) => sent.get(requestId)!.agentId === agentId)
        const { resumesLost: lostWithABuffer, ...violations } = Watchers.verify(agentWatchers, {
          moved: mine.filter(([, record]) => record.outcome.result?.resumed === true).map(([requestId]) => requestId),
          sentAt: new Map(mine.map(([requestId]) => [requestId, sent.get(requestId)!.sentAt])),
          settled: mine.filter(([, record]) => record.steeredInto === undefined).map(([requestId]) => requestId).slice(
            -1
          )
        })
        const named = Object.values(violations).flat().join("\n")
        for (const watcher of agentWatchers.filter((watcher) => named.includes(`${watcher.name}:`))) {
          console.log(`${watcher.name}, its last connections:\n${watcher.journal.slice(-40).join("\n")}`)
        }
        expect(violations, agentId).toEqual({ wentBack: [], skipped: [], missedResumes: [], behind: [] })
        // A turn_resumed nobody saw, every watcher told of a gap while its turn ran (see Watchers.verify).
        resumesLost += lostWithABuffer.length
        told += agentWatchers.reduce(
          (sum, watcher) => sum + watcher.marks.filter((mark) => mark._tag === "gap").length,
          0
        )
      }
      const streams = [...watched.values()].flat()
      expect(Math.max(...drainTimes)).toBeLessThan((drainTimeoutSeconds + 5) * 1000)

      yield* phase("checking webhooks")
      // --- Webhooks: every settled run's run.completed arrives, signed; it was written once, however the run
      // moved; no run ended twice or failed; every moved turn's run.started names its resumption.
      const isRun = (requestId: string) => requestId.startsWith("run_")
      const ended = (deliveries: ReadonlyArray<WebhookReceiver.Delivery>) =>
        new Set(
          deliveries.filter((delivery) =>
            delivery.event.type === "run.completed" && !isRun(delivery.event.data.requestId)
          ).map((delivery) => delivery.event.data.requestId)
        )
      const delivered = yield* receiver.waitFor("/runs", (got) => ended(got).size >= outcomes.size, 90_000)
      expect(delivered.filter((delivery) => delivery.verifiedWith.length === 0)).toEqual([])
      const events = new Map(delivered.map((delivery) => [delivery.event.id, delivery.event]))
      const endings = [...events.values()].filter((event) =>
        event.type !== "run.started" && !isRun(event.data.requestId)
      )
      // Each ended run's own ending was told once too.
      const runEndings = [...events.values()].filter((event) =>
        event.type !== "run.started" && isRun(event.data.requestId)
      )
      expect(runEndings.map((event) => event.data.requestId).sort())
        .toEqual([...runsEnded.values()].map((run) => run.id).sort())
      expect(endings.filter((event) => event.type === "run.failed")).toEqual([])
      expect(endings.map((event) => event.data.requestId).sort()).toEqual([...outcomes.keys()].sort())
      for (const event of endings) {
        expect(event.data.steeredInto, event.data.requestId).toEqual(outcomes.get(event.data.requestId).steeredInto)
      }
      const startedResumed = new Set(
        [...events.values()].filter((event) => event.type === "run.started" && event.data.resumes >= 1).map((event) =>
          event.data.requestId
        )
      )
      expect(moved.filter(([requestId]) => !startedResumed.has(requestId)).map(([requestId]) => requestId))
        .toEqual([])

      console.log(
        `fault suite: requests sent ${sent.size}, accepted ${accepted.length}, completed ${outcomes.size}, ` +
          `faults ${faults.length} (${faults.join("; ")}), moved turns ${moved.length}, uncertain ${uncertain}, ` +
          `tool calls ${toolCallsInHistory} (pages fetched ${pages.calls.length}), replay gaps ${gaps}, ` +
          `lost ${lost.length}, duplicated tool calls ${duplicated.length}; watchers on every node of ${watched.size} agents: ` +
          `${streams.length} watchers, ${streams.reduce((sum, watcher) => sum + watcher.reconnects, 0)} reconnects, ` +
          `${told} told of a gap (turn_resumed lost with a buffer, every watcher told: ${resumesLost}), application calls ${appResults} (received ${appCalls.size}, not sent ` +
          `${appNotSent}, outcome unknown ${appUnknown}), ${
            streams.reduce((sum, watcher) => sum + watcher.stalls, 0)
          } stalls; drained runners ` +
          `exited in ${drainTimes.map((ms) => (ms / 1000).toFixed(1)).join(", ")} s; webhook events ${events.size} ` +
          `(deliveries ${delivered.length}); ${FileWrites.summary(files)}; stateless runs accepted ` +
          `${runsAccepted.length}, ended ${runsEnded.size} (uncertain ${runsUncertain})`
      )
      expect(moved.length).toBeGreaterThan(0)
      expect(appCalls.size).toBeGreaterThan(0)
    }),
  { timeout: 300_000 }
)
