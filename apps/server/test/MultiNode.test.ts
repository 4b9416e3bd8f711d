/**
 * Nodes started together against one DATABASE_URL share tenants and keys,
 * and never print a secret.
 */
import { Serve } from "@agent-runtime/sdk"
import {
  FakeUpstream,
  FileWrites,
  Http,
  TestCluster,
  TestDatabase,
  TestNode,
  TestWorld,
  ToolServer,
  Watchers
} from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import * as Fs from "node:fs"
import * as NodeHttp from "node:http"

it.scoped("two processes on one database serve the same tenants", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const operatorToken = `aro_${"k".repeat(43)}`
    // Both start on an empty database at once: migrations must not collide.
    const [one, two] = yield* Effect.all([
      TestNode.start({ databaseUrl, operatorToken }),
      TestNode.start({ databaseUrl, operatorToken })
    ], { concurrency: 2 })
    const api1 = Http.client(one.rest)
    const api2 = Http.client(two.rest)

    const tenant = (yield* api1.post("/v1/admin/tenants", { token: operatorToken, json: { name: "acme" } })).body
    expect((yield* api2.get("/v1/me", { token: tenant.token })).body.tenant).toBe(tenant.id)
    const listed = (yield* api2.get("/v1/admin/tenants", { token: operatorToken })).body
    expect(listed.map((t: { id: string }) => t.id)).toEqual([tenant.id])

    const extra = (yield* api2.post("/v1/tokens", { token: tenant.token, json: { name: "ci" } })).body
    expect((yield* api1.get("/v1/me", { token: extra.token })).status).toBe(200)
    yield* api2.delete(`/v1/tokens/${extra.id}`, { token: tenant.token })
    // Revocation holds on the other node at once: no cache stands in the way.
    expect((yield* api1.get("/v1/me", { token: extra.token })).status).toBe(401)

    // Secrets appear in no output of either process.
    const output = one.output() + two.output()
    expect(output).toContain("Sent HTTP response")
    for (const secret of [operatorToken, tenant.token, extra.token]) expect(output).not.toContain(secret)
  }), { timeout: 60_000 })

it.scoped("a restarted node finds its data and migrates nothing again", () =>
  Effect.gen(function*() {
    const databaseUrl = yield* TestDatabase.make
    const first = yield* TestNode.start({ databaseUrl })
    const tenant = (yield* Http.client(first.rest).post("/v1/admin/tenants", {
      token: first.operatorToken,
      json: { name: "acme" }
    })).body
    expect(first.output()).toContain("message=migrated")
    yield* first.stop()
    const second = yield* TestNode.start({ databaseUrl })
    expect(second.output()).not.toContain("message=migrated")
    expect((yield* Http.client(second.rest).get("/v1/me", { token: tenant.token })).body.tenant).toBe(tenant.id)
    yield* second.stop()
    // No statement was sent on a pg session while another ran there (the listening session's LISTEN and UNLISTEN
    // of every channel, at start and stop): pg warns of it once per process.
    for (const node of [first, second]) expect(node.output()).not.toContain("already executing a query")
  }), { timeout: 60_000 })

/**
 * Two nodes started together on one fresh database, a tenant, and `count`
 * agents on the fake upstream: enough that both nodes own some.
 */
const twoNodesWithAgents = (count: number) =>
  Effect.gen(function*() {
    const upstream = yield* FakeUpstream.start()
    const databaseUrl = yield* TestDatabase.make
    const operatorToken = `aro_${"c".repeat(43)}`
    const env = { ALLOW_PRIVATE_URLS: "true" }
    const [one, two] = yield* Effect.all([
      TestNode.start({ databaseUrl, operatorToken, env }),
      TestNode.start({ databaseUrl, operatorToken, env })
    ], { concurrency: 2 })
    const api1 = Http.client(one.rest)
    const api2 = Http.client(two.rest)
    const tenant = (yield* api1.post("/v1/admin/tenants", { token: operatorToken, json: { name: "cluster" } })).body
    const token = tenant.token as string
    yield* api1.put("/v1/providers/fake", {
      token,
      json: { type: "openai-completions", baseUrl: `${upstream.url}/v1`, models: [{ id: "m1", contextWindow: 10000 }] }
    })
    const agents = yield* Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      () =>
        Effect.map(api1.post("/v1/agents", { token, json: { model: "fake/m1" } }), (response) =>
          response.body.id as string)
    )
    return { upstream, one, two, api1, api2, token, agents, databaseUrl }
  })

