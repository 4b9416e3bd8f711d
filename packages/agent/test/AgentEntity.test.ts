/**
 * The `Agent` entity in process: `AgentRuntime.layer` on the cluster's
 * in-memory runner, the real journal (`AgentStore`) on a test database, the
 * runtime's own tools, and a scripted model.
 *
 * Not `Entity.makeTestClient`: its stand-in `Sharding` implements
 * `registerEntity` only, and the entity's build asks for `Agent.client`
 * (`sharding.makeClient`, used to wake a rebuilt instance after a fenced
 * write), so the build dies there. `InMemoryRunner` is the cluster's own
 * in-memory sharding (memory message storage, no-op runners): messages take
 * the cluster's real path, persisted ones deduplicated by their primary key.
 */
import { AccountsMigrations, Tenants } from "@agent-runtime/accounts"
import { BillingMigrations, Ledger, Payments, Rates } from "@agent-runtime/billing"
import { Egress, Resolver } from "@agent-runtime/egress"
import { FileMigrations } from "@agent-runtime/files"
import { IdentityMigrations, IdentityTokens } from "@agent-runtime/identity"
import { ModelsMigrations, UsageLog } from "@agent-runtime/models"
import { Database, DatabaseHealth, SealedSecret } from "@agent-runtime/store"
import { TelemetryMigrations, TelemetrySettings, TraceExport } from "@agent-runtime/telemetry"
import { AgentFixtures, TestDatabase, ToolServer } from "@agent-runtime/testing"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { MessageStorage, RunnerHealth, Runners, RunnerStorage, Sharding, ShardingConfig } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { expect, it, layer } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Layer, Option, Redacted, Schedule, Scope, Stream } from "effect"
import * as Crypto from "node:crypto"
import * as Agent from "../src/Agent.ts"
import * as AgentEvents from "../src/AgentEvents.ts"
import * as AgentMigrations from "../src/AgentMigrations.ts"
import * as AgentRuntime from "../src/AgentRuntime.ts"
import * as AgentStore from "../src/AgentStore.ts"
import * as Arrivals from "../src/Arrivals.ts"
import * as DrainModule from "../src/Drain.ts"
import { Drain } from "../src/Drain.ts"
import * as EventLog from "../src/EventLog.ts"
import * as Inputs from "../src/Inputs.ts"
import * as LocalAgents from "../src/LocalAgents.ts"
import * as RunnerReports from "../src/RunnerReports.ts"
import * as Settlements from "../src/Settlements.ts"
import type * as Turn from "../src/Turn.ts"

const { ScriptedModel } = AgentFixtures

const DatabaseLive = Layer.unwrapEffect(
  Effect.map(TestDatabase.make, (url) =>
    Database.layerClient(Redacted.make(url), {
      migrations: [
        AccountsMigrations.migrations,
        WebhookMigrations.migrations,
        BillingMigrations.migrations,
        FileMigrations.migrations,
        ModelsMigrations.migrations,
        AgentMigrations.migrations,
        IdentityMigrations.migrations,
        TelemetryMigrations.migrations
      ]
    }))
)

/**
 * `TestRunner.layer`, but on the test's sharding config: TestRunner's own is the default one, and the entity
 * manager hands its sharding's config to the entities (a fence waited out for 35 s).
 */
const InMemoryRunner = Sharding.layer.pipe(
  Layer.provideMerge(Runners.layerNoop),
  Layer.provideMerge(MessageStorage.layerMemory),
  Layer.provide([RunnerStorage.layerMemory, RunnerHealth.layerNoop])
)

const entityLayer = (sharding: Partial<ShardingConfig.ShardingConfig["Type"]> = {}) =>
  AgentRuntime.layer.pipe(
    Layer.provideMerge(Inputs.layer),
    Layer.provideMerge(TraceExport.layer().pipe(Layer.provideMerge(TelemetrySettings.layer))),
    Layer.provideMerge(AgentFixtures.layerTools.pipe(Layer.provideMerge(IdentityTokens.layer()))),
    Layer.provideMerge(InMemoryRunner),
    Layer.provideMerge(Layer.mergeAll(
      AgentStore.layer,
      Layer.mergeAll(UsageLog.layer, Ledger.layer).pipe(Layer.provide([Rates.layerConfig, Payments.layerNone])),
      DrainModule.layer,
      LocalAgents.layer,
      EventLog.layerLocalLogs,
      Tenants.layer,
      AgentFixtures.layer(),
      ShardingConfig.layer(sharding)
    )),
    Layer.provide(SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))),
    Layer.provide(Egress.layer({ allowPrivate: true }).pipe(Layer.provide(Resolver.layer))),
    Layer.provideMerge(DatabaseLive)
  )

const EntityLive = entityLayer()

/** A new tenant with one agent on the scripted model, and the agent's client. */
const newAgent = (name: string, config: Partial<Turn.TurnInput["config"]> = {}) =>
  Effect.gen(function*() {
    const tenant = yield* (yield* Tenants.Tenants).create({ name })
    const store = yield* AgentStore.AgentStore
    const agentId = `client_${name}`
    yield* store.insertAgent({
      id: agentId,
      tenantId: tenant.id,
      key: null,
      name,
      type: null,
      config: { model: "fake/m1", ...config },
      inputFingerprint: "unused",
      ttlSeconds: null
    }, [])
    const client = (yield* Agent.Agent.client)(agentId)
    /** Records a prompt and hands it to the agent, as Agents does. */
    const prompt = (request: Agent.PromptRequest) =>
      Effect.flatMap(store.insertRequest(Agent.requestOf(agentId, request)), (row) =>
        client.Prompt({
          request: row,
          ...(request.whileRunning === undefined ? {} : { whileRunning: request.whileRunning })
        }))
    return { agentId, tenantId: tenant.id, client, prompt }
  })

