/**
 * Failure modes other gateways are known for, each pinned: empty or merged
 * streamed tool-call arguments, lost reasoning, thinking turned into text,
 * missing usage in streams, cache_control dropped on pass-through, and
 * count_tokens that ignores the system prompt and tools.
 */
import { Http } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Fixture from "./GatewayFixture.ts"

const weatherSchema = { type: "object", properties: { city: { type: "string" } } }

/** Raw chat completion chunks of one streamed call (no helper in between). */
const chatChunks = (gateway: string, token: string, body: object) =>
  Effect.promise(async () => {
    const stream = await Fixture.openai(gateway, token).chat.completions.create({ ...body, stream: true } as any)
    const chunks: Array<any> = []
    for await (const chunk of stream as any) chunks.push(chunk)
    return chunks
  })

layer(Fixture.layer(), { excludeTestServices: true, timeout: 60_000 })("gateway failure modes", (it) => {
  it.effect("streamed tool calls: arguments that never streamed arrive whole, parallel calls keep their own", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      // The first call's input streams as nothing at all (an empty-argument tool); the second in many pieces.
      upstream.script({
        toolCalls: [
          { name: "get_time", arguments: "" },
          { name: "get_weather", arguments: { city: "Paris", detail: "a long argument split into many deltas" } }
        ]
      })
      const chunks = yield* chatChunks(gateway, tenant.token, {
        model: Fixture.modelOf("anthropic-messages"),
        messages: [{ role: "user", content: "hi" }],
        tools: [
          { type: "function", function: { name: "get_time", parameters: weatherSchema } },
          { type: "function", function: { name: "get_weather", parameters: weatherSchema } }
        ]
      })
      const byIndex = new Map<number, string>()
      for (const chunk of chunks) {
        for (const call of chunk.choices[0]?.delta?.tool_calls ?? []) {
          byIndex.set(call.index, (byIndex.get(call.index) ?? "") + (call.function?.arguments ?? ""))
        }
      }
      expect([...byIndex.keys()]).toEqual([0, 1])
      expect(JSON.parse(byIndex.get(0)!)).toEqual({})
      expect(JSON.parse(byIndex.get(1)!)).toEqual({ city: "Paris", detail: "a long argument split into many deltas" })
    }))

  it.effect("reasoning is not lost: a thinking signature survives a responses client's round trip to a messages upstream", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      upstream.script([{ thinking: "Think first.", text: "Answer." }, { text: "Again." }])
      const client = Fixture.openai(gateway, tenant.token)
      const model = Fixture.modelOf("anthropic-messages")
      const first = yield* Effect.promise(() =>
        client.responses.create({ model, input: "hi", reasoning: { effort: "high" }, max_output_tokens: 2000 })
      )
      const reasoning = first.output.find((item) => item.type === "reasoning") as any
      expect(reasoning.summary[0].text).toBe("Think first.")
      expect(reasoning.encrypted_content).toBeTruthy()
      yield* Effect.promise(() =>
        client.responses.create({
          model,
          input: [{ role: "user", content: "hi" }, ...first.output as Array<any>, { role: "user", content: "more" }],
          reasoning: { effort: "high" },
          max_output_tokens: 2000
        })
      )
      const replayed = (upstream.requests()[1]!.body as any).messages[1].content
      expect(replayed[0]).toMatchObject({
        type: "thinking",
        thinking: "Think first.",
        signature: reasoning.encrypted_content
      })
    }))

  it.effect("thinking blocks are never turned into text for an upstream that cannot take them back", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      upstream.script({ text: "fine" })
      yield* Effect.promise(() =>
        Fixture.anthropic(gateway, tenant.token).messages.create({
          model: Fixture.modelOf("openai-completions"),
          max_tokens: 100,
          messages: [
            { role: "user", content: "hi" },
            {
              role: "assistant",
              content: [
                { type: "thinking", thinking: "SECRET CHAIN OF THOUGHT", signature: "sig-abc" },
                { type: "text", text: "hello" }
              ]
            },
            { role: "user", content: "again" }
          ]
        })
      )
      const sent = JSON.stringify(upstream.requests()[0]!.body)
      expect(sent).not.toContain("SECRET CHAIN OF THOUGHT")
      expect(sent).toContain("hello")
    }))

  it.effect("usage in streams: asked upstream for the gateway's record, given to the client only when asked", () =>
    Effect.gen(function*() {
      const { databaseUrl, gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      // Usage is written every 100 ms: let the earlier tests' records land first.
      yield* Effect.sleep("300 millis")
      const before = (yield* Fixture.usageRows(databaseUrl, tenant.id, 0)).length
      upstream.script([{ text: "one", usage: { input: 31, output: 3 } }, {
        text: "two",
        usage: { input: 41, output: 4 }
      }])
      const body = { model: Fixture.modelOf("openai-completions"), messages: [{ role: "user", content: "hi" }] }
      const without = yield* chatChunks(gateway, tenant.token, body)
      expect(without.some((chunk) => chunk.usage)).toBe(false)
      expect((upstream.requests()[0]!.body as any).stream_options).toEqual({ include_usage: true })
      const withUsage = yield* chatChunks(gateway, tenant.token, { ...body, stream_options: { include_usage: true } })
      expect(withUsage.at(-1).usage).toMatchObject({ prompt_tokens: 41, completion_tokens: 4 })
      // Both calls were recorded, the first from the usage the client never saw.
      const rows = yield* Fixture.usageRows(databaseUrl, tenant.id, before + 2)
      expect(rows.slice(before).map((row) => [row.input, row.output])).toEqual([[31, 3], [41, 4]])
    }))

  it.effect("pass-through keeps cache_control, metadata and the anthropic-beta header", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      const body = {
        model: Fixture.modelOf("anthropic-messages"),
        max_tokens: 100,
        system: [{ type: "text", text: "long system prompt", cache_control: { type: "ephemeral" } }],
        messages: [{
          role: "user",
          content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral", ttl: "1h" } }]
        }],
        metadata: { user_id: "u-1" },
        some_future_field: { kept: true }
      }
      yield* Effect.promise(() =>
        Fixture.anthropic(gateway, tenant.token).messages.create(body as any, {
          headers: { "anthropic-beta": "prompt-caching-2024-07-31" }
        })
      )
      const sent = upstream.requests()[0]!
      expect(sent.body).toEqual({ ...body, model: "m1" })
      expect(sent.headers["anthropic-beta"]).toBe("prompt-caching-2024-07-31")
      expect(sent.headers["x-api-key"]).toBe("sk-up-msg-key")
    }))

  it.effect("count_tokens counts the system prompt and tools, locally or by the upstream", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      const client = Fixture.anthropic(gateway, tenant.token)
      const messages = [{ role: "user" as const, content: "What is the weather in Paris today?" }]
      const extra = {
        system: "You are a weather assistant. ".repeat(20),
        tools: [{
          name: "get_weather",
          description: "Weather for a city. ".repeat(10),
          input_schema: weatherSchema as any
        }]
      }
      for (const type of ["openai-completions", "anthropic-messages"] as const) {
        const model = Fixture.modelOf(type)
        const bare = yield* Effect.promise(() => client.messages.countTokens({ model, messages }))
        const full = yield* Effect.promise(() => client.messages.countTokens({ model, messages, ...extra }))
        expect(full.input_tokens).toBeGreaterThan(bare.input_tokens + 150)
      }
      // The messages upstream counted for itself (the fake's count is a quarter of the body's length).
      const counted = upstream.requests().filter((request) => request.protocol === "anthropic-count-tokens")
      expect(counted).toHaveLength(2)
      expect(JSON.stringify(counted[1]!.body)).toContain("get_weather")
      // Without anthropic-version the messages endpoints refuse, as the protocol does.
      const raw = yield* Http.client(gateway).post("/v1/messages/count_tokens", {
        headers: { "x-api-key": tenant.token },
        json: { model: Fixture.modelOf("anthropic-messages"), messages }
      })
      expect(raw.status).toBe(400)
      expect(raw.body).toMatchObject({
        type: "error",
        error: { type: "invalid_request_error", code: "INVALID_REQUEST" }
      })
    }))
})