/** The runner listing once both runners report (within a lease's third) and together hold every shard. */
const bothHoldShards = (api: ReturnType<typeof Http.client>, operator: string) =>
  Effect.gen(function*() {
    let listed: any
    for (let i = 0; i < 50; i++) {
      listed = (yield* api.get("/v1/admin/runners", { token: operator })).body
      const held = listed.data.reduce((sum: number, runner: any) => sum + runner.shards, 0)
      if (listed.data.length === 2 && listed.data.every((runner: any) => runner.shards > 0) && held === 300) break
      yield* Effect.sleep("200 millis")
    }
    return listed
  })

it.scopedLive(
  "agents answer on any node: work goes to the owner, events stream from any node",
  () =>
    Effect.gen(function*() {
      const { agents, api1, api2, token, two } = yield* twoNodesWithAgents(8)
      const watched = yield* Http.sse(two.rest, `/v1/agents/${agents[0]}/events`, { token })
      yield* watched.take((frame) => frame.event === "ready")
      const requests = yield* Effect.forEach(agents, (id, i) =>
        Effect.map(
          (i % 2 === 0 ? api2 : api1).post(`/v1/agents/${id}/prompt`, { token, json: { text: `hello ${i}` } }),
          (response) => ({ id, requestId: response.body.id as string })
        ))
      for (const { id, requestId } of requests) {
        const done = (yield* api1.get(`/v1/agents/${id}/requests/${requestId}?wait=20`, { token })).body
        expect(done.state).toBe("completed")
        expect(done.outcome.result.reply).toBe("ok")
      }
      const frames = yield* watched.take((frame) => frame.data?.includes('"type":"response"') ?? false)
      expect(frames.some((frame) => frame.data?.includes('"type":"response"'))).toBe(true)
      const state = (yield* api2.get(`/v1/agents/${agents[1]}/state`, { token })).body
      expect(state.requests[0].state).toBe("completed")
    }),
  { timeout: 90_000 }
)