type Client = Effect.Effect.Success<ReturnType<typeof newAgent>>["client"]

/** A Node stream's text, once it ends. */
const readAll = (body: NodeJS.ReadableStream) =>
  new Promise<string>((resolve) => {
    let text = ""
    body.on("data", (chunk: Buffer) => text += chunk.toString())
    body.on("end", () => resolve(text))
  })

/** Events after `cursor` up to the settled response of `requestId`, read by long polls. */
const eventsUntilResponse = (client: Client, cursor: number, requestId: string) =>
  Effect.gen(function*() {
    const events: Array<{ readonly id: number; readonly data: any }> = []
    let at = cursor
    while (!events.some((entry) => entry.data?.type === "response" && entry.data.id === requestId)) {
      const polled = yield* client.Poll({ cursor: at, waitMillis: 1_000 })
      for (const event of polled.events) events.push(event)
      at = polled.cursor
    }
    return events
  }).pipe(Effect.timeout("15 seconds"))

/**
 * The agent's whole log, from its oldest event kept, up to `requestId`'s response. The response is told after
 * the request is settled in the journal, so a request seen completed may not have it yet.
 */
const wholeLogUntilResponse = (client: Client, requestId: string) =>
  Effect.gen(function*() {
    const start = yield* client.Poll({ cursor: 0, waitMillis: 0 }).pipe(
      Effect.catchTag("ReplayGap", (gap) => client.Poll({ cursor: gap.oldest - 1, waitMillis: 0 }))
    )
    const told = start.events.some((entry) => {
      const data = entry.data as { type?: string; id?: string } | null
      return data?.type === "response" && data.id === requestId
    })
    return told ? [...start.events] : [...start.events, ...yield* eventsUntilResponse(client, start.cursor, requestId)]
  })

/** The display events of one request, by type (the frames around them left out). */
const typesOf = (events: ReadonlyArray<{ readonly data: any }>, requestId: string) =>
  events.flatMap((entry) =>
    entry.data?.type === "event" && entry.data.requestId === requestId ? [String(entry.data.event.type)] : []
  )

const requestRow = (agentId: string, requestId: string) =>
  Effect.flatMap(AgentStore.AgentStore, (store) => store.getRequest(agentId, requestId)).pipe(
    Effect.map(Option.getOrThrow)
  )

/** Reads until `done` holds (every 20 ms, for at most 10 seconds). */
const waitUntil = <A, E, R>(read: Effect.Effect<A, E, R>, done: (value: A) => boolean) =>
  read.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (error) => error === "not yet", schedule: Schedule.spaced("20 millis") }),
    Effect.timeout("10 seconds")
  )

/** A new agent (see `newAgent`) whose first prompt has settled, and the scripted model. */
const settledAgent = (name: string) =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel
    model.reset()
    model.script({ text: "First." })
    const made = yield* newAgent(name)
    yield* made.prompt({ requestId: `req_${name}`, fingerprint: "fp", text: "one" })
    yield* waitUntil(requestRow(made.agentId, `req_${name}`), (row) => row.state === "completed")
    return { ...made, model }
  })

/** A watch stream up to the response frame of `requestId`, keep-alives left out. */
const untilResponse =
  (requestId: string) => <E, R>(stream: Stream.Stream<{ readonly id: number; readonly data: unknown }, E, R>) =>
    stream.pipe(
      Stream.filter((entry) => entry.id !== -1),
      Stream.takeUntil((entry) => {
        const data = entry.data as { type?: string; id?: string } | null
        return data?.type === "response" && data.id === requestId
      }),
      Stream.runCollect,
      Effect.map((entries) => [...entries] as Array<{ readonly id: number; readonly data: any }>)
    )

