/**
 * `serve` against a real node (a server process on the embedded PostgreSQL,
 * the fake upstream as its model provider): it resolves once the runtime
 * holds the tools, so a prompt sent right after it, as the walkthrough does,
 * gets them; and again when the runtime keeps the tools by their hash.
 */
import { TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { AgentRuntime, connectAgent } from "../src/AgentRuntime.ts"
import * as Serve from "../src/Serve.ts"

const lookupOrder = (calls: Array<string>) =>
  Serve.tool({
    name: "lookup_order",
    description: "Finds an order by its number",
    schema: Schema.Struct({ orderNumber: Schema.String }),
    execute: ({ orderNumber }) => {
      calls.push(orderNumber)
      return `order ${orderNumber} ships today`
    }
  })

layer(TestWorld.layer(), { excludeTestServices: true, timeout: 120_000 })("serve against a node", (it) => {
  it.scoped("a prompt sent as soon as serve() resolves gets the tool, for ten fresh agents in a row", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "serve-race")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })
      for (let round = 0; round < 10; round++) {
        const calls: Array<string> = []
        const outcome = yield* Effect.promise(async () => {
          const created = await runtime.createAgent({ model: "fake/m1", mounts: [] })
          const agent = connectAgent({ baseUrl: world.node.rest, agentId: created.id, token: created.token })
          try {
            await agent.serve([lookupOrder(calls)])
            world.upstream.script({
              toolCalls: [{ id: `call_${round}`, name: "lookup_order", arguments: { orderNumber: `${round}` } }]
            })
            world.upstream.script({ text: `order ${round} ships today` })
            const request = await agent.prompt({ text: `Where is order ${round}?` })
            return (await agent.request(request.id, { wait: 30 })).outcome
          } finally {
            await agent.close()
          }
        })
        expect(outcome?.result, `round ${round}`).toMatchObject({
          reply: `order ${round} ships today`,
          toolErrors: 0,
          toolCalls: [{ tool: "lookup_order", toolCallId: `call_${round}`, ok: true }]
        })
        expect(calls, `round ${round}`).toEqual([`${round}`])
      }
    }))

  it.scoped("serving the same tools again resolves without a listing (kept by hash), and a prompt gets them", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { token } = yield* TestWorld.tenantWithModel(world, "serve-again")
      const runtime = new AgentRuntime({ baseUrl: world.node.rest, apiKey: token })
      const calls: Array<string> = []
      const created = yield* Effect.promise(() => runtime.createAgent({ model: "fake/m1", mounts: [] }))
      const agent = connectAgent({ baseUrl: world.node.rest, agentId: created.id, token: created.token })
      const first = yield* Effect.promise(() => agent.serve([lookupOrder(calls)]))
      expect(first.runtimeToolsHash).toBeNull()
      yield* Effect.promise(() => first.close())

      const started = Date.now()
      const second = yield* Effect.promise(() => agent.serve([lookupOrder(calls)]))
      expect(Date.now() - started).toBeLessThan(5_000)
      expect(second.runtimeToolsHash).toBe(second.toolsHash)
      world.upstream.script({
        toolCalls: [{ id: "call_again", name: "lookup_order", arguments: { orderNumber: "7" } }]
      })
      world.upstream.script({ text: "order 7 ships today" })
      const outcome = yield* Effect.promise(async () => {
        const request = await agent.prompt({ text: "Where is order 7?" })
        return (await agent.request(request.id, { wait: 30 })).outcome
      })
      expect(outcome?.result).toMatchObject({
        reply: "order 7 ships today",
        toolCalls: [{ tool: "lookup_order", toolCallId: "call_again", ok: true }]
      })
      expect(calls).toEqual(["7"])
      yield* Effect.promise(() => agent.close())
    }))
})