it.scopedLive(
  "a stream that said ready sees a prompt sent the moment after, on the owner's node and on the other",
  () =>
    Effect.gen(function*() {
      const { api1, databaseUrl, one, token, two, upstream } = yield* twoNodesWithAgents(0)
      const env = { ALLOW_PRIVATE_URLS: "true" }
      // Shards move while the rounds run, as on a cluster whose runners come and go: the two runners share them
      // out as the test begins, and a third joins, leaves (drained), joins and leaves again. Each move may take
      // an agent off the node one of its streams reads it on; the stream follows it.
      const third = () => TestNode.start({ databaseUrl, operatorToken: one.operatorToken, env })
      let member = yield* Effect.fork(third())
      const leave = Effect.suspend(() =>
        Effect.fork(Effect.flatMap(Fiber.join(member), (node) => node.stop("SIGTERM")))
      )
      // Fifty rounds, each on an agent not started yet (its streams are opened before it runs anywhere), with a
      // reply that streams for about a second.
      for (let round = 0; round < 50; round++) {
        if (round === 15 || round === 40) yield* leave
        if (round === 25) member = yield* Effect.fork(third())
        const id = (yield* api1.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
        upstream.script({ text: "one two three four five six seven eight nine ten", tokenDelayMs: 100 })
        yield* Effect.scoped(Effect.gen(function*() {
          // On whichever node does not own it, the stream follows the owner through the cluster.
          const watchers = yield* Effect.forEach(
            [one.rest, two.rest],
            (base) => Http.sse(base, `/v1/agents/${id}/events`, { token })
          )
          for (const watcher of watchers) yield* watcher.take((frame) => frame.event === "ready")
          const accepted = (yield* api1.post(`/v1/agents/${id}/prompt`, { token, json: { text: "now" } })).body
          for (const [node, watcher] of watchers.entries()) {
            const frames = yield* watcher.take(
              (frame) => frame.data?.includes(`"id":"${accepted.id}"`) ?? false,
              15_000
            )
            const seen = frames.map((frame) => frame.event ?? JSON.parse(frame.data ?? "{}").type ?? frame.comment)
            expect(
              frames.some((frame) => frame.data?.includes('"type":"response"')),
              `round ${round}: ${id} on node ${node + 1} saw ${seen.join(" ")}`
            ).toBe(true)
          }
        }))
      }
    }),
  { timeout: 400_000 }
)

it.scopedLive(
  "a stream on the node an agent moves off follows it: a runner joins while turns are in a tool call",
  () =>
    Effect.gen(function*() {
      const { api1, api2, databaseUrl, one, token, two, upstream } = yield* twoNodesWithAgents(0)
      const pages = yield* ToolServer.start
      yield* bothHoldShards(api2, one.operatorToken)
      // Twenty agents, each started on its owner (one or two), each watched on both nodes: on its owner's node
      // the stream reads the agent's own log. An agent moves only if its shard is among the third runner's (about
      // a third of them): with twelve, none of them moved in about one run of 130; with twenty, one of 3,000.
      const agents = yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i), () =>
        Effect.gen(function*() {
          const id = (yield* api1.post("/v1/agents", { token, json: { model: "fake/m1", builtins: ["web_fetch"] } }))
            .body.id as string
          yield* api1.get(`/v1/agents/${id}/state`, { token })
          return id
        }))
      const watchers = yield* Effect.forEach(agents, (id) =>
        Effect.forEach([one.rest, two.rest], (base) => Http.sse(base, `/v1/agents/${id}/events`, { token })))
      for (const watcher of watchers.flat()) {
        yield* watcher.take((frame) =>
          frame.event === "ready"
        )
      }
      // Each turn calls web_fetch on a page held until the third runner has joined, then answers.
      for (const i of agents.keys()) {
        upstream.script({
          toolCalls: [{ id: `call_${i}`, name: "web_fetch", arguments: { url: `${pages.url}/held/${i}?hold=join` } }]
        })
      }
      for (const _ of agents) upstream.script({ text: "finished" })
      const accepted = yield* Effect.forEach(agents, (id) =>
        Effect.map(api1.post(`/v1/agents/${id}/prompt`, { token, json: { text: "go" } }), (answer) =>
          answer.body.id as string))
      yield* Http.waitFor(() =>
        Effect.succeed(pages.calls.length === agents.length), "every turn in its tool call")
      // A third runner joins: the shards it takes move once their turns' step (the tool call) ends.
      const three = yield* TestNode.start({
        databaseUrl,
        operatorToken: one.operatorToken,
        env: { ALLOW_PRIVATE_URLS: "true" }
      })
      // It takes its shards but those whose turns are in their step: their runners hand them on after it. The
      // gate opens once its count stops growing.
      const held = api2.get("/v1/admin/runners", { token: one.operatorToken }).pipe(
        Effect.map((listed) =>
          (listed.body.data as Array<{ address: string; shards: number }>)
            .find((runner) =>
              runner.address === three.runnerAddress
            )?.shards ?? 0
        )
      )
      let counts: Array<number> = []
      for (let i = 0; i < 120 && !(counts.length >= 4 && counts.at(-1)! > 0 && counts.at(-4) === counts.at(-1)); i++) {
        yield* Effect.sleep("500 millis")
        counts = [...counts, yield* held]
      }
      pages.release("join")
      const moved: Array<string> = []
      for (const [i, id] of agents.entries()) {
        const done = (yield* Http.client(three.rest).get(`/v1/agents/${id}/requests/${accepted[i]}?wait=25`, { token }))
          .body
        expect(done.state, id).toBe("completed")
        if (done.outcome.result.resumed === true) moved.push(id)
      }
      expect(moved.length).toBeGreaterThan(0)
      // Every stream that said ready saw its turn to the end, in order, once each, the moved ones across the move.
      for (const [i, id] of agents.entries()) {
        for (const [node, watcher] of watchers[i]!.entries()) {
          const frames = yield* watcher.take((frame) => frame.data?.includes(`"id":"${accepted[i]}"`) ?? false, 10_000)
          const events = frames.filter((frame) => frame.event === undefined && frame.data !== undefined)
          const types = events.map((frame) => {
            const data = JSON.parse(frame.data!)
            return data.event?.type ?? data.type
          })
          const label = `${id}${moved.includes(id) ? " (moved)" : ""} on node ${node + 1} saw ${
            frames.map((frame) => frame.event ?? frame.comment ?? "").join(" ")
          } ${types.join(" ")}`
          expect(types.at(-1), label).toBe("response")
          const ids = events.map((frame) => Number(frame.id))
          expect(ids.every((eventId, k) => k === 0 || eventId > ids[k - 1]!), label).toBe(true)
          if (moved.includes(id)) expect(types, label).toContain("turn_resumed")
        }
      }
      console.log(`a runner joined mid-turn: ${moved.length} of ${agents.length} agents moved to it`)
    }),
  { timeout: 240_000 }
)