layer(EntityLive, { timeout: 60_000, excludeTestServices: true })("Agent entity", (it) => {
  it.effect("a prompt is recorded and answered with its RequestRecord, runs, and Status, Snapshot and Poll show it", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      model.script({ text: "Hello from the agent", hold: true })
      const { agentId, client, prompt } = yield* newAgent("prompt")
      const before = yield* client.Status()
      expect(before).toMatchObject({ running: false, activeRequest: null, queued: [] })

      const record = yield* prompt({
        requestId: "req_1",
        fingerprint: "fp_1",
        text: "hello",
        metadata: { ticket: "T-1" }
      })
      expect(record).toMatchObject({
        id: "req_1",
        method: "prompt",
        state: "running",
        fingerprint: "fp_1",
        prompt: "hello"
      })
      expect(record.metadata).toEqual({ ticket: "T-1" })

      // Held mid-response: the owner answers reads while the turn runs.
      const held = yield* model.held
      const running = yield* client.Status()
      expect(running).toMatchObject({ running: true, activeRequest: "req_1", queued: [] })
      const snapshot = yield* client.Snapshot()
      expect(snapshot.requestId).toBe("req_1")
      expect(snapshot.turn).toEqual([
        expect.objectContaining({ role: "user", content: "hello", requestId: "req_1", metadata: { ticket: "T-1" } }),
        { role: "assistant", content: [{ type: "text", text: "Hello from" }] }
      ])
      yield* held.release

      const events = yield* eventsUntilResponse(client, before.cursor, "req_1")
      expect(events.map((entry) => entry.id)).toEqual(events.map((_, i) => before.cursor + 1 + i))
      expect(typesOf(events, "req_1")).toEqual([
        "turn_opened",
        "agent_start",
        "message_start",
        "message_end",
        "turn_start",
        "message_start",
        "message_update",
        "message_update",
        "message_update",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end"
      ])
      const response = events.at(-1)!.data
      expect(response).toMatchObject({
        type: "response",
        id: "req_1",
        outcome: { result: { reply: "Hello from the agent", replyIndex: 1, messages: 2, error: null } }
      })
      expect(yield* requestRow(agentId, "req_1")).toMatchObject({ state: "completed", beganIndex: 0 })
      // The response frame goes out as the request settles; the runner lets go of it just after.
      const idle = yield* waitUntil(client.Status(), (status) => !status.running)
      expect(idle).toMatchObject({ activeRequest: null, queued: [], cursor: events.at(-1)!.id })
      // The turn was journaled: the next owner would rebuild the same history.
      const journal = yield* Effect.flatMap(AgentStore.AgentStore, (store) => store.messages(agentId))
      expect(journal.map((row) => [row.index, row.requestId, (row.message as { role: string }).role])).toEqual([
        [0, "req_1", "user"],
        [1, "req_1", "assistant"]
      ])
    }))

  it.effect("a turn busy past a second keeps its entity alive until the runner is idle; a short one asks nothing", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      const driver = yield* MessageStorage.MemoryDriver
      model.reset()
      const { agentId, client, prompt } = yield* newAgent("keep-alive")
      /** The cluster's keep-alive requests for this agent, with whether each was answered. */
      const keepAlives = () =>
        [...driver.requests.values()].filter((entry) =>
          entry.envelope._tag === "Request" && entry.envelope.tag === "Cluster/Entity/keepAlive" &&
          entry.envelope.address.entityId === agentId
        ).map((entry) => entry.replies.some((reply) => reply._tag === "WithExit"))
      const before = yield* client.Status()

      model.script({ text: "quick" })
      yield* prompt({ requestId: "req_short", fingerprint: "fp_short", text: "quick" })
      yield* eventsUntilResponse(client, before.cursor, "req_short")
      yield* waitUntil(client.Status(), (status) => !status.running)
      yield* Effect.sleep("1200 millis")
      expect(keepAlives()).toEqual([])

      model.script({ text: "a long answer", hold: true })
      yield* prompt({ requestId: "req_long", fingerprint: "fp_long", text: "take your time" })
      const held = yield* model.held
      yield* Effect.sleep("1500 millis")
      // Asked once, and held open while the turn runs.
      expect(keepAlives()).toEqual([false])
      yield* held.release
      yield* waitUntil(client.Status(), (status) => !status.running)
      // Let go once the runner is idle: answered, and no other asked.
      yield* waitUntil(Effect.sync(keepAlives), (asked) => asked.length === 1 && asked[0] === true)
      yield* Effect.sleep("1200 millis")
      expect(keepAlives()).toEqual([true])
    }))

  it.effect("the same requestId twice runs once, and answers the first request's record", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      model.script({ text: "Only once" })
      const { agentId, client, prompt } = yield* newAgent("twice")
      const { cursor } = yield* client.Status()
      const first = yield* prompt({ requestId: "req_same", fingerprint: "fp_a", text: "do it" })
      const again = yield* prompt({ requestId: "req_same", fingerprint: "fp_a", text: "do it" })
      // Another body under the same id changes nothing either; the caller compares fingerprints (409).
      const other = yield* prompt({ requestId: "req_same", fingerprint: "fp_b", text: "something else" })
      expect([first.id, again.id, other.id]).toEqual(["req_same", "req_same", "req_same"])
      expect(other.fingerprint).toBe("fp_a")
      yield* eventsUntilResponse(client, cursor, "req_same")
      // Later deliveries of the id, after it settled, run nothing either.
      const late = yield* prompt({ requestId: "req_same", fingerprint: "fp_a", text: "do it" })
      expect(late.id).toBe("req_same")
      yield* Effect.sleep("200 millis")

      expect(model.calls()).toHaveLength(1)
      const journal = yield* Effect.flatMap(AgentStore.AgentStore, (store) => store.messages(agentId))
      expect(journal.map((row) => (row.message as { role: string }).role)).toEqual(["user", "assistant"])
      expect(yield* waitUntil(client.Status(), (status) => !status.running)).toMatchObject({ queued: [] })
    }))

  it.effect("a delivery tried again across a move, of a request an earlier owner already ran, runs nothing", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      const { agentId, client } = yield* newAgent("stale")
      const store = yield* AgentStore.AgentStore
      const sql = yield* SqlClient.SqlClient
      const sent = yield* store.insertRequest(
        Agent.requestOf(agentId, { requestId: "req_stale", fingerprint: "fp", text: "once" })
      )
      // An earlier owner ran it to its end before this one claimed the agent.
      yield* sql`UPDATE agent_requests SET state = 'completed', outcome = '{"result": {}}', ended_at = now(),
          started_at = now() - interval '10 seconds'
        WHERE agent_id = ${agentId} AND id = 'req_stale'`
      // The sender's retry reaches this owner with the row as it was sent.
      const record = yield* client.Prompt({ request: { ...sent, startedAt: sent.startedAt - 10 } })
      expect(record).toMatchObject({ id: "req_stale", state: "completed" })
      yield* Effect.sleep("300 millis")
      expect(model.calls()).toHaveLength(0)
      expect(yield* client.Status()).toMatchObject({ running: false, queued: [] })
    }))

  it.effect("Configure applies its changes at once: the next turn uses them, null removes, and they are kept", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      const { agentId, client, prompt } = yield* newAgent("configure", { systemPrompt: "Be kind." })
      const configured = yield* client.Configure({
        requestId: "cfg_1",
        fingerprint: "fp_cfg_1",
        changes: { systemPrompt: "Be terse.", modelHeaders: { "x-team": "alpha" }, thinkingLevel: "low" }
      })
      expect(configured).toMatchObject({ id: "cfg_1", method: "configure", state: "completed" })
      expect(configured.outcome?.result).toEqual({
        config: {
          model: "fake/m1",
          systemPrompt: "Be terse.",
          modelHeaders: { "x-team": "alpha" },
          thinkingLevel: "low"
        }
      })

      const { cursor } = yield* client.Status()
      yield* prompt({ requestId: "req_after", fingerprint: "fp", text: "hi" })
      yield* eventsUntilResponse(client, cursor, "req_after")
      expect(model.calls()[0]).toMatchObject({
        context: { systemPrompt: "Be terse." },
        modelHeaders: { "x-team": "alpha" },
        reasoning: "low"
      })

      const removed = yield* client.Configure({
        requestId: "cfg_2",
        fingerprint: "fp_cfg_2",
        changes: { systemPrompt: null, thinkingLevel: null }
      })
      expect(removed.outcome?.result).toEqual({ config: { model: "fake/m1", modelHeaders: { "x-team": "alpha" } } })
      const stored = yield* Effect.flatMap(AgentStore.AgentStore, (store) => store.findById(agentId))
      expect(Option.getOrThrow(stored).config).toEqual({ model: "fake/m1", modelHeaders: { "x-team": "alpha" } })
      // A configure delivered again is not applied again.
      const repeated = yield* client.Configure({
        requestId: "cfg_1",
        fingerprint: "fp_cfg_1",
        changes: { systemPrompt: "Be terse.", modelHeaders: { "x-team": "alpha" }, thinkingLevel: "low" }
      })
      expect(repeated.id).toBe("cfg_1")
      const after = yield* Effect.flatMap(AgentStore.AgentStore, (store) => store.findById(agentId))
      expect(Option.getOrThrow(after).config).toEqual({ model: "fake/m1", modelHeaders: { "x-team": "alpha" } })
    }))

  it.effect("Abort cancels the queued requests and stops the running turn, keeping what was said", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      model.script({ text: "A long answer that is cut", hold: true })
      const { agentId, client, prompt } = yield* newAgent("abort")
      const { cursor } = yield* client.Status()
      yield* prompt({ requestId: "req_run", fingerprint: "fp", text: "talk" })
      yield* model.held
      yield* prompt({ requestId: "req_q1", fingerprint: "fp", text: "then this" })
      yield* prompt({ requestId: "req_q2", fingerprint: "fp", text: "and this" })
      expect(yield* client.Status()).toMatchObject({ activeRequest: "req_run", queued: ["req_q1", "req_q2"] })

      const aborted = yield* client.Abort({ requestId: "abort_1", fingerprint: "fp_abort" })
      expect(aborted).toMatchObject({ id: "abort_1", method: "abort", state: "completed" })
      expect(aborted.outcome?.result).toEqual({ cancelled: ["req_q1", "req_q2"], aborted: "req_run", inputs: [] })

      const events = yield* eventsUntilResponse(client, cursor, "req_run")
      expect(typesOf(events, "req_run").slice(-3)).toEqual(["message_end", "turn_end", "agent_end"])
      expect(yield* requestRow(agentId, "req_run")).toMatchObject({
        state: "completed",
        outcome: { error: "aborted", code: "aborted" }
      })
      for (const id of ["req_q1", "req_q2"]) {
        expect(yield* requestRow(agentId, id)).toMatchObject({
          state: "completed",
          outcome: { error: "cancelled by an abort request", code: "cancelled" }
        })
      }
      const journal = yield* Effect.flatMap(AgentStore.AgentStore, (store) => store.messages(agentId))
      expect(journal.map((row) => row.message)).toEqual([
        expect.objectContaining({ role: "user", content: "talk" }),
        expect.objectContaining({
          role: "assistant",
          stopReason: "aborted",
          content: [{ type: "text", text: "A long answer" }]
        })
      ])
      expect(model.calls()).toHaveLength(1)
      expect(yield* waitUntil(client.Status(), (status) => !status.running)).toMatchObject({
        activeRequest: null,
        queued: []
      })
    }))

  it.effect(
    "an abort sent right after a prompt ends it, whether its turn was queued, being set up or running",
    () =>
      Effect.gen(function*() {
        const model = yield* ScriptedModel
        model.reset()
        // The turn holds its model call: only the abort can end it. A new tenant each time, so the turn's setup
        // reads its telemetry settings from the database (a window an abort once slipped through).
        for (let i = 0; i < 12; i++) {
          const { agentId, client, prompt } = yield* newAgent(`abort-at-once-${i}`)
          model.script({ text: "never finished", hold: true })
          const { cursor } = yield* client.Status()
          yield* prompt({ requestId: `req_${i}`, fingerprint: "fp", text: "talk" })
          if (i % 3 === 1) yield* Effect.yieldNow()
          if (i % 3 === 2) yield* Effect.sleep(Duration.millis(i))
          yield* client.Abort({ requestId: `abort_${i}`, fingerprint: "fp_abort" })
          yield* eventsUntilResponse(client, cursor, `req_${i}`).pipe(Effect.timeout("10 seconds"))
          const row = yield* requestRow(agentId, `req_${i}`)
          expect(row.state).toBe("completed")
          expect(["aborted", "cancelled"]).toContain(row.outcome?.code)
        }
      }),
    30_000
  )

  it.effect("Watch streams the events after a cursor, live and replayed", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      model.script({ text: "Watched" }, { text: "Watched again" })
      const { client, prompt } = yield* newAgent("watch")
      const { cursor } = yield* client.Status()
      const live = yield* client.Watch({ cursor }).pipe(untilResponse("req_w1"), Effect.fork)
      // However late the watcher attaches, it gets every event after its cursor: replayed, then live.
      yield* prompt({ requestId: "req_w1", fingerprint: "fp", text: "one" })
      const seen = yield* Fiber.join(live).pipe(Effect.timeout("10 seconds"))
      expect(seen[0]!.id).toBe(cursor + 1)
      expect(seen.map((entry) => entry.id)).toEqual(seen.map((_, i) => cursor + 1 + i))
      expect(typesOf(seen, "req_w1")[0]).toBe("turn_opened")

      // From a cursor in the middle: the events after it are replayed, then it goes on live.
      const middle = seen[4]!.id
      const replayed = yield* client.Watch({ cursor: middle }).pipe(untilResponse("req_w1"))
      expect(replayed).toEqual(seen.slice(5))

      const next = yield* client.Watch({ cursor: seen.at(-1)!.id }).pipe(untilResponse("req_w2"), Effect.fork)
      yield* prompt({ requestId: "req_w2", fingerprint: "fp", text: "two" })
      const second = yield* Fiber.join(next).pipe(Effect.timeout("10 seconds"))
      expect(second[0]!.id).toBe(seen.at(-1)!.id + 1)
      expect(second.at(-1)!.data).toMatchObject({ type: "response", id: "req_w2" })

      // A cursor from before the log (another owner's, say) is a gap, not a silent skip.
      const gap = yield* client.Poll({ cursor: cursor - 10, waitMillis: 0 }).pipe(Effect.flip)
      expect(gap).toMatchObject({ _tag: "ReplayGap", cursor: cursor - 10 })
    }))

  it.scoped("an entity built on a journal with an unfinished turn resumes it with turn_resumed", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      model.script({ text: "Picked up where it stopped." })
      const pages = yield* ToolServer.start
      // Made, not yet messaged: the entity is built on the first message.
      const { agentId, client, tenantId } = yield* newAgent("resume", { builtins: ["web_fetch"] })
      // A runner that is gone now claimed the agent, began the turn, journaled the model's tool call and sent it,
      // and was lost before its result came back.
      const store = yield* AgentStore.AgentStore
      const lost = yield* store.claim(agentId, "127.0.0.1:1")
      yield* store.insertRequest({
        agentId,
        id: "req_lost",
        method: "prompt",
        fingerprint: "fp",
        input: { text: "fetch it" }
      })
      const write = (statement: AgentStore.Write) => store.fenced(agentId, lost.epoch, statement)
      yield* write(store.markRunning(agentId, "req_lost", 0, { tenantId, type: "run.started", data: {} }))
      yield* write(
        store.appendMessage(agentId, 0, "req_lost", {
          role: "user",
          content: "fetch it",
          timestamp: 1,
          requestId: "req_lost"
        })
      )
      yield* write(store.appendMessage(
        agentId,
        1,
        "req_lost",
        AgentFixtures.messageOf(
          { toolCalls: [{ id: "c1", name: "web_fetch", arguments: { url: `${pages.url}/once` } }] },
          "fake/m1"
        )
      ))
      yield* write(store.startToolCall(agentId, "req_lost", "c1", "web_fetch"))

      // The first message builds the entity here, on the journal: it claims the agent and resumes the turn.
      yield* client.Wake()
      const settled = yield* waitUntil(requestRow(agentId, "req_lost"), (row) => row.state === "completed")

      expect(settled.outcome).toMatchObject({
        result: {
          reply: "Picked up where it stopped.",
          replyIndex: 3,
          messages: 4,
          resumed: true,
          toolCalls: [{ tool: "web_fetch", toolCallId: "c1", ok: false, code: "unknown_outcome" }]
        },
        uncertain: true
      })
      expect(settled.resumes).toBe(1)
      // The call was sent by the lost runner: never again.
      expect(pages.count("/once")).toBe(0)
      expect(model.calls()).toHaveLength(1)
      expect(model.calls()[0]!.context.messages.map((message) => message.role)).toEqual([
        "user",
        "assistant",
        "toolResult"
      ])

      // The new owner's log starts on a fresh block of ids; its first event says the turn was resumed.
      const events = yield* wholeLogUntilResponse(client, "req_lost")
      expect(events[0]!.data).toEqual({
        type: "event",
        requestId: "req_lost",
        event: { type: "turn_resumed", index: 2 }
      })
      expect(typesOf(events, "req_lost")).not.toContain("turn_opened")
      expect(events.at(-1)!.data).toMatchObject({ type: "response", id: "req_lost" })
    }))

  it.scoped("a turn this runner began, found unfinished when it builds the entity again, says turn_recovered", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel
      model.reset()
      model.script({ text: "Recovered." })
      const { agentId, client, tenantId } = yield* newAgent("recover")
      // This runner's address claimed the agent and began the turn, and its process was lost (restarted since
      // under the same address): the entity, built on the first message, goes on with it here.
      const config = yield* ShardingConfig.ShardingConfig
      const here = Option.match(config.runnerAddress, { onNone: () => "local", onSome: RunnerReports.addressOf })
      const store = yield* AgentStore.AgentStore
      const before = yield* store.claim(agentId, here)
      yield* store.insertRequest({
        agentId,
        id: "req_here",
        method: "prompt",
        fingerprint: "fp",
        input: { text: "go on" }
      })
      const write = (statement: AgentStore.Write) => store.fenced(agentId, before.epoch, statement)
      yield* write(store.markRunning(agentId, "req_here", 0, { tenantId, type: "run.started", data: {} }))
      yield* write(
        store.appendMessage(agentId, 0, "req_here", {
          role: "user",
          content: "go on",
          timestamp: 1,
          requestId: "req_here"
        })
      )

      yield* client.Wake()
      const settled = yield* waitUntil(requestRow(agentId, "req_here"), (row) => row.state === "completed")
      expect(settled.outcome).toMatchObject({ result: { reply: "Recovered.", resumed: true }, uncertain: false })
      const events = yield* wholeLogUntilResponse(client, "req_here")
      expect(events[0]!.data).toEqual({
        type: "event",
        requestId: "req_here",
        event: { type: "turn_recovered", index: 1 }
      })
      expect(typesOf(events, "req_here")).not.toContain("turn_resumed")
      expect(events.at(-1)!.data).toMatchObject({ type: "response", id: "req_here" })
    }))

  it.scoped(
    "an instance whose agent another runner claimed closes its log at once: its readers are told to go on",
    () =>
      Effect.gen(function*() {
        const { agentId, client, model, prompt } = yield* settledAgent("superseded")

        // Readers on this node: a listener on the local log (an SSE writer or a long-poll's wait) and a Watch.
        const localLogs = yield* EventLog.LocalLogs
        const log = Option.getOrThrow(localLogs.get(agentId))
        let told = false
        yield* log.listen(Option.none(), { entry: () => {}, close: () => void (told = true) })
        const watch = yield* client.Watch({ cursor: yield* log.cursor }).pipe(Stream.runDrain, Effect.fork)

        // Another runner claims the agent (as after this one was paused past its lease); the next turn's first
        // journal write here is fenced.
        const store = yield* AgentStore.AgentStore
        yield* store.claim(agentId, "127.0.0.1:1")
        model.script({ text: "Second." })
        yield* prompt({ requestId: "req_s2", fingerprint: "fp", text: "two" })

        // Told at once, not left on a log no event reaches until a message makes this instance claim it again.
        yield* waitUntil(Effect.sync(() => told), (closed) => closed)
        yield* Fiber.join(watch).pipe(Effect.timeout("5 seconds"))
        expect(Option.isNone(localLogs.get(agentId))).toBe(true)
        // The request stays open in the journal for whichever runner holds the agent.
        expect((yield* requestRow(agentId, "req_s2")).state).not.toBe("completed")
        expect(model.calls()).toHaveLength(1)
      }),
    30_000
  )
})

