/**
 * Event streams while the agent moves, watched as clients watch them: a live
 * SSE watcher on every node (reconnecting with Last-Event-ID) and a long
 * poll, while a two-step turn streams (~50 chunks 100 ms apart, then a tool
 * call) and the node running it is drained or killed mid-stream. Every
 * watcher must get every event after its cursor in order, or be told it
 * cannot; the drained node must exit; the turn must finish elsewhere.
 */
import { FakeUpstream, Http, TestCluster, TestDatabase, TestWorld, ToolServer, Watchers } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"

const leaseSeconds = 4
const drainTimeoutSeconds = 20

const setup = (size: number) =>
  Effect.gen(function*() {
    const upstream = yield* FakeUpstream.start()
    const pages = yield* ToolServer.start
    const databaseUrl = yield* TestDatabase.make
    const cluster = yield* TestCluster.start({
      size,
      databaseUrl,
      env: {
        ALLOW_PRIVATE_URLS: "true",
        RUNNER_LEASE_SECONDS: String(leaseSeconds),
        DRAIN_TIMEOUT_SECONDS: String(drainTimeoutSeconds),
        ...(process.env.STREAMS_DEBUG ? { LOG_LEVEL: "Debug" } : {})
      }
    })
    const { token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "streams")
    return { upstream, pages, databaseUrl, cluster, token }
  })

type World = Effect.Effect.Success<ReturnType<typeof setup>>

/** An agent owned by member `owner`, found by making agents until one lands there. */
const agentOwnedBy = (world: World, owner: number) =>
  Effect.gen(function*() {
    const api = Http.client(world.cluster.members[owner]!.node.rest)
    for (let i = 0; i < 40; i++) {
      const id = (yield* api.post("/v1/agents", {
        token: world.token,
        json: { model: "fake/m1", builtins: ["web_fetch"], ttlSeconds: 3600 }
      })).body.id as string
      // Reading its state starts it on its owner, which records itself.
      yield* api.get(`/v1/agents/${id}/state`, { token: world.token })
      const [row] = yield* TestDatabase.query(world.databaseUrl, `SELECT owner FROM agents WHERE id = '${id}'`)
      if (row?.owner === world.cluster.members[owner]!.runnerAddress) return id
    }
    return yield* Effect.die(new Error(`no agent landed on member ${owner}`))
  })

/** Waits until every live member reports and, together, they hold every shard, each some. */
const shardsSettled = (world: World) =>
  Effect.gen(function*() {
    const operator = world.cluster.members[0]!.node
    const live = world.cluster.members.filter((member) => member.up).length
    for (let i = 0; i < 100; i++) {
      const listed = (yield* Http.client(operator.rest).get("/v1/admin/runners", { token: operator.operatorToken }))
        .body as { data: Array<{ shards: number }>; shards: number }
      const held = listed.data.reduce((sum, runner) => sum + runner.shards, 0)
      if (listed.data.length === live && listed.data.every((runner) => runner.shards > 0) && held === listed.shards) {
        return
      }
      yield* Effect.sleep("200 millis")
    }
    return yield* Effect.die(new Error("the shards did not settle within 20 s"))
  })

/**
 * The member running the agent now. Shards still settle while nodes join (each new runner takes its share),
 * so the agent may have moved since it was made: the fault goes to whichever node runs its turn.
 */
const ownerNow = (world: World, agentId: string) =>
  Effect.gen(function*() {
    const [row] = yield* TestDatabase.query(world.databaseUrl, `SELECT owner FROM agents WHERE id = '${agentId}'`)
    const index = world.cluster.members.findIndex((member) => member.up && member.runnerAddress === row?.owner)
    if (index === -1) return yield* Effect.die(new Error(`agent ${agentId} is owned by ${row?.owner}, no live member`))
    return index
  })

/** A live SSE watcher pinned to each node (elsewhere while its node is down) and a poll watcher. */
const watchEverywhere = (world: World, agentId: string) =>
  Effect.gen(function*() {
    const { cluster, token } = world
    const cursor = (yield* Http.client(cluster.live()[0]!).get(`/v1/agents/${agentId}/state`, { token })).body
      .cursor as number
    const anyLive = () => cluster.live()[0]
    const pinned = (index: number) => () => cluster.members[index]!.up ? cluster.members[index]!.node.rest : anyLive()
    const live = yield* Effect.forEach(cluster.members, (_, index) =>
      Watchers.sse(`sse@${index}`, { agentId, token, cursor, base: pinned(index) }))
    const polled = yield* Watchers.poll("poll", { agentId, token, cursor, base: anyLive })
    return [...live, polled]
  })

/** A first step that streams 50 words 100 ms apart and calls web_fetch, then a short final reply. */
const scriptTwoSteps = (world: World, n: number) => {
  const words = Array.from({ length: 50 }, (_, i) => `w${i}`).join(" ")
  world.upstream.script({
    text: words,
    toolCalls: [{ id: `call_${n}`, name: "web_fetch", arguments: { url: `${world.pages.url}/s/${n}` } }],
    tokenDelayMs: 100
  })
  world.upstream.script({ text: `done ${n}` })
}