it.scopedLive(
  "after a kill -9, a resumed turn keeps the file writes it journaled and makes those it had not, once each",
  () =>
    Effect.gen(function*() {
      const { api1, api2, databaseUrl, one, token, upstream } = yield* twoNodesWithAgents(0)
      const pages = yield* ToolServer.start
      yield* bothHoldShards(api2, one.operatorToken)
      // Two agents the first node runs.
      const agents: Array<string> = []
      for (let i = 0; i < 40 && agents.length < 2; i++) {
        const id = (yield* api1.post("/v1/agents", { token, json: { model: "fake/m1", builtins: ["web_fetch"] } }))
          .body.id as string
        yield* api1.get(`/v1/agents/${id}/state`, { token })
        const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${id}'`)
        if (row?.owner === one.runnerAddress) agents.push(id)
      }
      expect(agents.length).toBe(2)
      const held = (n: number) => ({
        id: `call_${n}`,
        name: "web_fetch",
        arguments: { url: `${pages.url}/held/${n}?hold=kill` }
      })
      // The first writes and edits its file, then waits on a page; the second waits on the page first.
      upstream.script({ toolCalls: [...FileWrites.calls(1), held(1)] })
      upstream.script({ toolCalls: [held(2), ...FileWrites.calls(2)] })
      upstream.script({ text: "done" })
      upstream.script({ text: "done" })
      const accepted: Array<string> = []
      for (const [i, id] of agents.entries()) {
        accepted.push((yield* api1.post(`/v1/agents/${id}/prompt`, { token, json: { text: "write" } })).body.id)
        yield* Http.waitFor(
          () => Effect.succeed(pages.count(`/held/${i + 1}`) === 1),
          `turn ${i + 1} waits on its page`
        )
      }
      yield* one.stop("SIGKILL")
      for (const [i, id] of agents.entries()) {
        const done = yield* Http.settled(api2, token, id, accepted[i]!)
        expect(done.outcome.result).toMatchObject({ reply: "done", resumed: true })
        expect(done.outcome.uncertain, id).toBe(true)
      }
      pages.release("kill")
      const histories = new Map<string, ReadonlyArray<FileWrites.Entry>>()
      for (const id of agents) histories.set(id, (yield* api2.get(`/v1/agents/${id}/history`, { token })).body.entries)
      const files = yield* FileWrites.check({ scripted: [1, 2], histories, get: (path) => api2.get(path, { token }) })
      console.log(`after a kill -9: ${FileWrites.summary(files)}`)
      // Both files at version 2, each written and edited once: the journaled write and edit were not made again,
      // and those the first runner never began were made by the next.
      expect(files).toMatchObject({ problems: [], ran: 2, confirmed: 2, uncertain: [] })
      // No page was fetched twice: the calls cut by the kill were answered as unknown.
      expect(pages.requestedTwice()).toEqual([])
    }),
  { timeout: 180_000 }
)

it.scopedLive(
  "when a node stops mid-turn, its agents' accepted prompts finish on the other node",
  () =>
    Effect.gen(function*() {
      const { agents, api2, one, token, upstream } = yield* twoNodesWithAgents(6)
      // Slow answers, so turns are running when the first node stops.
      for (let i = 0; i < 12; i++) {
        upstream.script({ text: "one two three four five six seven eight", tokenDelayMs: 150 })
      }
      const requests = yield* Effect.forEach(agents, (id) =>
        Effect.map(api2.post(`/v1/agents/${id}/prompt`, { token, json: { text: "go" } }), (response) => ({
          id,
          requestId: response.body.id as string
        })))
      yield* Effect.sleep("400 millis")
      yield* one.stop("SIGTERM")
      for (const { id, requestId } of requests) {
        const done = (yield* api2.get(`/v1/agents/${id}/requests/${requestId}?wait=25`, { token })).body
        expect(done.state, id).toBe("completed")
        expect(done.outcome.result.reply).toBe("one two three four five six seven eight")
      }
    }),
  { timeout: 120_000 }
)

