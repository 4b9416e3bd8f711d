/**
 * The delegate builtin end to end over real HTTP: a parent agent made from a
 * definition whose delegate setting names other definitions hands tasks to
 * sub-agents. Each model of the chain is its own model id at the fake
 * upstream (m1 the parent, m2 and m3 below), so each reply goes to the agent
 * it was written for whatever order the agents ask in.
 */
import { FakeUpstream, Http, TestCluster, TestDatabase, TestWorld } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"

type Api = ReturnType<typeof Http.client>

/** A tenant whose provider `fake` serves m1, m2 and m3; m2 costs 1,000 USD per million tokens each way. */
const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    // Each test counts the model requests of its own agents only.
    world.upstream.reset()
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    const saved = yield* api.put("/v1/providers/fake", {
      token,
      json: {
        type: "openai-completions",
        baseUrl: `${world.upstream.url}/v1`,
        models: [
          { id: "m1", contextWindow: 100_000 },
          { id: "m2", contextWindow: 100_000, pricing: { input: 1000, output: 1000 } },
          { id: "m3", contextWindow: 100_000 }
        ]
      }
    })
    expect(saved.status, saved.text).toBe(200)
    const define = (json: Record<string, unknown>) =>
      Effect.map(api.post("/v1/definitions", { token, json }), (made) => {
        expect(made.status, made.text).toBe(201)
        return made.body.id as string
      })
    return { world, api, token, define }
  })

const prompt = Http.prompted

/** A sub-agent's run of its task (its one request). */
const delegated = (api: Api, token: string, agentId: string) =>
  Effect.map(api.get(`/v1/agents/${agentId}/requests/req_delegated`, { token }), (response) => {
    expect(response.status, response.text).toBe(200)
    return response.body
  })

const events = (api: Api, token: string, agentId: string) =>
  Effect.map(
    api.get(`/v1/agents/${agentId}/events?poll=1`, { token, headers: { "last-event-id": "0" } }),
    (response) =>
      (response.body.events as Array<any>).map((entry) => entry.data).filter((frame) => frame.type === "event")
        .map((frame) => frame.event)
  )

const requestsFor = (world: TestWorld.World, model: string) =>
  world.upstream.requests().map((request) => request.body as any).filter((body) => body?.model === model)

const toolNames = (body: any) => ((body.tools ?? []) as Array<any>).map((tool) => tool.function.name)