// Its own layer: the drain closes this node's streams for good.
layer(
  AgentEvents.layer.pipe(
    Layer.provideMerge(Settlements.layer),
    Layer.provideMerge(DatabaseHealth.layer),
    Layer.provideMerge(EntityLive)
  ),
  {
    timeout: 60_000,
    excludeTestServices: true
  }
)("Agent events on a node that closed its streams", (it) => {
  it.scoped("an open stream ends with reconnect; new streams and polls are refused with 503 to retry elsewhere", () =>
    Effect.gen(function*() {
      const { agentId } = yield* settledAgent("closing")
      const events = yield* AgentEvents.AgentEvents
      const open = yield* events.eventBody(agentId, Option.none(), { snapshot: false, ready: {} })
      expect(open._tag).toBe("Node")
      const text = open._tag === "Node" ? readAll(open.body) : Promise.resolve("")

      yield* (yield* Drain).close
      expect(yield* Effect.promise(() => text)).toMatch(/event: reconnect\ndata: \{\}\n\n$/)
      // Opened now, a stream would end at once and its watcher come straight back: it is told to retry shortly.
      const refused = yield* events.eventBody(agentId, Option.none(), { snapshot: false, ready: {} }).pipe(Effect.flip)
      expect(refused).toMatchObject({ _tag: "Unavailable", retryAfter: 1 })
      const connection = yield* events.connectionBody(agentId, Option.none(), {
        snapshot: false,
        connection: Option.none(),
        takeover: false,
        version: 1
      }).pipe(Effect.flip)
      expect(connection).toMatchObject({ _tag: "Unavailable", retryAfter: 1 })
      const polled = yield* events.poll(agentId, 0, Duration.seconds(5)).pipe(Effect.flip)
      expect(polled).toMatchObject({ _tag: "Unavailable", retryAfter: 1 })
    }))
})

