/**
 * Tools served by the application, with the SDK as the application, over
 * real HTTP: parallel and sequential calls; a takeover while a call is out
 * (the old connection answers it, the new one gets the next); a connection
 * dropped mid-call and a deadline passing (outcome unknown, never resent,
 * counted at the application); and a drain of the node running the turn
 * while a call is out (its answer is taken, the turn finishes on the next
 * owner, the application reconnects by itself).
 */
import { Serve } from "@agent-runtime/sdk"
import { FakeUpstream, Http, TestCluster, TestDatabase, TestWorld } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** What each call did, in the application's own words. */
interface Ran {
  readonly tool: string
  readonly started: number
  ended: number
}

const recorder = () => {
  const ran: Array<Ran> = []
  const timed = (
    name: string,
    ms: number,
    executionMode: "parallel" | "sequential" = "parallel",
    deadlineMs?: number
  ) =>
    Serve.tool({
      name,
      description: `${name}: answers after ${ms} ms`,
      parameters: { type: "object", properties: { n: { type: "number" } } },
      executionMode,
      ...(deadlineMs === undefined ? {} : { deadlineMs }),
      execute: async (args) => {
        const entry: Ran = { tool: name, started: Date.now(), ended: 0 }
        ran.push(entry)
        await sleep(ms)
        entry.ended = Date.now()
        return `${name} done with ${JSON.stringify(args)}`
      }
    })
  return { ran, timed }
}

const serving = (api: ReturnType<typeof Http.client>, token: string, agentId: string, tools: number) =>
  Http.waitFor(
    () =>
      Effect.map(api.get(`/v1/agents/${agentId}`, { token }), (response) =>
        response.body.connected === true && response.body.tools.length === tools),
    "the application serves the agent's tools"
  )

/** Opens the SDK's server in the test's scope: closed (at once) when the test ends. */
const serveScoped = (agent: Serve.Agent, tools: ReadonlyArray<Serve.Tool<any>>, options: Serve.Options = {}) =>
  Effect.acquireRelease(
    Effect.promise(() => Serve.serve(agent, tools, options)),
    (server) => Effect.promise(() => server.close({ timeoutMs: 0 }))
  )

