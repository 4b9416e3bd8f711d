/**
 * Stateless runs through the SDK against a real node: a run created and
 * answered, typed by an Effect Schema (and refused as OutputInvalid when the
 * Schema asks more than its JSON Schema said), streamed to its end, aborted,
 * its messages read; and the typed Effect client with `outputSpec`.
 */
import { TestWorld } from "@agent-runtime/testing"
import { FetchHttpClient } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { AgentRuntime } from "../src/AgentRuntime.ts"
import * as Runs from "../src/Runs.ts"
import * as RuntimeClient from "../src/RuntimeClient.ts"
import { OutputInvalid } from "../src/SdkError.ts"

class Vote extends Schema.Class<Vote>("Vote")({
  vote: Schema.Literal("yes", "no"),
  reason: Schema.String
}) {}

/** Refuses what JSON Schema cannot say: a reason of at least three words. */
const Careful = Schema.Struct({
  vote: Schema.Literal("yes", "no"),
  reason: Schema.String.pipe(Schema.filter((reason) => reason.split(" ").length >= 3, { jsonSchema: {} }))
})

layer(TestWorld.layer(), { excludeTestServices: true })("stateless runs through the SDK", (it) => {
  it.scoped("a run typed by an Effect Schema; what the Schema alone refuses is OutputInvalid", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-runs")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })
      world.upstream.script({
        toolCalls: [{ name: "final_output", arguments: { vote: "no", reason: "Fridays are for rest" } }]
      })
      const voted = yield* Effect.promise(() =>
        runtime.runs.create({ model: "fake/m1", systemPrompt: "Vote.", input: "Ship on Friday?", output: Vote })
      )
      expect(voted.status).toBe("completed")
      expect(voted.output).toBeInstanceOf(Vote)
      expect(voted.output).toMatchObject({ vote: "no", reason: "Fridays are for rest" })
      // The schema the model was given is Vote's JSON Schema, whole at the top.
      const sent = world.upstream.requests().at(-1)!.body as { tools: Array<{ function: { parameters: unknown } }> }
      expect(sent.tools[0]!.function.parameters).toMatchObject({
        type: "object",
        required: ["vote", "reason"],
        properties: { vote: { enum: ["yes", "no"] } }
      })

      world.upstream.script({ toolCalls: [{ name: "final_output", arguments: { vote: "yes", reason: "ok" } }] })
      const refused = yield* Effect.promise(() =>
        runtime.runs.create({ model: "fake/m1", input: "Ship?", output: Careful }).then(
          () => undefined,
          (error) => error
        )
      )
      expect(refused).toBeInstanceOf(OutputInvalid)
      expect(refused.code).toBe("output_invalid")
      expect(refused.runId).toMatch(/^run_/)

      // A plain JSON Schema is sent as it is, and the output returned as the runtime checked it.
      world.upstream.script({ toolCalls: [{ name: "final_output", arguments: { n: 3 } }] })
      const plain = yield* Effect.promise(() =>
        runtime.runs.create({
          model: "fake/m1",
          input: "count",
          output: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] }
        })
      )
      expect(plain.output).toEqual({ n: 3 })
    }))

  it.scoped("a run streamed to its end, then read; one aborted; messages; the list", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-runs-stream")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })
      world.upstream.script({ text: "one two three", latencyMs: 200, tokenDelayMs: 30 })
      const stream = yield* Effect.promise(() => runtime.runs.stream({ model: "fake/m1", input: "count to three" }))
      const deltas: Array<string> = []
      yield* Effect.promise(async () => {
        for await (const frame of stream) {
          const data = frame.data as { event?: { assistantMessageEvent?: { type: string; delta?: string } } }
          const event = data.event?.assistantMessageEvent
          if (event?.type === "text_delta") deltas.push(event.delta!)
        }
      })
      expect(deltas.join("")).toBe("one two three")
      const ended = yield* Effect.promise(() => stream.result())
      expect(ended).toMatchObject({ id: stream.id, status: "completed", text: "one two three" })
      const messages = yield* Effect.promise(() => runtime.runs.messages(stream.id))
      expect(messages.entries.map((entry) => (entry.message as { role: string }).role)).toEqual(["user", "assistant"])

      world.upstream.script({ text: "never", latencyMs: 10_000 })
      const running = yield* Effect.promise(() => runtime.runs.create({ model: "fake/m1", input: "slow" }, { wait: 0 }))
      expect(running.status).toBe("running")
      const aborted = yield* Effect.promise(() => runtime.runs.abort(running.id))
      expect(aborted).toMatchObject({ status: "failed", error: { code: "aborted" } })
      const listed = yield* Effect.promise(() => runtime.runs.list())
      expect(listed.map((run) => run.id).sort()).toEqual([stream.id, running.id].sort())
    }))

  it.scoped("the typed Effect client takes outputSpec and decodeOutput", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "sdk-runs-effect")
      const client = yield* RuntimeClient.make({ baseUrl: world.node.rest, token })
      world.upstream.script({ toolCalls: [{ name: "final_output", arguments: { vote: "yes", reason: "tests pass" } }] })
      const run = yield* client.runs.create({
        payload: { model: "fake/m1", input: "Ship?", output: Runs.outputSpec(Vote), wait: 20 },
        headers: {}
      })
      const typed = yield* Runs.decodeOutput(Vote)(run)
      expect(typed.output).toEqual(new Vote({ vote: "yes", reason: "tests pass" }))
    }).pipe(Effect.provide(FetchHttpClient.layer)))
})