// Its own layer too: the last step closes this node's streams.
layer(
  AgentEvents.layer.pipe(
    Layer.provideMerge(Settlements.layer),
    Layer.provideMerge(DatabaseHealth.layer),
    Layer.provideMerge(EntityLive)
  ),
  { timeout: 60_000, excludeTestServices: true }
)("A request's wait on the node that owns its agent", (it) => {
  it.scoped("ends on its response, on its deadline and when the node closes its streams, reading what it answers", () =>
    Effect.gen(function*() {
      const events = yield* AgentEvents.AgentEvents
      const localLogs = yield* EventLog.LocalLogs
      const log = yield* EventLog.make({ agentId: "agent_wait", startCursor: 0 })
      yield* localLogs.register("agent_wait", log)
      let reads = 0
      let settledFrom = Infinity
      const read = Effect.sync(() => ++reads)
      const awaited = (requestId: string, limit: Duration.DurationInput) =>
        Effect.timed(
          events.awaitSettled("agent_wait", requestId, read, (n) => n >= settledFrom, Duration.decode(limit))
        )

      // Its response: read once before the wait and once after, at once.
      settledFrom = 2
      const responded = yield* Effect.fork(awaited("req_1", "20 seconds"))
      yield* Effect.sleep("100 millis")
      yield* log.publish({ type: "response", id: "req_2" })
      yield* log.publish({ type: "response", id: "req_1" })
      const [respondedIn, value] = yield* Fiber.join(responded)
      expect(value).toBe(2)
      expect(Duration.toMillis(respondedIn)).toBeLessThan(2_000)

      // Its response told with the row that settled it: answered from the row, read only before the wait.
      reads = 0
      settledFrom = Infinity
      const fromRow = (row: AgentStore.RequestRow) => row.endedAt!
      const told = yield* Effect.fork(
        events.awaitSettled("agent_wait", "req_5", read, (n) => n >= settledFrom, Duration.seconds(20), fromRow)
      )
      yield* Effect.sleep("100 millis")
      yield* log.publish({ type: "response", id: "req_5" }, { endedAt: 1234 } as AgentStore.RequestRow)
      expect(yield* Fiber.join(told)).toBe(1234)
      expect(reads).toBe(1)
      // Told without one (a statement sent twice): read again.
      reads = 0
      settledFrom = 2
      const untold = yield* Effect.fork(
        events.awaitSettled("agent_wait", "req_6", read, (n) => n >= settledFrom, Duration.seconds(20), fromRow)
      )
      yield* Effect.sleep("100 millis")
      yield* log.publish({ type: "response", id: "req_6" })
      expect(yield* Fiber.join(untold)).toBe(2)

      // Settled in the read made before it listened: no wait.
      reads = 0
      settledFrom = 1
      expect(yield* awaited("req_1", "20 seconds")).toEqual([expect.anything(), 1])

      // No response: the deadline ends it, with a last read.
      reads = 0
      settledFrom = Infinity
      const [timedIn, timedValue] = yield* awaited("req_3", "300 millis")
      expect(Duration.toMillis(timedIn)).toBeGreaterThanOrEqual(290)
      expect(Duration.toMillis(timedIn)).toBeLessThan(2_000)
      expect(timedValue).toBe(2)

      // The node closing its streams ends a long wait at once, with a last read.
      reads = 0
      const closing = yield* Effect.fork(awaited("req_4", "20 seconds"))
      yield* Effect.sleep("100 millis")
      yield* (yield* Drain).close
      const [closedIn, closedValue] = yield* Fiber.join(closing)
      expect(Duration.toMillis(closedIn)).toBeLessThan(2_000)
      expect(closedValue).toBe(2)
    }))
})