it.scopedLive(
  "prompts sent through the other node while the owner drains are each accepted, run once, and complete",
  () =>
    Effect.gen(function*() {
      const { agents, api2, databaseUrl, one, token, upstream } = yield* twoNodesWithAgents(8)
      yield* bothHoldShards(api2, one.operatorToken)
      yield* Effect.forEach(agents, (id) => api2.get(`/v1/agents/${id}/state`, { token }), { discard: true })
      const owners = yield* TestDatabase.query(databaseUrl, "SELECT id, owner FROM agents")
      const owned = owners.filter((row: any) => row.owner === one.runnerAddress).map((row: any) => row.id as string)
      expect(owned.length).toBeGreaterThan(0)
      // Answers that take a while: turns run, and prompts queue behind them, as the owner drains.
      for (let i = 0; i < 60; i++) upstream.script({ text: "done", tokenDelayMs: 40 })
      const sends: Array<{ agentId: string; requestId: string; text: string; status: number }> = []
      const sendOne = (n: number) =>
        Effect.gen(function*() {
          const agentId = owned[n % owned.length]!
          const requestId = `req_drain_${n}`
          const text = `prompt ${n}`
          // Like any client: an answer of 503 is asked again under the same request id.
          let status = 0
          for (let attempt = 0; attempt < 20; attempt++) {
            status = (yield* api2.post(`/v1/agents/${agentId}/prompt`, { token, json: { text, requestId } })).status
            if (status !== 503) break
            yield* Effect.sleep("500 millis")
          }
          sends.push({ agentId, requestId, text, status })
        }).pipe(Effect.delay(Duration.millis(n * 20)))
      const sending = yield* Effect.fork(
        Effect.forEach(Array.from({ length: 60 }, (_, n) => n), sendOne, { concurrency: "unbounded" })
      )
      yield* Effect.sleep("400 millis")
      yield* one.stop("SIGTERM")
      yield* Fiber.join(sending)
      expect(sends.filter((send) => send.status !== 202)).toEqual([])
      for (const { agentId, requestId } of sends) {
        const done = (yield* api2.get(`/v1/agents/${agentId}/requests/${requestId}?wait=25`, { token })).body
        expect(done.state, requestId).toBe("completed")
      }
      // Each prompt is in its agent's history exactly once: none lost, none taken twice by the next owner.
      for (const agentId of owned) {
        const history = (yield* api2.get(`/v1/agents/${agentId}/history?limit=1000`, { token })).body
        const prompts = history.entries.flatMap((entry: any) =>
          entry.message.role === "user" ? [entry.message.content] : []
        )
        expect(prompts.sort()).toEqual(sends.filter((send) => send.agentId === agentId).map((send) => send.text).sort())
      }
    }),
  { timeout: 120_000 }
)