layer(TestWorld.layer(), { excludeTestServices: true })("delegate", (it) => {
  it.scoped("a sub-agent from the setting's definition does the task; its reply, id and progress reach the parent", () =>
    Effect.gen(function*() {
      const { api, define, token, world } = yield* setup("delegate-basic")
      const researcher = yield* define({
        name: "researcher",
        description: "finds facts",
        model: "fake/m2",
        systemPrompt: "You research."
      })
      const lead = yield* define({
        name: "lead",
        model: "fake/m1",
        builtins: ["delegate"],
        delegate: { agents: [researcher], instructions: "Answer in one line." }
      })
      const parent = (yield* api.post("/v1/agents", { token, json: { definition: lead } })).body
      world.upstream.script({
        toolCalls: [{ id: "call_d1", name: "delegate", arguments: { agent: "researcher", task: "find X" } }]
      }, { model: "m1" })
      world.upstream.script({ text: "X is 42." }, { model: "m2" })
      world.upstream.script({ text: "The researcher says X is 42." }, { model: "m1" })
      const done = yield* prompt(api, token, parent.id, { text: "what is X?" })

      expect(done.outcome.result?.reply, JSON.stringify(done)).toBe("The researcher says X is 42.")
      const [call] = done.outcome.result.toolCalls
      expect(call).toEqual({ tool: "delegate", toolCallId: "call_d1", ok: true, agentId: expect.any(String) })
      const childId = call.agentId as string

      // The parent's model had the delegate tool naming the researcher.
      const [first, second] = requestsFor(world, "m1")
      const delegateTool = (first.tools as Array<any>).find((tool) => tool.function.name === "delegate")
      expect(delegateTool.function.parameters.properties.agent.enum).toEqual(["researcher"])
      expect(delegateTool.function.description).toContain("researcher: finds facts")
      // The sub-agent ran the definition's prompt with the setting's instructions, on the task alone.
      const [child] = requestsFor(world, "m2")
      expect(child.messages[0]).toEqual({ role: "system", content: "You research.\n\nAnswer in one line." })
      expect(JSON.stringify(child.messages.at(-1))).toContain("find X")
      expect(child.messages).toHaveLength(2)
      // Its reply is the call's result.
      const answer = (second.messages as Array<any>).find((message) => message.role === "tool")
      expect(JSON.stringify(answer.content)).toContain("X is 42.")

      // The sub-agent is an agent of the tenant made from the researcher definition.
      const detail = yield* api.get(`/v1/agents/${childId}`, { token })
      expect(detail.status, detail.text).toBe(200)
      expect(detail.body.definition).toEqual({ id: researcher, revision: 1 })

      // Its progress is on the parent's stream, between the call's start and end.
      const parentEvents = yield* events(api, token, parent.id)
      const types = parentEvents.map((event) => event.type)
      const start = types.indexOf("subagent_start")
      const end = types.indexOf("subagent_end")
      expect(start).toBeGreaterThan(types.indexOf("tool_execution_start"))
      expect(end).toBeGreaterThan(start)
      expect(parentEvents[start]).toMatchObject({ toolCallId: "call_d1", agentId: childId, task: "find X" })
      expect(parentEvents[end]).toMatchObject({ toolCallId: "call_d1", agentId: childId, ok: true })
      const progress = parentEvents.slice(start, end).filter((event) => event.type === "subagent_event")
      expect(progress.map((event) => event.event.message?.role)).toContain("assistant")
      expect(progress.every((event) => event.agentId === childId)).toBe(true)

      // A definition outside the setting is refused to the model, and nothing is made.
      world.upstream.script({
        toolCalls: [{ id: "call_d2", name: "delegate", arguments: { agent: "lead", task: "loop" } }]
      }, { model: "m1" })
      world.upstream.script({ text: "ok" }, { model: "m1" })
      const refused = yield* prompt(api, token, parent.id, { text: "again" })
      expect(refused.outcome.result.toolCalls[0]).toEqual({
        tool: "delegate",
        toolCallId: "call_d2",
        ok: false,
        code: "invalid_arguments"
      })
    }))

  it.scoped("depth: sub-agents delegate only while the chain is within maxDepth", () =>
    Effect.gen(function*() {
      const { api, define, token, world } = yield* setup("delegate-depth")
      const leaf = yield* define({ name: "leaf", model: "fake/m3", builtins: ["delegate"] })
      // The leaf may delegate to itself by its own setting: the root's maxDepth stops it.
      yield* api.patch(`/v1/definitions/${leaf}`, { token, json: { delegate: { agents: [leaf] } } })
      const mid = yield* define({
        name: "mid",
        model: "fake/m2",
        builtins: ["delegate"],
        delegate: { agents: [leaf], maxDepth: 5 }
      })
      const root = yield* define({
        name: "root",
        model: "fake/m1",
        builtins: ["delegate"],
        delegate: { agents: [mid], maxDepth: 2 }
      })
      const parent = (yield* api.post("/v1/agents", { token, json: { definition: root } })).body
      world.upstream.script({
        toolCalls: [{ id: "call_root", name: "delegate", arguments: { agent: "mid", task: "go down" } }]
      }, { model: "m1" })
      world.upstream.script({
        toolCalls: [{ id: "call_mid", name: "delegate", arguments: { agent: "leaf", task: "go further" } }]
      }, { model: "m2" })
      // The leaf asks to delegate anyway: it has no such tool.
      world.upstream.script({
        toolCalls: [{ id: "call_leaf", name: "delegate", arguments: { agent: "leaf", task: "deeper" } }]
      }, { model: "m3" })
      world.upstream.script({ text: "leaf done" }, { model: "m3" })
      world.upstream.script({ text: "mid done" }, { model: "m2" })
      world.upstream.script({ text: "root done" }, { model: "m1" })
      const done = yield* prompt(api, token, parent.id, { text: "start" })
      expect(done.outcome.result.reply).toBe("root done")

      expect(toolNames(requestsFor(world, "m1")[0])).toContain("delegate")
      expect(toolNames(requestsFor(world, "m2")[0])).toContain("delegate")
      // Depth 2 is the root's limit: the leaf has no delegate tool, and its call was not run.
      expect(toolNames(requestsFor(world, "m3")[0])).not.toContain("delegate")
      const midId = done.outcome.result.toolCalls[0].agentId as string
      const midRun = yield* delegated(api, token, midId)
      const leafCall = midRun.outcome.result.toolCalls[0]
      expect(leafCall).toMatchObject({ tool: "delegate", toolCallId: "call_mid", ok: true })
      const leafRun = yield* delegated(api, token, leafCall.agentId)
      expect(leafRun.outcome.result.toolCalls).toEqual([
        { tool: "delegate", toolCallId: "call_leaf", ok: false, code: "unavailable" }
      ])
      const leafDetail = (yield* api.get(`/v1/agents/${leafCall.agentId}`, { token })).body
      const builtins = leafDetail.toolSources.find((source: any) => source.kind === "builtin")
      expect(builtins.tools[0]).toMatchObject({ name: "delegate", excluded: expect.stringContaining("depth") })
    }))

  it.scoped("maxParallel bounds a run's sub-agents at once; the rest wait their turn", () =>
    Effect.gen(function*() {
      const { api, define, token, world } = yield* setup("delegate-parallel")
      const worker = yield* define({ name: "worker", model: "fake/m3" })
      const order = (maxParallel: number) =>
        Effect.gen(function*() {
          const boss = yield* define({
            name: `boss-${maxParallel}`,
            model: "fake/m1",
            builtins: ["delegate"],
            delegate: { agents: [worker], maxParallel }
          })
          const parent = (yield* api.post("/v1/agents", { token, json: { definition: boss } })).body
          world.upstream.script({
            toolCalls: [1, 2, 3].map((n) => ({
              id: `call_${n}`,
              name: "delegate",
              arguments: { agent: "worker", task: `part ${n}` }
            }))
          }, { model: "m1" })
          for (let n = 0; n < 3; n++) world.upstream.script({ text: "part done", latencyMs: 300 }, { model: "m3" })
          world.upstream.script({ text: "all parts done" }, { model: "m1" })
          const done = yield* prompt(api, token, parent.id, { text: "split it" })
          expect(done.outcome.result.toolCalls.map((call: any) => call.ok)).toEqual([true, true, true])
          expect(new Set(done.outcome.result.toolCalls.map((call: any) => call.agentId)).size).toBe(3)
          return (yield* events(api, token, parent.id)).flatMap((event) =>
            event.type === "subagent_start" ? ["start"] : event.type === "subagent_end" ? ["end"] : []
          )
        })
      expect(yield* order(1)).toEqual(["start", "end", "start", "end", "start", "end"])
      expect(yield* order(3)).toEqual(["start", "start", "start", "end", "end", "end"])
    }))

  it.scoped("a run's spend limit counts its sub-agents: both stop at it", () =>
    Effect.gen(function*() {
      const { api, define, token, world } = yield* setup("delegate-spend")
      const pricey = yield* define({ name: "pricey", model: "fake/m2" })
      const frugal = yield* define({
        name: "frugal",
        model: "fake/m1",
        builtins: ["delegate"],
        delegate: { agents: [pricey] }
      })
      const parent = (yield* api.post("/v1/agents", { token, json: { definition: frugal } })).body
      world.upstream.script({
        toolCalls: [{ id: "call_spend", name: "delegate", arguments: { agent: "pricey", task: "spend" } }]
      }, { model: "m1" })
      // 1,000 tokens each way at 1,000 USD per million: 2 USD, past the parent run's 1 USD.
      world.upstream.script({
        toolCalls: [{ name: "lookup", arguments: {} }],
        usage: { input: 1000, output: 1000 }
      }, { model: "m2" })
      const done = yield* prompt(api, token, parent.id, { text: "go", spendLimit: { usd: 1 } })

      expect(done).toMatchObject({ state: "completed", stopped: "spend_limit" })
      const childId = done.outcome.result.toolCalls[0].agentId as string
      expect(yield* delegated(api, token, childId)).toMatchObject({ state: "completed", stopped: "spend_limit" })
      // Each stopped before asking its model again.
      expect(requestsFor(world, "m2")).toHaveLength(1)
      expect(requestsFor(world, "m1")).toHaveLength(1)
    }))
})