/** The text each model call answered, in the order the calls were made. */
const promptsAnswered = (calls: ReadonlyArray<{ readonly context: { readonly messages: ReadonlyArray<any> } }>) =>
  calls.map((call) => call.context.messages.filter((message) => message.role === "user").at(-1)?.content)

/** A node of its own, which `stop` stops; a fence is waited out in a second. */
const ownNode = Effect.gen(function*() {
  const scope = yield* Scope.make()
  const node = yield* Layer.buildWithScope(entityLayer({ shardLockExpiration: "1 second" }), scope)
  return { node, stop: Scope.close(scope, Exit.void) }
})

it.live(
  "a request handed to its agent's instance on the node runs there in order; a closed instance takes none",
  () =>
    Effect.gen(function*() {
      const { node, stop } = yield* ownNode
      const handed = yield* Effect.gen(function*() {
        const { agentId, model } = yield* settledAgent("handed")
        const store = yield* AgentStore.AgentStore
        const local = yield* LocalAgents.LocalAgents
        model.script({ text: "Second." }, { text: "Third." })
        // Handed over as Arrivals does, one after the other, each without a message through the cluster.
        for (const [requestId, text] of [["req_h2", "two"], ["req_h3", "three"]]) {
          const request = yield* store.insertRequest(Agent.requestOf(agentId, { requestId, fingerprint: "fp", text }))
          expect(yield* local.prompt(agentId, { request })).toBe(true)
        }
        yield* waitUntil(requestRow(agentId, "req_h3"), (row) => row.state === "completed")
        expect(promptsAnswered(model.calls())).toEqual(["one", "two", "three"])
        return { agentId, local, request: yield* store.getRequest(agentId, "req_h3") }
      }).pipe(Effect.provide(node))
      yield* stop
      // The instance closed with its node: a request for it now goes through the cluster, to its next owner.
      expect(yield* handed.local.prompt(handed.agentId, { request: Option.getOrThrow(handed.request) })).toBe(false)
    }),
  60_000
)