it.scopedLive(
  "operators list the runners and drain one: its turn finishes its step and goes on elsewhere",
  () =>
    Effect.gen(function*() {
      // Enough agents that one is surely node one's, however far the shards have spread when both hold some.
      const { agents, api1, api2, databaseUrl, one, token, two, upstream } = yield* twoNodesWithAgents(24)
      const operator = one.operatorToken
      const listed = yield* bothHoldShards(api2, operator)
      expect(listed).toMatchObject({ healthy: 2, shards: 300, leaseSeconds: 6 })
      expect(listed.data.map((runner: any) => runner.address).sort()).toEqual(
        [one.runnerAddress, two.runnerAddress].sort()
      )
      expect(listed.data.reduce((sum: number, runner: any) => sum + runner.shards, 0)).toBe(300)
      expect(listed.data.every((runner: any) => runner.state === "active" && runner.healthy)).toBe(true)

      // Tenants may not see or drain runners; an unknown address is 404.
      expect((yield* api1.get("/v1/admin/runners", { token })).status).toBe(403)
      expect((yield* api1.post(`/v1/admin/runners/${encodeURIComponent(one.runnerAddress)}/drain`, { token })).status)
        .toBe(403)
      expect(yield* api1.post(`/v1/admin/runners/${encodeURIComponent("127.0.0.1:1")}/drain`, { token: operator }))
        .toMatchObject({ status: 404, body: { code: "NOT_FOUND" } })

      // A two-step turn on an agent node one owns: drained mid-stream, it finishes the step, then moves.
      yield* Effect.forEach(agents, (id) => api2.get(`/v1/agents/${id}/state`, { token }), { discard: true })
      const owners = yield* TestDatabase.query(databaseUrl, "SELECT id, owner FROM agents")
      const agentId = owners.find((row: any) => row.owner === one.runnerAddress)?.id as string
      expect(agentId).toBeDefined()
      // Forty words 100 ms apart: the node reads the drain request (within 2 s) while they stream.
      const words = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ")
      upstream.script({ text: words, toolCalls: [{ name: "lookup", arguments: { q: "x" } }], tokenDelayMs: 100 })
      upstream.script({ text: "finished on the other runner" })
      // A watcher on the drained node: its stream ends with `event: reconnect`, and it goes on from its cursor.
      const watcher = yield* Http.sse(one.rest, `/v1/agents/${agentId}/events`, { token })
      yield* watcher.take((frame) => frame.event === "ready")
      const accepted = (yield* api2.post(`/v1/agents/${agentId}/prompt`, { token, json: { text: "two steps" } })).body
      yield* Effect.sleep("400 millis")
      const drained = yield* api2.post(`/v1/admin/runners/${encodeURIComponent(one.runnerAddress)}/drain`, {
        token: operator
      })
      expect(drained).toMatchObject({ status: 202, body: { address: one.runnerAddress, state: "draining" } })
      const seen = yield* watcher.take((frame) => frame.event === "reconnect", 30_000)
      expect(seen.at(-1)!.event).toBe("reconnect")
      const lastId = seen.filter((frame) => frame.id !== undefined).at(-1)!.id!
      const typesOf = (frames: ReadonlyArray<Http.SseFrame>) =>
        frames.flatMap((frame) => frame.data === undefined ? [] : [JSON.parse(frame.data)]).map((data) =>
          data.event?.type ?? data.type
        )
      // The step ran to its end on the drained node before the stream closed.
      expect(typesOf(seen)).toContain("tool_execution_end")
      expect(typesOf(seen)).not.toContain("turn_resumed")
      // Like any client: reconnect at once with the last id (through another node), again on each reconnect frame.
      const after: Array<Http.SseFrame> = []
      let cursor = lastId
      for (let attempt = 0; attempt < 20 && !typesOf(after).includes("response"); attempt++) {
        const resumedWatcher = yield* Http.sse(two.rest, `/v1/agents/${agentId}/events`, {
          token,
          headers: { "last-event-id": cursor }
        })
        expect(resumedWatcher.status).toBe(200)
        const frames = yield* resumedWatcher.take((frame) =>
          frame.event === "reconnect" || (frame.data?.includes('"type":"response"') ?? false)
        )
        for (const frame of frames) if (frame.id !== undefined && frame.event === undefined) after.push(frame)
        cursor = after.at(-1)?.id ?? cursor
      }
      const ids = after.map((frame) => Number(frame.id))
      expect(ids[0]).toBeGreaterThan(Number(lastId))
      expect(ids.every((id, i) => i === 0 || id > ids[i - 1]!)).toBe(true)
      expect(typesOf(after)[0]).toBe("turn_resumed")
      expect(typesOf(after)).toContain("response")
      const done = (yield* api2.get(`/v1/agents/${agentId}/requests/${accepted.id}?wait=25`, { token })).body
      expect(done).toMatchObject({ state: "completed", outcome: { result: { reply: "finished on the other runner" } } })
      const history = (yield* api2.get(`/v1/agents/${agentId}/history`, { token })).body
      expect(history.entries.map((entry: any) => entry.message.role)).toEqual([
        "user",
        "assistant",
        "toolResult",
        "assistant"
      ])
      expect(history.entries[1].message.content[0].text).toBe(words)
      // The new owner goes on from the drained one's events (nothing missing from the start) and says the turn moved.
      const events =
        (yield* api2.get(`/v1/agents/${agentId}/events?poll=1`, { token, headers: { "last-event-id": "0" } }))
          .body
      const types = events.events.map((event: any) => event.data.event?.type ?? event.data.type)
      expect(types.indexOf("turn_resumed")).toBeGreaterThan(types.indexOf("tool_execution_end"))
      expect(events.events.find((event: any) => event.data.event?.type === "turn_resumed").data).toMatchObject({
        requestId: accepted.id,
        event: { handoff: "drain" }
      })
      // The first step streamed in full on the drained runner: it was never asked twice.
      expect(upstream.requests().filter((request) => request.protocol === "openai-chat").length).toBe(2)
      // The drained node exits by itself.
      const exit = yield* one.exited.pipe(Effect.timeout("40 seconds"))
      expect(exit.signal === "SIGTERM" || exit.code === 0).toBe(true)
      let remaining: any
      for (let i = 0; i < 50; i++) {
        remaining = (yield* api2.get("/v1/admin/runners", { token: operator })).body
        if (remaining.data.find((runner: any) => runner.address === two.runnerAddress)?.shards === 300) break
        yield* Effect.sleep("200 millis")
      }
      expect(remaining.data.find((runner: any) => runner.address === two.runnerAddress)).toMatchObject({
        state: "active",
        shards: 300
      })
    }),
  { timeout: 120_000 }
)