layer(TestWorld.layer(), { excludeTestServices: true, timeout: 120_000 })("application tools, with the SDK", (it) => {
  it.scoped("two parallel calls run together and one sequential runs alone; results in call order", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "apptools1")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const { ran, timed } = recorder()
      const agent = { baseUrl: world.node.rest, agentId: created.id, token: created.token }
      const server = yield* serveScoped(agent, [timed("a", 600), timed("b", 600), timed("s", 300, "sequential")])
      yield* serving(api, token, created.id, 3)

      world.upstream.script({
        toolCalls: [
          { id: "call_a", name: "a", arguments: { n: 1 } },
          { id: "call_b", name: "b", arguments: { n: 2 } },
          { id: "call_s", name: "s", arguments: { n: 3 } }
        ]
      })
      world.upstream.script({ text: "all three done" })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "go" } })).body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=25`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "all three done",
        toolErrors: 0,
        toolCalls: [
          { tool: "a", toolCallId: "call_a", ok: true },
          { tool: "b", toolCallId: "call_b", ok: true },
          { tool: "s", toolCallId: "call_s", ok: true }
        ]
      })
      const [a, b, s] = ["a", "b", "s"].map((name) => ran.find((entry) => entry.tool === name)!)
      expect(a!.started).toBeLessThan(b!.ended)
      expect(b!.started).toBeLessThan(a!.ended)
      expect(s!.started).toBeGreaterThanOrEqual(Math.max(a!.ended, b!.ended))
      expect(server.calls).toEqual({ a: 1, b: 1, s: 1 })
      // The model got the results in call order.
      const second = world.upstream.requests().filter((request) => request.protocol === "openai-chat").at(-1) as any
      const results = second.body.messages.filter((message: any) => message.role === "tool")
      expect(results.map((message: any) => message.tool_call_id)).toEqual(["call_a", "call_b", "call_s"])
      expect(JSON.stringify(results[0].content)).toContain("a done with")
    }))

  it.scoped("a takeover mid-call: the old connection answers its call, the new one gets the next", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "apptools2")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const agent = { baseUrl: world.node.rest, agentId: created.id, token: created.token }
      const old = recorder()
      const first = yield* serveScoped(agent, [old.timed("slow", 1_500)])
      yield* serving(api, token, created.id, 1)

      world.upstream.script({ toolCalls: [{ id: "call_1", name: "slow", arguments: { n: 1 } }] })
      world.upstream.script({ toolCalls: [{ id: "call_2", name: "slow", arguments: { n: 2 } }] })
      world.upstream.script({ text: "both answered" })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "go" } })).body
      yield* Http.waitFor(() => Effect.succeed(old.ran.length === 1), "the first call reaches the application")
      const fresh = recorder()
      const second = yield* serveScoped(agent, [fresh.timed("slow", 100)], { takeover: true })
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=25`, { token })).body
      expect(done.outcome.result).toMatchObject({
        reply: "both answered",
        toolCalls: [{ toolCallId: "call_1", ok: true }, { toolCallId: "call_2", ok: true }]
      })
      expect(first.calls).toEqual({ slow: 1 })
      expect(second.calls).toEqual({ slow: 1 })
      const replaced = yield* Effect.promise(() => first.replaced)
      expect(replaced._tag).toBe("ApplicationReplaced")
    }))

  it.scoped("a connection dropped mid-call, and a deadline passing: outcome unknown, never sent again", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "apptools3")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const agent = { baseUrl: world.node.rest, agentId: created.id, token: created.token }
      const { ran, timed } = recorder()
      // Deadline: 1 s for a call that takes 3 s.
      const server = yield* serveScoped(agent, [timed("late", 3_000, "parallel", 1_000), timed("hang", 60_000)])
      yield* serving(api, token, created.id, 2)
      world.upstream.script({ toolCalls: [{ id: "call_late", name: "late", arguments: {} }] })
      world.upstream.script({ text: "no answer in time" })
      const timedOut = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "late" } })).body
      const first = (yield* api.get(`/v1/agents/${created.id}/requests/${timedOut.id}?wait=25`, { token })).body
      expect(first.outcome.result.toolCalls).toEqual([
        { tool: "late", toolCallId: "call_late", ok: false, code: "timeout" }
      ])
      const history = (yield* api.get(`/v1/agents/${created.id}/history`, { token })).body
      const result = history.entries.find((entry: any) => entry.message.role === "toolResult").message
      expect(JSON.stringify(result.content)).toContain("whether the call took effect is unknown")

      // Dropped: the application goes away while its call runs (close without waiting).
      world.upstream.script({ toolCalls: [{ id: "call_hang", name: "hang", arguments: {} }] })
      world.upstream.script({ text: "the connection went away" })
      const dropped = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "hang" } })).body
      yield* Http.waitFor(() => Effect.succeed(ran.some((entry) => entry.tool === "hang")), "the call reaches the app")
      yield* Effect.promise(() => server.close({ timeoutMs: 0 }))
      const second = (yield* api.get(`/v1/agents/${created.id}/requests/${dropped.id}?wait=25`, { token })).body
      expect(second.outcome.result.toolCalls).toEqual([
        { tool: "hang", toolCallId: "call_hang", ok: false, code: "connection_lost" }
      ])
      // Each call reached the application once.
      expect(server.calls).toEqual({ late: 1, hang: 1 })
    }))

  it.scoped("progress extends a call's deadline and shows as tool_execution_update; an abort cancels the call", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "apptools4")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      const agent = { baseUrl: world.node.rest, agentId: created.id, token: created.token }
      const cancelled: Array<string> = []
      const patient = Serve.tool({
        name: "patient",
        description: "works for 2.5 s, telling its progress",
        deadlineMs: 1_000,
        execute: async (_args, ctx) => {
          for (let step = 1; step <= 5; step++) {
            await sleep(500)
            ctx.progress(step, 5, `step ${step}`)
          }
          return "finished"
        }
      })
      const endless = Serve.tool({
        name: "endless",
        description: "runs until cancelled",
        execute: (_args, ctx) =>
          new Promise((resolve) =>
            ctx.signal.addEventListener("abort", () => {
              cancelled.push(ctx.callId)
              resolve("stopped")
            })
          )
      })
      const server = yield* serveScoped(agent, [patient, endless])
      yield* serving(api, token, created.id, 2)
      const events = yield* Http.sse(world.node.rest, `/v1/agents/${created.id}/events`, { token })

      world.upstream.script({ toolCalls: [{ id: "call_p", name: "patient", arguments: {} }] })
      world.upstream.script({ text: "it finished" })
      const accepted = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "go" } })).body
      const done = (yield* api.get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=25`, { token })).body
      expect(done.outcome.result.toolCalls).toEqual([{ tool: "patient", toolCallId: "call_p", ok: true }])
      const updates = (yield* events.take((frame) => frame.data?.includes('"type":"response"') ?? false))
        .flatMap((frame) => frame.data === undefined ? [] : [JSON.parse(frame.data)])
        .filter((data) => data.type === "event" && data.event.type === "tool_execution_update")
      expect(updates.length).toBeGreaterThanOrEqual(3)
      expect(updates[0].event).toMatchObject({ toolCallId: "call_p", partialResult: { progress: 1, total: 5 } })

      world.upstream.script({ toolCalls: [{ id: "call_e", name: "endless", arguments: {} }] })
      const running = (yield* api.post(`/v1/agents/${created.id}/prompt`, { token, json: { text: "forever" } }))
        .body
      yield* Http.waitFor(() => Effect.succeed(server.inFlight === 1), "the endless call reaches the application")
      yield* api.post(`/v1/agents/${created.id}/abort`, { token, json: {} })
      yield* Http.waitFor(() => Effect.succeed(cancelled.length === 1), "the application is told the call is cancelled")
      const aborted = (yield* api.get(`/v1/agents/${created.id}/requests/${running.id}?wait=25`, { token })).body
      expect(aborted.state).toBe("completed")
      expect(server.calls).toEqual({ patient: 1, endless: 1 })
    }))

  it.scoped("tenant isolation: another tenant's credentials reach none of the agent's /clients routes", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const mine = yield* TestWorld.tenantWithModel(world, "apptools5")
      const theirs = yield* TestWorld.tenantWithModel(world, "apptools6")
      const created = (yield* mine.api.post("/v1/agents", { token: mine.token, json: { model: "fake/m1" } })).body
      const foreign = (yield* theirs.api.post("/v1/agents", { token: theirs.token, json: { model: "fake/m1" } }))
        .body
      for (const credential of [theirs.token, foreign.token, mine.token]) {
        const events = yield* Http.request(world.node.rest, "GET", `/clients/${created.id}/events?poll=1`, {
          token: credential
        })
        expect(events.status).toBe(401)
        const mcp = yield* Http.request(world.node.rest, "POST", `/clients/${created.id}/mcp`, {
          token: credential,
          headers: { "agent-runtime-connection": "conn_x" },
          json: { jsonrpc: "2.0", method: "notifications/agent-runtime/draining" }
        })
        expect(mcp.status).toBe(401)
        expect(mcp.body.code).toBe("UNAUTHORIZED")
      }
      // And the agent's own token reaches nothing of its tenant's API.
      const detail = yield* Http.request(world.node.rest, "GET", `/v1/agents/${created.id}`, {
        token: created.token
      })
      expect(detail.status).toBe(401)
    }))
})

it.scopedLive(
  "a drain mid-call: the call's answer is taken, the turn finishes on the next owner, the application reconnects",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({
        size: 2,
        databaseUrl,
        env: { ALLOW_PRIVATE_URLS: "true", RUNNER_LEASE_SECONDS: "4" }
      })
      const { api, token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "drain")
      const created = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
      /** The node running the agent now (shards settle while nodes join, so it is read when needed). */
      const ownerNow = Effect.gen(function*() {
        const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${created.id}'`)
        const index = cluster.members.findIndex((member) => member.up && member.runnerAddress === row?.owner)
        if (index === -1) return yield* Effect.die(new Error(`agent ${created.id} is owned by ${row?.owner}`))
        return index
      })
      yield* api.get(`/v1/agents/${created.id}`, { token })
      // The application connects through the node not running the agent, and reaches whichever node is up
      // when it reconnects (as through a load balancer).
      const first = yield* ownerNow
      const { ran, timed } = recorder()
      const other = cluster.members[1 - first]!.node.rest
      const server = yield* serveScoped({ baseUrl: other, agentId: created.id, token: created.token }, [
        timed("slow", 2_000)
      ], { fetch: cluster.fetchThroughLive })
      yield* serving(Http.client(other), token, created.id, 1)
      const firstConnection = server.connection

      upstream.script({ toolCalls: [{ id: "call_d1", name: "slow", arguments: { n: 1 } }] })
      upstream.script({ toolCalls: [{ id: "call_d2", name: "slow", arguments: { n: 2 } }] })
      upstream.script({ text: "done after the move" })
      const accepted = (yield* Http.client(other).post(`/v1/agents/${created.id}/prompt`, {
        token,
        json: { text: "go" }
      })).body
      yield* Http.waitFor(() => Effect.succeed(ran.length === 1), "the first call reaches the application")
      // Drain the node running the turn, mid-call.
      const owner = yield* ownerNow
      const survivor = cluster.members[1 - owner]!.node.rest
      yield* cluster.stop(owner, "SIGTERM")
      const done = (yield* Http.client(survivor).get(`/v1/agents/${created.id}/requests/${accepted.id}?wait=25`, {
        token
      })).body
      expect(done.state).toBe("completed")
      // The outcome lists the calls made on the node that ended the turn; the history holds them all.
      expect(done.outcome.result).toMatchObject({
        reply: "done after the move",
        resumed: true,
        toolCalls: [{ toolCallId: "call_d2", ok: true }]
      })
      const history = (yield* Http.client(survivor).get(`/v1/agents/${created.id}/history`, { token })).body
      const results = history.entries.flatMap((entry: any) =>
        entry.message.role === "toolResult" ? [entry.message] : []
      )
      expect(results.map((result: any) => [result.toolCallId, result.isError])).toEqual([
        ["call_d1", false],
        ["call_d2", false]
      ])
      expect(JSON.stringify(results[0].content)).toContain("slow done")
      expect(server.calls).toEqual({ slow: 2 })
      // It moved: the application was told, reconnected by itself, and serves the agent on its next owner.
      expect(server.connection).not.toBe(firstConnection)
      const detail = (yield* Http.client(survivor).get(`/v1/agents/${created.id}`, { token })).body
      expect(detail.connected).toBe(true)
    }),
  { timeout: 120_000 }
)
