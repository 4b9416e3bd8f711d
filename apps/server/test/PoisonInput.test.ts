/**
 * A model that says what nobody expects (testing's `PoisonModel`: NUL and
 * unpaired surrogates anywhere, a megabyte of arguments, arguments that are
 * not JSON or not an object, tools nobody has, JSON nested thousands deep,
 * tool call ids too long or used twice) through a real provider protocol to
 * a real node. Every run ends within 30 s, completed or failed with a clear
 * error; the agent answers its next prompt; another agent of the tenant
 * runs meanwhile; the journal is never retried in a loop.
 */
import { PoisonModel, TestWorld } from "@agent-runtime/testing"
import type { FakeUpstream, Http } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"

const model = "poison"
/** Every run ends within this; the bound. */
const runBoundMs = 30_000

const setUp = Effect.gen(function*() {
  const world = yield* TestWorld.TestWorld
  const { api, token } = yield* TestWorld.tenantWithModel(world, `poison-${Math.random()}`)
  const saved = yield* api.put("/v1/providers/fake", {
    token,
    json: {
      type: "openai-completions",
      baseUrl: `${world.upstream.url}/v1`,
      // A megabyte of arguments must not start a compaction.
      models: [{ id: "m1", contextWindow: 100_000 }, { id: model, contextWindow: 4_000_000 }]
    }
  })
  expect(saved.status).toBe(200)
  return { world, api, token }
})

type Api = ReturnType<typeof Http.client>

/** Prompts and waits for the outcome, failing the test when it does not end within the bound. */
const promptAndWait = (api: Api, token: string, agentId: string, text: string) =>
  Effect.gen(function*() {
    const started = Date.now()
    const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json: { text } })
    expect(accepted.status).toBe(202)
    let record = accepted.body
    while (record.state !== "completed" && Date.now() - started < runBoundMs) {
      const wait = Math.max(1, Math.min(25, Math.ceil((runBoundMs - (Date.now() - started)) / 1000)))
      record = (yield* api.get(`/v1/agents/${agentId}/requests/${accepted.body.id}?wait=${wait}`, { token })).body
    }
    return { record, ms: Date.now() - started }
  })

const noUnstorable = (value: unknown) => expect(JSON.stringify(value)).not.toMatch(/\\u0000|\\ud[89a-f]/)

/** A poisoned response, then a plain one: the first run ends in time, the second replies. */
const poisonThenUsable = (
  world: TestWorld.World,
  api: Api,
  token: string,
  agentId: string,
  step: FakeUpstream.Step
) =>
  Effect.gen(function*() {
    world.upstream.script(step, { model })
    const poisoned = yield* promptAndWait(api, token, agentId, "do as you like")
    expect(poisoned.record.state, JSON.stringify(poisoned.record).slice(0, 500)).toBe("completed")
    expect(poisoned.ms).toBeLessThan(runBoundMs)
    noUnstorable(poisoned.record)
    const error = poisoned.record.outcome?.error ?? poisoned.record.outcome?.result?.error
    if (typeof error === "string") {
      expect(error, world.node.output().split("\n").filter((line) => line.includes("turn failed")).join("\n"))
        .not.toMatch(/journal|stack size|internal/i)
    }

    world.upstream.reset()
    world.upstream.script({ text: "still here" }, { model })
    const next = yield* promptAndWait(api, token, agentId, "are you there?")
    expect(next.record.outcome?.result?.reply, JSON.stringify(next.record).slice(0, 500)).toBe("still here")
    const history = yield* api.get(`/v1/agents/${agentId}/history`, { token })
    expect(history.status).toBe(200)
    noUnstorable(history.body)
    return poisoned.record
  })

const createAgent = (api: Api, token: string) =>
  Effect.map(
    api.post("/v1/agents", { token, json: { model: `fake/${model}`, builtins: PoisonModel.builtins } }),
    (created) => {
      expect(created.status).toBe(201)
      return created.body.id as string
    }
  )