it.scopedLive(
  "a drained node under watchers, polls and application connections closes at once: it exits well before its stop timeout",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      // A stop timeout long enough not to cut the close short: the close is measured as it is.
      const cluster = yield* TestCluster.start({
        size: 3,
        databaseUrl,
        env: {
          ALLOW_PRIVATE_URLS: "true",
          STOP_TIMEOUT_SECONDS: "30",
          ...(process.env.DRAIN_DEBUG ? { LOG_LEVEL: "Debug" } : {})
        }
      })
      const { token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "drain")
      const drained = cluster.members[0]!.node
      const api = Http.client(drained.rest)
      // Two agents, one the drained node owns and one another node owns, each with its agent token.
      const owned = new Map<number, { readonly id: string; readonly token: string }>()
      for (let i = 0; i < 40 && owned.size < 2; i++) {
        const made = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1", ttlSeconds: 3600 } })).body
        yield* api.get(`/v1/agents/${made.id}/state`, { token })
        const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${made.id}'`)
        const index = cluster.members.findIndex((member) => member.runnerAddress === row?.owner)
        if ((index === 0 || index === 1) && !owned.has(index)) owned.set(index, { id: made.id, token: made.token })
      }
      expect([...owned.keys()].sort()).toEqual([0, 1])
      const agents = [owned.get(0)!, owned.get(1)!]
      // Each agent watched on every node (on the drained one: its own log, and a log followed through the
      // cluster), and its application connected through the drained node.
      const watchers = yield* Effect.forEach(agents, ({ id }) =>
        Effect.forEach(cluster.members, (member, index) =>
          Watchers.sse(`${id} sse@${index}`, {
            agentId: id,
            token,
            base: () =>
              member.up ? member.node.rest : cluster.live()[0]
          })))
      const echo = Serve.tool({
        name: "app_echo",
        description: "Echoes",
        execute: async (args) =>
          JSON.stringify(args)
      })
      yield* Effect.forEach(agents, (agent) =>
        Effect.acquireRelease(
          Effect.promise(() =>
            Serve.serve({ baseUrl: drained.rest, agentId: agent.id, token: agent.token }, [echo], {
              fetch: cluster.fetchThroughLive
            })
          ),
          (server) => Effect.promise(() => server.close({ timeoutMs: 0 }))
        ))
      const connected = (base: string, id: string) =>
        Effect.map(Http.client(base).get(`/v1/agents/${id}`, { token }), (answer) => answer.body.connected === true)
      for (const { id } of agents) yield* Http.waitFor(() => connected(drained.rest, id), `${id}'s application`)
      // A turn on each, answered through the drained node: its keep-alive sockets have carried requests.
      for (const { id } of agents) yield* Http.prompted(api, token, id, { text: "hello" })
      // A poll of each agent's events waiting on the drained node as it drains.
      const cursors = yield* Effect.forEach(
        agents,
        ({ id }) => Effect.map(api.get(`/v1/agents/${id}/state`, { token }), (answer) => answer.body.cursor as number)
      )
      const waiting = yield* Effect.fork(Effect.all(
        agents.map(({ id }, i) =>
          Http.attempt(drained.rest, "GET", `/v1/agents/${id}/events?poll=1&wait=20`, {
            token,
            headers: { "last-event-id": String(cursors[i]) }
          }, 30_000)
        ),
        { concurrency: "unbounded", mode: "either" }
      ))
      // And a model call streaming through its gateway, on a keep-alive connection the client never closes: it
      // ends after the close began, and its connection then held the gateway's close for its 66 s keep-alive.
      const keepAlive = new NodeHttp.Agent({ keepAlive: true })
      yield* Effect.addFinalizer(() => Effect.sync(() => keepAlive.destroy()))
      upstream.script({ text: Array.from({ length: 10 }, (_, i) => `t${i}`).join(" "), tokenDelayMs: 100 })
      const modelCall = yield* Effect.fork(Effect.async<number>((resume) => {
        const body = JSON.stringify({ model: "fake/m1", stream: true, messages: [{ role: "user", content: "hi" }] })
        const request = NodeHttp.request(`${drained.gateway}/v1/chat/completions`, {
          method: "POST",
          agent: keepAlive,
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }
        }, (response) => {
          response.resume()
          response.on("end", () => resume(Effect.succeed(response.statusCode ?? 0)))
        })
        request.on("error", () => resume(Effect.succeed(0)))
        request.end(body)
      }))
      yield* Effect.sleep("500 millis")

      const stoppedAt = Date.now()
      yield* cluster.stop(0, "SIGTERM").pipe(Effect.timeoutOption("45 seconds"))
      const exitedMs = Date.now() - stoppedAt
      yield* Fiber.join(waiting)
      expect(yield* Fiber.join(modelCall)).toBe(200)
      const output = drained.output()
      // DRAIN_DEBUG=file: the drained node's log (at the debug level) is written there.
      if (process.env.DRAIN_DEBUG) Fs.writeFileSync(process.env.DRAIN_DEBUG, output)
      const stopTimedOut = output.split("\n").find((line) => line.includes("did not stop within its stop timeout"))
      console.log(
        `a drain under watchers and applications: exited after ${exitedMs} ms${stopTimedOut ? `\n${stopTimedOut}` : ""}`
      )
      // Nothing ran, so the drain is at once, and the close of its servers, runner and database follows, waiting on
      // no socket: within the default stop timeout (10 s), which this node's (30 s) leaves to measure.
      expect(stopTimedOut).toBeUndefined()
      expect(exitedMs).toBeLessThan(10_000)
      // The applications reconnect through another node, and the watchers follow.
      for (const { id } of agents) yield* Http.waitFor(() => connected(cluster.live()[0]!, id), `${id}'s application`)
      for (const watcher of watchers.flat()) expect(watcher.stalls, watcher.name).toBe(0)
    }),
  { timeout: 180_000 }
)