const settle = (world: World, agentId: string, requestId: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 12; i++) {
      const base = world.cluster.live()[0]!
      const answer = yield* Effect.either(
        Http.attempt(base, "GET", `/v1/agents/${agentId}/requests/${requestId}?wait=20`, { token: world.token }, 30_000)
      )
      if (answer._tag === "Right" && answer.right.body?.state === "completed") return answer.right.body
    }
    return yield* Effect.die(new Error(`request ${requestId} never completed`))
  })

/** Waits until the first watcher has seen `count` events that `matches` holds for. */
const awaitEvents = (watchers: ReadonlyArray<Watchers.Watcher>, matches: (data: any) => boolean, count: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 20_000
    const seen = () => watchers[0]!.marks.filter((mark) => mark._tag === "event" && matches(mark.data)).length
    while (seen() < count && Date.now() < deadline) yield* Effect.sleep("50 millis")
    expect(seen()).toBeGreaterThanOrEqual(count)
  })

/** Waits until every watcher has seen the request's response frame (or the time is up). */
const awaitResponses = (watchers: ReadonlyArray<Watchers.Watcher>, requestId: string, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    const done = () =>
      watchers.every((watcher) =>
        watcher.marks.some((mark) =>
          mark._tag === "event" && mark.data.type === "response" && mark.data.id === requestId
        )
      )
    while (!done() && Date.now() < deadline) yield* Effect.sleep("100 millis")
  })

const report = (watchers: ReadonlyArray<Watchers.Watcher>) =>
  watchers.map((watcher) =>
    `${watcher.name}: events ${watcher.marks.filter((mark) => mark._tag === "event").length}, gaps ${
      watcher.marks.filter((mark) => mark._tag === "gap").length
    }, reconnects ${watcher.reconnects}, cut off ${watcher.cutOff}, stalls ${watcher.stalls}, unreachable ${watcher.unreachable}`
  ).join("\n")

for (const fault of ["SIGTERM", "SIGKILL"] as const) {
  it.scopedLive(
    `${fault} of the node running a two-step turn: every watcher on every node follows the agent`,
    () =>
      Effect.gen(function*() {
        const world = yield* setup(3)
        const agentId = yield* agentOwnedBy(world, 0)
        const watchers = yield* watchEverywhere(world, agentId)
        yield* Effect.sleep("300 millis")
        scriptTwoSteps(world, 1)
        const accepted = (yield* Http.client(world.cluster.members[1]!.node.rest).post(`/v1/agents/${agentId}/prompt`, {
          token: world.token,
          json: { text: "two steps", requestId: "req_two_steps" }
        })).body
        expect(accepted.state).toBe("running")
        // Mid-stream of the first step: a dozen words in.
        yield* awaitEvents(watchers, (data) => Watchers.typeOf(data) === "message_update", 12)
        const owner = yield* ownerNow(world, agentId)
        const stoppedAt = Date.now()
        const exit = yield* world.cluster.stop(owner, fault).pipe(Effect.timeout(`${drainTimeoutSeconds + 5} seconds`))
        const exitedMs = Date.now() - stoppedAt
        expect(fault === "SIGKILL" || exit.code === 0 || exit.signal === "SIGTERM").toBe(true)
        const done = yield* settle(world, agentId, accepted.id)
        if (process.env.STREAMS_DEBUG) {
          world.cluster.members.forEach((member, i) =>
            Fs.writeFileSync(`/tmp/streams-node-${i}.log`, member.node.output())
          )
        }
        expect(done.outcome.result).toMatchObject({ reply: "done 1", resumed: true })
        yield* awaitResponses(watchers, accepted.id)
        const known = (yield* Http.client(world.cluster.live()[0]!).get(`/v1/agents/${agentId}/events?poll=1`, {
          token: world.token,
          headers: { "last-event-id": "0" }
        })).body
        const violations = Watchers.verify(watchers, {
          moved: [accepted.id],
          settled: [accepted.id],
          ...(known?.events === undefined ? {} : { known: known.events })
        })
        console.log(`${fault}: exited after ${exitedMs} ms\n${report(watchers)}`)
        if (fault === "SIGTERM") expect(exitedMs).toBeLessThan((drainTimeoutSeconds + 5) * 1000)
        if (process.env.STREAMS_DEBUG) {
          for (const watcher of watchers) {
            console.log(
              watcher.name,
              JSON.stringify(
                watcher.marks.map((mark) =>
                  mark._tag === "gap" ? `gap ${mark.from}-${mark.to}` : `${mark.id}:${Watchers.typeOf(mark.data)}`
                ).filter((s) => !s.includes("message_update"))
              )
            )
          }
          for (const member of world.cluster.members) {
            console.log(
              member.node.output().split("\n").filter((line) => /WARN|ERROR|resumed|drain|handed|Error/.test(line))
                .join("\n")
            )
          }
          Fs.writeFileSync("/tmp/drained-node.log", world.cluster.members[owner]!.node.output())
        }
        expect(violations).toEqual({ wentBack: [], skipped: [], missedResumes: [], resumesLost: [], behind: [] })
        for (const watcher of watchers) expect(watcher.stalls, watcher.name).toBe(0)
        // A drain hands the buffer on: nobody is told of a gap.
        if (fault === "SIGTERM") {
          for (const watcher of watchers) {
            expect(watcher.marks.filter((mark) => mark._tag === "gap"), watcher.name).toEqual([])
          }
        }
        // Never sent twice; after a kill -9 mid-stream the step is asked again and may not call it at all.
        expect(world.pages.count("/s/1")).toBe(fault === "SIGTERM" ? 1 : world.pages.count("/s/1") && 1)
      }),
    { timeout: 120_000 }
  )
}