it.scopedLive(
  "kill -9 of the parent's node while its sub-agent works: the resumed call re-attaches, the task is given once",
  () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const cluster = yield* TestCluster.start({ size: 3, databaseUrl, env: { ALLOW_PRIVATE_URLS: "true" } })
      const { api, token } = yield* TestWorld.tenantWithModel({ node: cluster.members[0]!.node, upstream }, "dlg-kill")
      yield* api.put("/v1/providers/fake", {
        token,
        json: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          models: [{ id: "m1", contextWindow: 100_000 }, { id: "m2", contextWindow: 100_000 }]
        }
      })
      const worker = (yield* api.post("/v1/definitions", { token, json: { name: "worker", model: "fake/m2" } })).body.id
      const boss = (yield* api.post("/v1/definitions", {
        token,
        json: { name: "boss", model: "fake/m1", builtins: ["delegate"], delegate: { agents: [worker] } }
      })).body.id
      const parent = (yield* api.post("/v1/agents", { token, json: { definition: boss } })).body.id as string
      upstream.script({
        toolCalls: [{ id: "call_kill", name: "delegate", arguments: { agent: "worker", task: "slow work" } }]
      }, { model: "m1" })
      // The sub-agent's answer takes a while (asked again if its own node goes too).
      upstream.script([{ text: "work done", latencyMs: 4000 }, { text: "work done" }], { model: "m2" })
      upstream.script({ text: "the worker finished" }, { model: "m1" })
      const accepted = yield* api.post(`/v1/agents/${parent}/prompt`, { token, json: { text: "go", requestId: "p1" } })
      expect(accepted.status, accepted.text).toBe(202)
      const asked = () => upstream.requests().filter((request) => (request.body as any)?.model === "m2").length
      yield* Http.waitFor(() => Effect.succeed(asked() === 1), "the sub-agent asked its model")

      const [row] = yield* TestDatabase.query(databaseUrl, `SELECT owner FROM agents WHERE id = '${parent}'`)
      const owner = cluster.members.findIndex((member) => member.runnerAddress === row?.owner)
      expect(owner).toBeGreaterThanOrEqual(0)
      yield* cluster.stop(owner, "SIGKILL")
      const survivor = Http.client(cluster.members[(owner + 1) % 3]!.node.rest)
      const done = yield* Http.settled(survivor, token, parent, "p1")

      // The resumed turn ran the call again and found the same sub-agent and run: its reply, not "unknown".
      expect(done.outcome.result.reply).toBe("the worker finished")
      const [call] = done.outcome.result.toolCalls
      expect(call).toMatchObject({ tool: "delegate", toolCallId: "call_kill", ok: true })
      const subAgents = yield* TestDatabase.query(
        databaseUrl,
        `SELECT id FROM agents WHERE key = 'delegate-${parent}-call_kill'`
      )
      expect(subAgents.map((agent: any) => agent.id)).toEqual([call.agentId])
      const requests = yield* TestDatabase.query(
        databaseUrl,
        `SELECT id, state FROM agent_requests WHERE agent_id = '${call.agentId}'`
      )
      expect(requests).toEqual([{ id: "req_delegated", state: "completed" }])
      const user = yield* TestDatabase.query(
        databaseUrl,
        `SELECT count(*)::int AS n FROM agent_messages WHERE agent_id = '${call.agentId}' AND message->>'role' = 'user'`
      )
      expect(user[0].n).toBe(1)
    }),
  { timeout: 120_000 }
)