it.scopedLive(
  "a wait let in with a key is answered on every node though the key is revoked while it waits",
  () =>
    Effect.gen(function*() {
      const { agents, api1, api2, token, upstream } = yield* twoNodesWithAgents(4)
      const second = (yield* api1.post("/v1/tokens", { token, json: { name: "short-lived" } })).body
      for (let i = 0; i < agents.length; i++) upstream.script({ text: "slow reply here", tokenDelayMs: 250 })
      const waits = yield* Effect.forEach(agents, (id) =>
        Effect.gen(function*() {
          const requestId = (yield* api1.post(`/v1/agents/${id}/prompt`, { token: second.token, json: { text: "go" } }))
            .body.id as string
          // One wait on each node: on the agent's owner it hears the response frame, elsewhere the notification.
          return yield* Effect.forEach(
            [api1, api2],
            (api) => Effect.fork(api.get(`/v1/agents/${id}/requests/${requestId}?wait=25`, { token: second.token }))
          )
        }))
      yield* Effect.sleep("300 millis")
      expect((yield* api1.delete(`/v1/tokens/${second.id}`, { token })).status).toBe(200)
      for (const wait of waits.flat()) {
        const done = yield* Fiber.join(wait)
        expect(done.status).toBe(200)
        expect(done.body).toMatchObject({ state: "completed", outcome: { result: { reply: "slow reply here" } } })
      }
      // From now on the key is refused, on every node.
      for (const api of [api1, api2]) {
        expect((yield* api.get(`/v1/agents/${agents[0]}/requests/req_none?wait=1`, { token: second.token })).status)
          .toBe(401)
      }
    }),
  { timeout: 120_000 }
)