layer(TestWorld.layer(), { excludeTestServices: true })("poison input from the model", (it) => {
  for (const family of PoisonModel.families) {
    it.effect(`${family}: each run ends in time and the agent stays usable`, () =>
      Effect.gen(function*() {
        const { api, token, world } = yield* setUp
        const agentId = yield* createAgent(api, token)
        // Another agent of the tenant, prompted while the poisoned one runs.
        const bystander = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id
        for (const step of PoisonModel.examples[family]) {
          const [record, other] = yield* Effect.all([
            poisonThenUsable(world, api, token, agentId, step),
            promptAndWait(api, token, bystander, "hello")
          ], { concurrency: 2 })
          expect(other.record.outcome?.result?.reply).toBe("ok")
          if (record.outcome?.result?.stopped === "input_required") {
            // A question made of poison was asked as storable text, and can be listed.
            const inputs = yield* api.get(`/v1/agents/${agentId}/inputs`, { token })
            expect(inputs.status).toBe(200)
            noUnstorable(inputs.body)
          }
        }
        expect(world.node.output()).not.toContain("the journal cannot be reached")
        expect(world.node.output()).not.toContain("the journal refused a write")
      }), 240_000)
  }

  it.effect("what PostgreSQL cannot store is kept as U+FFFD, in history, the file written and the question", () =>
    Effect.gen(function*() {
      const { api, token, world } = yield* setUp
      const agentId = yield* createAgent(api, token)
      world.upstream.script([
        {
          text: "a\u0000b\ud800c",
          toolCalls: [{ id: "call_w", name: "write", arguments: { path: "n\u0000.txt", content: "x\u0000y" } }]
        },
        { text: "written" }
      ], { model })
      const written = yield* promptAndWait(api, token, agentId, "write it")
      expect(written.record.outcome.result).toMatchObject({ reply: "written", toolErrors: 0 })
      expect(written.record.outcome.result.files).toMatchObject([{ path: "/workspace/n\uFFFD.txt" }])
      const history = (yield* api.get(`/v1/agents/${agentId}/history`, { token })).body
      const assistant = history.entries[1].message
      expect(assistant.content).toContainEqual(expect.objectContaining({ type: "text", text: "a\uFFFDb\uFFFDc" }))
      expect(assistant.content).toContainEqual(
        expect.objectContaining({ type: "toolCall", arguments: { path: "n\uFFFD.txt", content: "x\uFFFDy" } })
      )

      world.upstream.script({
        toolCalls: [{ name: "ask_user", arguments: { questions: [{ question: "Which\u0000one?" }] } }]
      }, { model })
      const asked = yield* promptAndWait(api, token, agentId, "ask me")
      expect(asked.record.outcome.result.stopped).toBe("input_required")
      const inputs = (yield* api.get(`/v1/agents/${agentId}/inputs`, { token })).body
      expect(inputs.map((input: any) => input.message)).toContain("Which\uFFFDone?")
    }))

  it.effect("arguments that are not one object, or nest too deep, are tool errors the model reads", () =>
    Effect.gen(function*() {
      const { api, token, world } = yield* setUp
      const agentId = yield* createAgent(api, token)
      world.upstream.script([
        {
          toolCalls: [
            { id: "call_array", name: "ls", arguments: "[1,2]" },
            { id: "call_deep", name: "ls", arguments: `{"path":${"[".repeat(5_000)}${"]".repeat(5_000)}}` },
            { id: "call_fine", name: "ls", arguments: {} },
            { id: "i".repeat(5_000), name: "ls", arguments: {} }
          ]
        },
        { text: "noted" }
      ], { model })
      const ran = yield* promptAndWait(api, token, agentId, "list")
      expect(ran.record.outcome.result, JSON.stringify(ran.record.outcome)).toMatchObject({
        reply: "noted",
        toolErrors: 2
      })
      const calls = ran.record.outcome.result.toolCalls
      expect(calls.slice(0, 3)).toMatchObject([
        { toolCallId: "call_array", ok: false, code: "invalid_arguments" },
        { toolCallId: "call_deep", ok: false, code: "invalid_arguments" },
        { toolCallId: "call_fine", ok: true }
      ])
      // A tool call id too long for the journal's keys is replaced by one made from its hash.
      expect(calls[3].toolCallId).toMatch(/^call_[0-9a-f]{24}$/)
      const second = world.upstream.requests().filter((request) => request.protocol === "openai-chat").at(-1)!
      const results = (second.body as any).messages.filter((message: any) => message.role === "tool")
      expect(results.map((message: any) => message.tool_call_id)).toEqual([
        "call_array",
        "call_deep",
        "call_fine",
        calls[3].toolCallId
      ])
      expect(JSON.stringify(results[0].content)).toContain("must be one JSON object")
      expect(JSON.stringify(results[1].content)).toContain("nest deeper than 64 levels")
    }))

  it.effect(
    "fuzzed: mixed poisoned responses, each run ends in time, the agent stays usable",
    () =>
      Effect.gen(function*() {
        const { api, token, world } = yield* setUp
        const agentId = yield* createAgent(api, token)
        const steps = fc.sample(PoisonModel.arbitrary, { seed: 20_261_126, numRuns: 24 })
        for (const step of steps) yield* poisonThenUsable(world, api, token, agentId, step)
        const output = world.node.output()
        expect(output).not.toContain("the journal cannot be reached")
        // No line said over and over for one failing request.
        const counts = new Map<string, number>()
        for (const line of output.split("\n")) {
          if (!/level=(WARN|ERROR|FATAL)/.test(line)) continue
          const message = /message=("[^"]*"|\S+)/.exec(line)?.[1]
          if (message !== undefined) counts.set(message, (counts.get(message) ?? 0) + 1)
        }
        const repeated = [...counts].filter(([, count]) => count > 30)
        expect(repeated).toEqual([])
      }),
    240_000
  )
})