it.scopedLive(
  "AgentDetail shows the agent's latest events up to its cursor, the same read on its owner and on another node",
  () =>
    Effect.gen(function*() {
      const world = yield* setup(2)
      const { cluster, token } = world
      // Shards still spread as the second runner joins: an agent moving between the two reads starts a new
      // term, whose log takes a fresh block of ids. Made once both runners hold their shares, it stays.
      yield* shardsSettled(world)
      const agentId = yield* agentOwnedBy(world, 0)
      // A turn of some 70 events, more than the detail shows (AgentEvents.recentLimit: 50).
      world.upstream.script({ text: Array.from({ length: 60 }, (_, i) => `w${i}`).join(" ") })
      const accepted = (yield* Http.client(cluster.members[1]!.node.rest).post(`/v1/agents/${agentId}/prompt`, {
        token,
        json: { text: "many words" }
      })).body
      yield* settle(world, agentId, accepted.id)
      const [owner, other] = yield* Effect.forEach(cluster.members, (member) =>
        Effect.map(Http.client(member.node.rest).get(`/v1/agents/${agentId}`, { token }), (answer) =>
          answer.body))
      expect(other.cursor).toBe(owner.cursor)
      expect(other.events).toEqual(owner.events)
      expect(owner.events.map((event: any) =>
        event.id
      )).toEqual(
        Array.from({ length: 50 }, (_, i) => owner.cursor - 49 + i)
      )
      expect(owner.events.at(-1).data).toMatchObject({ type: "response", id: accepted.id })
      // The events a poll from just before them reads.
      const polled = (yield* Http.client(cluster.members[1]!.node.rest).get(`/v1/agents/${agentId}/events?poll=1`, {
        token,
        headers: { "last-event-id": String(owner.cursor - 50) }
      })).body
      expect(polled.events).toEqual(owner.events)
    }),
  { timeout: 120_000 }
)

it.scopedLive(
  "a drain right after a node joins: the turn moves once, watchers on every node (the new one too) follow",
  () =>
    Effect.gen(function*() {
      const world = yield* setup(3)
      // The third node starts later: it joins while the agent's turn streams on the first.
      yield* world.cluster.stop(2, "SIGTERM")
      const agentId = yield* agentOwnedBy(world, 0)
      const watchers = yield* watchEverywhere(world, agentId)
      // It joins; the drain follows while the shards are still moving to it.
      yield* world.cluster.start(2)
      scriptTwoSteps(world, 2)
      const accepted = (yield* Http.client(world.cluster.members[1]!.node.rest).post(`/v1/agents/${agentId}/prompt`, {
        token: world.token,
        json: { text: "two steps", requestId: "req_joined" }
      })).body
      yield* awaitEvents(watchers, (data) => Watchers.typeOf(data) === "message_update", 8)
      const owner = yield* ownerNow(world, agentId)
      const stoppedAt = Date.now()
      yield* world.cluster.stop(owner, "SIGTERM")
      const exitedMs = Date.now() - stoppedAt
      const done = yield* settle(world, agentId, accepted.id)
      expect(done.outcome.result).toMatchObject({ reply: "done 2", resumed: true })
      yield* awaitResponses(watchers, accepted.id)
      console.log(`drain after a join: exited after ${exitedMs} ms\n${report(watchers)}`)
      expect(exitedMs).toBeLessThan((drainTimeoutSeconds + 5) * 1000)
      const violations = Watchers.verify(watchers, { moved: [accepted.id], settled: [accepted.id] })
      expect(violations).toEqual({ wentBack: [], skipped: [], missedResumes: [], resumesLost: [], behind: [] })
      for (const watcher of watchers) {
        expect(watcher.marks.filter((mark) => mark._tag === "gap"), watcher.name).toEqual([])
        expect(watcher.stalls, watcher.name).toBe(0)
      }
      expect(world.pages.count("/s/2")).toBe(1)
    }),
  { timeout: 120_000 }
)
