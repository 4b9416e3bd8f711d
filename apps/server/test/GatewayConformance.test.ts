/**
 * The gateway against the official clients, for every inbound protocol and
 * every upstream protocol behind it (the fake upstream speaking each),
 * non-streamed and streamed: a text reply, two parallel tool calls, a tool
 * result round trip, a reasoning reply, and usage.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Fixture from "./GatewayFixture.ts"

const pairs = Fixture.inbounds.flatMap((inbound) =>
  Fixture.upstreams.flatMap((upstream) => [false, true].map((stream) => ({ inbound, upstream, stream })))
)

layer(Fixture.layer(), { excludeTestServices: true, timeout: 60_000 })("gateway conformance", (it) => {
  for (const { inbound, stream, upstream } of pairs) {
    describe(`${inbound} -> ${upstream}${stream ? " (streamed)" : ""}`, () => {
      const model = Fixture.modelOf(upstream)

      it.effect("a text reply with its usage", () =>
        Effect.gen(function*() {
          const { gateway, tenant, upstream: fake } = yield* Fixture.GatewayWorld
          fake.reset()
          fake.script({ text: "Hello there, world", usage: { input: 21, output: 5 } })
          const answer = yield* Fixture.ask(gateway, tenant.token, inbound, { model, stream, system: "be brief" })
          expect(answer.text).toBe("Hello there, world")
          expect(answer.usage).toEqual({ input: 21, output: 5 })
          const sent = fake.requests()
          expect(sent).toHaveLength(1)
          expect(sent[0]!.protocol).toBe(Fixture.recordedProtocol[upstream])
          expect((sent[0]!.body as any).model).toBe("m1")
          expect(JSON.stringify(sent[0]!.body)).toContain("be brief")
        }))

      it.effect("two parallel tool calls", () =>
        Effect.gen(function*() {
          const { gateway, tenant, upstream: fake } = yield* Fixture.GatewayWorld
          fake.reset()
          fake.script({
            toolCalls: [
              { name: "get_weather", arguments: { city: "Paris", note: "long enough to be split into deltas" } },
              { name: "get_time", arguments: { city: "Tokyo" } }
            ]
          })
          const answer = yield* Fixture.ask(gateway, tenant.token, inbound, { model, stream, tools: true })
          expect(answer.toolCalls.map((call) => [call.name, call.args])).toEqual([
            ["get_weather", { city: "Paris", note: "long enough to be split into deltas" }],
            ["get_time", { city: "Tokyo" }]
          ])
          expect(new Set(answer.toolCalls.map((call) => call.id)).size).toBe(2)
          expect(answer.stop).toBe(
            inbound === "chat" ? "tool_calls" : inbound === "messages" ? "tool_use" : "completed"
          )
          const tools = JSON.stringify((fake.requests()[0]!.body as any).tools)
          expect(tools).toContain("get_weather")
          expect(tools).toContain("get_time")
        }))

      it.effect("a tool result round trip", () =>
        Effect.gen(function*() {
          const { gateway, tenant, upstream: fake } = yield* Fixture.GatewayWorld
          fake.reset()
          fake.script({ text: "It is sunny in Paris" })
          const answer = yield* Fixture.ask(gateway, tenant.token, inbound, { model, stream, toolRound: true })
          expect(answer.text).toBe("It is sunny in Paris")
          const result = Fixture.toolResultIn(fake.requests()[0]!)
          expect(result?.content).toBe("sunny")
          // The result still answers the call it belongs to, under whatever id the upstream protocol needs.
          const body = JSON.stringify(fake.requests()[0]!.body)
          expect(body).toContain(result!.id)
          expect(body).toContain("get_weather")
        }))

      it.effect("a reasoning reply", () =>
        Effect.gen(function*() {
          const { gateway, tenant, upstream: fake } = yield* Fixture.GatewayWorld
          fake.reset()
          fake.script({ thinking: "The user greets me, so I greet back.", text: "Hi!" })
          const reasoningAsk = inbound === "chat"
            ? { reasoning_effort: "high" }
            : inbound === "responses"
            ? { reasoning: { effort: "high", summary: "auto" } }
            : { thinking: { type: "enabled", budget_tokens: 2048 } }
          const answer = yield* Fixture.ask(gateway, tenant.token, inbound, { model, stream, extra: reasoningAsk })
          expect(answer.text).toBe("Hi!")
          expect(answer.reasoning).toBe("The user greets me, so I greet back.")
          // Anthropic's signature reaches a client whose protocol has a place for it.
          if (upstream === "anthropic-messages" && inbound !== "chat") expect(answer.signature).toBeTruthy()
        }))
    })
  }
})