it.live(
  "an instance whose claim was fenced takes no hand-over and does not claim the agent back; a message does",
  () =>
    Effect.gen(function*() {
      const { node, stop } = yield* ownNode
      yield* Effect.gen(function*() {
        const { agentId, client, model } = yield* settledAgent("fenced-hand-over")
        const localLogs = yield* EventLog.LocalLogs
        const store = yield* AgentStore.AgentStore
        const local = yield* LocalAgents.LocalAgents
        const sql = yield* SqlClient.SqlClient
        const owner = Effect.map(
          sql<{ owner: string | null }>`SELECT owner FROM agents WHERE id = ${agentId}`,
          (rows) => rows[0]?.owner
        )

        // Another runner claims the agent while it is idle; an application connecting (its connection recorded)
        // finds the fence. No turn runs, so nothing asks the cluster to wake the agent.
        yield* store.claim(agentId, "127.0.0.1:1")
        yield* Effect.forkScoped(Stream.runDrain(client.Connect({ takeover: false })))
        yield* waitUntil(Effect.sync(() => localLogs.get(agentId)), Option.isNone)
        model.script({ text: "Third." })

        // A hand-over finds it superseded: declined, and the other runner keeps its claim.
        const request = yield* store.insertRequest(
          Agent.requestOf(agentId, { requestId: "req_x3", fingerprint: "fp", text: "three" })
        )
        expect(yield* local.prompt(agentId, { request })).toBe(false)
        yield* Effect.sleep("300 millis")
        expect(yield* owner).toBe("127.0.0.1:1")

        // A message the cluster sends claims it again, and the request runs.
        yield* client.Wake()
        yield* waitUntil(requestRow(agentId, "req_x3"), (row) => row.state === "completed")
        expect(yield* owner).not.toBe("127.0.0.1:1")
      }).pipe(Effect.scoped, Effect.provide(node))
      yield* stop
    }),
  90_000
)

it.live(
  "an agent claimed again after a fence runs its work again, and its node still stops",
  () =>
    Effect.gen(function*() {
      const { node, stop } = yield* ownNode
      yield* Effect.gen(function*() {
        const { agentId, client, model, prompt } = yield* settledAgent("reclaimed")
        const localLogs = yield* EventLog.LocalLogs
        const store = yield* AgentStore.AgentStore

        // Another runner claims the agent: the next turn's first write is fenced and the instance stops serving it.
        yield* store.claim(agentId, "127.0.0.1:1")
        model.script({ text: "Second." })
        yield* prompt({ requestId: "req_r2", fingerprint: "fp", text: "two" })
        yield* waitUntil(Effect.sync(() => localLogs.get(agentId)), Option.isNone)

        // A message claims it again (once the fence is waited out) and starts its runner again: the turn runs.
        yield* client.Wake()
        yield* waitUntil(requestRow(agentId, "req_r2"), (row) => row.state === "completed")
      }).pipe(Effect.provide(node))

      // The node stops: the runner started again inside the reclaim is interrupted like the first one was.
      const stopped = yield* stop.pipe(Effect.timeout("20 seconds"), Effect.option)
      expect(Option.isSome(stopped)).toBe(true)
    }),
  90_000
)

it.live(
  "a runner still in its turn when another fiber's write finds the fence stops before the agent is claimed again",
  () =>
    Effect.gen(function*() {
      const { node, stop } = yield* ownNode
      yield* Effect.gen(function*() {
        const { agentId, client, model, prompt } = yield* settledAgent("fenced-mid-turn")
        const localLogs = yield* EventLog.LocalLogs
        const store = yield* AgentStore.AgentStore

        // A turn holds halfway through its reply; another runner claims the agent meanwhile, and an application
        // connecting (its connection recorded: not the runner's write) finds the fence.
        model.script({ text: "Held, then given up.", hold: true }, { text: "Answered once." })
        yield* prompt({ requestId: "req_f2", fingerprint: "fp", text: "two" })
        const held = yield* model.held
        yield* store.claim(agentId, "127.0.0.1:1")
        yield* Effect.forkScoped(Stream.runDrain(client.Connect({ takeover: false })))
        yield* waitUntil(Effect.sync(() => localLogs.get(agentId)), Option.isNone)

        // A message claims the agent again and its turn runs on; the reply held before, let go now, writes
        // nothing under the new claim.
        yield* client.Wake()
        yield* waitUntil(requestRow(agentId, "req_f2"), (row) => row.state === "completed")
        yield* held.release
        yield* Effect.sleep("500 millis")
        const journal = yield* store.messages(agentId)
        expect(journal.map((row) => [row.requestId, (row.message as { role: string }).role])).toEqual([
          ["req_fenced-mid-turn", "user"],
          ["req_fenced-mid-turn", "assistant"],
          ["req_f2", "user"],
          ["req_f2", "assistant"]
        ])
        expect(JSON.stringify(journal.at(-1)!.message)).toContain("Answered once.")

        // The history read again at the claim is what the model is sent next: the reply given up is not in it.
        model.script({ text: "Third." })
        yield* prompt({ requestId: "req_f3", fingerprint: "fp", text: "three" })
        yield* waitUntil(requestRow(agentId, "req_f3"), (row) => row.state === "completed")
        const sent = model.calls().at(-1)!.context.messages.map((message) =>
          typeof message.content === "string"
            ? message.content
            : message.content.map((part) => part.type === "text" ? part.text : "").join("")
        )
        expect(sent).toEqual(["one", "First.", "two", "Answered once.", "three"])
      }).pipe(Effect.scoped, Effect.provide(node))
      yield* stop
    }),
  90_000
)

layer(DatabaseHealth.layer.pipe(Layer.provideMerge(EntityLive)), { timeout: 60_000, excludeTestServices: true })(
  "Arrivals: recorded requests reach their owner",
  (it) => {
    it.scoped(
      "rows recorded while no node listened run once one is sure; announced ones run in commit order, a large one read",
      () =>
        Effect.gen(function*() {
          const model = yield* ScriptedModel
          model.reset()
          model.script({ text: "a" }, { text: "b" }, { text: "c" }, { text: "d" }, { text: "e" }, { text: "f" })
          const { agentId } = yield* newAgent("arrivals")
          const store = yield* AgentStore.AgentStore
          const record = (requestId: string, text: string) =>
            store.insertRequest(Agent.requestOf(agentId, { requestId, fingerprint: requestId, text }), {})
          const completed = (row: AgentStore.RequestRow) => row.state === "completed"

          // Announced while nothing listens: no one hears them, and nothing runs.
          yield* record("req_a1", "one")
          yield* record("req_a2", "two")
          yield* Effect.sleep("300 millis")
          expect(model.calls()).toHaveLength(0)

          // Once its listening is sure, the node reads what its shards have queued.
          yield* Layer.build(Arrivals.layer)
          yield* waitUntil(requestRow(agentId, "req_a2"), completed)

          // Heard now, one after another. The last two are too large to ride on their announcements, and are
          // read: a long prompt, and a request id longer than a notification.
          const large = "x".repeat(10_000)
          const longId = `req_${"i".repeat(9_000)}`
          yield* record("req_a3", "three")
          yield* record("req_a4", "four")
          yield* record("req_a5", large)
          yield* record(longId, "six")
          yield* waitUntil(requestRow(agentId, longId), completed)
          expect(promptsAnswered(model.calls())).toEqual(["one", "two", "three", "four", large, "six"])
        }),
      30_000
    )
  }
)
