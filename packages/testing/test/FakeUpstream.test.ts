/**
 * The fake upstream driven by the official SDKs (`openai`, `@anthropic-ai/sdk`):
 * if they parse it, including their stream helpers' reassembly, the wire
 * format is right.
 */
import Anthropic from "@anthropic-ai/sdk"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect } from "effect"
import * as ChildProcess from "node:child_process"
import { fileURLToPath } from "node:url"
import OpenAI from "openai"
import * as FakeUpstream from "../src/FakeUpstream.ts"

const openai = (upstream: FakeUpstream.FakeUpstream, options: { maxRetries?: number } = {}) =>
  new OpenAI({
    apiKey: "sk-test",
    baseURL: `${upstream.url}/v1`,
    maxRetries: options.maxRetries ?? 0,
    defaultHeaders: { "x-custom": "yes" }
  })

const anthropic = (upstream: FakeUpstream.FakeUpstream, options: { maxRetries?: number } = {}) =>
  new Anthropic({ apiKey: "sk-ant-test", baseURL: upstream.url, maxRetries: options.maxRetries ?? 0 })

// Array.fromAsync is newer than the ES2023 lib this project compiles against.
const collect = async <A>(iterable: AsyncIterable<A>): Promise<Array<A>> => {
  const items: Array<A> = []
  for await (const item of iterable) items.push(item)
  return items
}

const call = <A>(f: () => Promise<A>) => Effect.promise(f)

/** The error a call fails with. */
const failure = <A>(f: () => Promise<A>) => Effect.flip(Effect.tryPromise({ try: f, catch: (error) => error }))

const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([duration, value]) => ({ ms: Duration.toMillis(duration), value }))

const weather = (city: string) => ({ city, unit: "celsius", note: "a longer argument, split over several deltas" })
const twoCalls: ReadonlyArray<FakeUpstream.ToolCall> = [
  { id: "call_a", name: "get_weather", arguments: weather("Paris") },
  { id: "call_b", name: "get_time", arguments: { zone: "Europe/Paris", format: "24h" } }
]
const chatTools: Array<OpenAI.Chat.ChatCompletionTool> = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } }
]
const responseTools: Array<OpenAI.Responses.Tool> = [
  { type: "function", name: "get_weather", parameters: { type: "object", properties: {} }, strict: false },
  { type: "function", name: "get_time", parameters: { type: "object", properties: {} }, strict: false }
]
const anthropicTools: Array<Anthropic.Tool> = [
  { name: "get_weather", input_schema: { type: "object", properties: {} } },
  { name: "get_time", input_schema: { type: "object", properties: {} } }
]
const user = [{ role: "user" as const, content: "hi" }]

describe("OpenAI chat completions", () => {
  it.scopedLive("a non-streamed text reply, its usage, and the request as sent", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Hello there world", usage: { input: 12, output: 3, cacheRead: 4 } })
      const completion = yield* call(() =>
        openai(upstream).chat.completions.create({ model: "gpt-4o-mini", messages: user, max_tokens: 50 })
      )
      expect(completion.object).toBe("chat.completion")
      expect(completion.model).toBe("gpt-4o-mini")
      expect(completion.choices[0]!.message).toMatchObject({ role: "assistant", content: "Hello there world" })
      expect(completion.choices[0]!.finish_reason).toBe("stop")
      expect(completion.usage).toMatchObject({
        prompt_tokens: 12,
        completion_tokens: 3,
        total_tokens: 15,
        prompt_tokens_details: { cached_tokens: 4 },
        completion_tokens_details: { reasoning_tokens: 0 }
      })
      const [request] = upstream.requests()
      expect(request).toMatchObject({
        method: "POST",
        path: "/v1/chat/completions",
        protocol: "openai-chat",
        body: { model: "gpt-4o-mini", messages: user, max_tokens: 50 }
      })
      expect(request!.headers.authorization).toBe("Bearer sk-test")
      expect(request!.headers["x-custom"]).toBe("yes")
    }))

  it.scopedLive("a streamed text reply in word deltas, usage only when asked, then [DONE]", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script([{ text: "Hello there world", usage: { input: 9, output: 3 } }, { text: "again" }])
      const chunks = yield* call(async () => {
        const stream = await openai(upstream).chat.completions.create({
          model: "gpt-4o-mini",
          messages: user,
          stream: true,
          stream_options: { include_usage: true }
        })
        return collect(stream)
      })
      const deltas = chunks.flatMap((chunk) => chunk.choices.map((choice) => choice.delta.content ?? ""))
      expect(deltas.filter((delta) => delta !== "")).toEqual(["Hello", " there", " world"])
      expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant")
      expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("stop")
      expect(chunks.at(-1)!.choices).toEqual([])
      expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 })
      expect(chunks.slice(0, -1).every((chunk) => chunk.usage === null)).toBe(true)

      const plain = yield* call(async () =>
        collect(
          await openai(upstream).chat.completions.create({ model: "gpt-4o-mini", messages: user, stream: true })
        )
      )
      expect(plain.every((chunk) => chunk.choices.length === 1 && !("usage" in chunk))).toBe(true)
    }))

  it.scopedLive("two parallel tool calls, reassembled by the stream helper", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ toolCalls: twoCalls })
      const { argumentChunks, completion } = yield* call(async () => {
        const stream = openai(upstream).chat.completions.stream({
          model: "gpt-4o-mini",
          messages: user,
          tools: chatTools
        })
        const argumentChunks = [0, 0]
        for await (const chunk of stream) {
          for (const toolCall of chunk.choices[0]?.delta.tool_calls ?? []) {
            if (toolCall.function?.arguments) argumentChunks[toolCall.index]!++
          }
        }
        return { completion: await stream.finalChatCompletion(), argumentChunks }
      })
      const choice = completion.choices[0]!
      expect(choice.finish_reason).toBe("tool_calls")
      expect(choice.message.content).toBeNull()
      const calls = choice.message.tool_calls!.map((toolCall) => {
        if (toolCall.type !== "function") throw new Error("expected a function call")
        return { id: toolCall.id, name: toolCall.function.name, arguments: JSON.parse(toolCall.function.arguments) }
      })
      expect(calls).toEqual(twoCalls)
      expect(argumentChunks.every((count) => count > 1)).toBe(true)
    }))

  it.scopedLive("reasoning streamed as reasoning_content, with reasoning tokens", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const thinking = "The user says hi, so greet back"
      upstream.script([
        { thinking, text: "Hi!", usage: { output: 12, reasoning: 9 } },
        { thinking, text: "Hi!", usage: { output: 12, reasoning: 9 } }
      ])
      const chunks = yield* call(async () =>
        collect(
          await openai(upstream).chat.completions.create({
            model: "deepseek-reasoner",
            messages: user,
            reasoning_effort: "high",
            stream: true,
            stream_options: { include_usage: true }
          })
        )
      )
      const reasoning = chunks.flatMap((chunk) =>
        chunk.choices.map((choice) => (choice.delta as { reasoning_content?: string }).reasoning_content ?? "")
      ).filter((delta) => delta !== "")
      expect(reasoning.length).toBeGreaterThan(1)
      expect(reasoning.join("")).toBe(thinking)
      expect(chunks.at(-1)!.usage!.completion_tokens_details!.reasoning_tokens).toBe(9)
      expect(upstream.requests()[0]!.body).toMatchObject({ reasoning_effort: "high" })

      const completion = yield* call(() =>
        openai(upstream).chat.completions.create({ model: "deepseek-reasoner", messages: user })
      )
      expect((completion.choices[0]!.message as { reasoning_content?: string }).reasoning_content).toBe(thinking)
      expect(completion.choices[0]!.message.content).toBe("Hi!")
    }))

  it.scopedLive("a reply cut by max_tokens ends with finish_reason length", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "cut short", stopReason: "length" })
      const completion = yield* call(() =>
        openai(upstream).chat.completions.create({ model: "gpt-4o-mini", messages: user })
      )
      expect(completion.choices[0]!.finish_reason).toBe("length")
    }))

  it.scopedLive("a 429 with retry-after is retried after the advertised wait", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script([{ error: { status: 429, retryAfter: 1 } }, { text: "after the wait" }])
      const { ms, value } = yield* timed(
        call(() =>
          openai(upstream, { maxRetries: 1 }).chat.completions.create({ model: "gpt-4o-mini", messages: user })
        )
      )
      expect(value.choices[0]!.message.content).toBe("after the wait")
      expect(ms).toBeGreaterThanOrEqual(950)
      expect(upstream.requests()).toHaveLength(2)
    }))

  it.scopedLive("a 401 is the SDK's AuthenticationError", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ error: { status: 401 } })
      const error = yield* failure(() =>
        openai(upstream, { maxRetries: 1 }).chat.completions.create({ model: "gpt-4o-mini", messages: user })
      )
      expect(error).toBeInstanceOf(OpenAI.AuthenticationError)
      expect(error).toMatchObject({ status: 401, code: "invalid_api_key", type: "invalid_request_error" })
      expect(upstream.requests()).toHaveLength(1)
    }))
})

describe("OpenAI responses", () => {
  it.scopedLive("a non-streamed text reply and its usage", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Hello there world", usage: { input: 20, output: 5, cacheRead: 8, reasoning: 2 } })
      const response = yield* call(() =>
        openai(upstream).responses.create({ model: "gpt-5-mini", input: "hi", instructions: "be brief" })
      )
      expect(response).toMatchObject({ object: "response", status: "completed", model: "gpt-5-mini" })
      expect(response.instructions).toBe("be brief")
      expect(response.output_text).toBe("Hello there world")
      expect(response.output[0]).toMatchObject({ type: "message", role: "assistant", status: "completed" })
      expect(response.usage).toEqual({
        input_tokens: 20,
        input_tokens_details: { cached_tokens: 8 },
        output_tokens: 5,
        output_tokens_details: { reasoning_tokens: 2 },
        total_tokens: 25
      })
      expect(upstream.requests()[0]).toMatchObject({ path: "/v1/responses", protocol: "openai-responses" })
    }))

  it.scopedLive("a streamed text reply: the real event sequence, numbered, ending in response.completed", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Hello there world", usage: { input: 7, output: 3 } })
      const { events, response } = yield* call(async () => {
        const stream = openai(upstream).responses.stream({ model: "gpt-5-mini", input: "hi" })
        const events = await collect(stream)
        return { events, response: await stream.finalResponse() }
      })
      expect(events.map((event) => event.type)).toEqual([
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed"
      ])
      expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, i) => i))
      const deltas = events.flatMap((event) => event.type === "response.output_text.delta" ? [event.delta] : [])
      expect(deltas).toEqual(["Hello", " there", " world"])
      expect(response.output_text).toBe("Hello there world")
      expect(response.usage).toMatchObject({ input_tokens: 7, output_tokens: 3, total_tokens: 10 })
    }))

  it.scopedLive("two parallel function calls, reassembled by the stream helper", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ toolCalls: twoCalls })
      const { events, response } = yield* call(async () => {
        const stream = openai(upstream).responses.stream({ model: "gpt-5-mini", input: "hi", tools: responseTools })
        const events = await collect(stream)
        return { events, response: await stream.finalResponse() }
      })
      const calls = response.output.flatMap((item) =>
        item.type === "function_call"
          ? [{ id: item.call_id, name: item.name, arguments: JSON.parse(item.arguments) }]
          : []
      )
      expect(calls).toEqual(twoCalls)
      const deltas = events.filter((event) => event.type === "response.function_call_arguments.delta")
      expect(deltas.filter((event) => event.output_index === 0).length).toBeGreaterThan(1)
      expect(deltas.filter((event) => event.output_index === 1).length).toBeGreaterThan(1)
      expect(response.status).toBe("completed")
    }))

  it.scopedLive("reasoning as a summary, streamed and not, with reasoning tokens", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const thinking = "**Greeting** The user says hi"
      upstream.script([
        { thinking, text: "Hi!", usage: { output: 10, reasoning: 6 } },
        { thinking, text: "Hi!", usage: { output: 10, reasoning: 6 } }
      ])
      const request = {
        model: "gpt-5-mini",
        input: "hi",
        reasoning: { effort: "high" as const, summary: "auto" as const }
      }
      const { events, response } = yield* call(async () => {
        const stream = openai(upstream).responses.stream(request)
        const events = await collect(stream)
        return { events, response: await stream.finalResponse() }
      })
      const deltas = events.flatMap((event) =>
        event.type === "response.reasoning_summary_text.delta" ? [event.delta] : []
      )
      expect(deltas.length).toBeGreaterThan(1)
      expect(deltas.join("")).toBe(thinking)
      expect(response.output[0]).toMatchObject({
        type: "reasoning",
        summary: [{ type: "summary_text", text: thinking }]
      })
      expect(response.output_text).toBe("Hi!")
      expect(response.usage!.output_tokens_details.reasoning_tokens).toBe(6)

      const plain = yield* call(() => openai(upstream).responses.create(request))
      expect(plain.output[0]).toMatchObject({ type: "reasoning", summary: [{ type: "summary_text", text: thinking }] })
      expect(plain.reasoning).toMatchObject({ effort: "high", summary: "auto" })
    }))

  it.scopedLive("a reply cut by max_output_tokens is incomplete", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "cut short", stopReason: "length" })
      const { events, response } = yield* call(async () => {
        const stream = openai(upstream).responses.stream({ model: "gpt-5-mini", input: "hi", max_output_tokens: 16 })
        const events = await collect(stream)
        return { events, response: await stream.finalResponse() }
      })
      expect(events.at(-1)!.type).toBe("response.incomplete")
      expect(response.status).toBe("incomplete")
      expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" })
    }))

  it.scopedLive("a 429 with retry-after is retried after the advertised wait", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script([{ error: { status: 429, retryAfter: 1 } }, { text: "after the wait" }])
      const { ms, value } = yield* timed(call(async () => {
        const stream = openai(upstream, { maxRetries: 1 }).responses.stream({ model: "gpt-5-mini", input: "hi" })
        return stream.finalResponse()
      }))
      expect(value.output_text).toBe("after the wait")
      expect(ms).toBeGreaterThanOrEqual(950)
      expect(upstream.requests()).toHaveLength(2)
    }))

  it.scopedLive("a 401 is the SDK's AuthenticationError", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ error: { status: 401, message: "bad key" } })
      const error = yield* failure(() => openai(upstream).responses.create({ model: "gpt-5-mini", input: "hi" }))
      expect(error).toBeInstanceOf(OpenAI.AuthenticationError)
      expect(error).toMatchObject({ status: 401, error: { message: "bad key", code: "invalid_api_key", param: null } })
    }))
})

describe("Anthropic messages", () => {
  it.scopedLive("a non-streamed text reply, its usage, and the request as sent", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Hello there world", usage: { input: 11, output: 3, cacheRead: 100, cacheWrite: 50 } })
      const message = yield* call(() =>
        anthropic(upstream).messages.create({ model: "claude-sonnet-4-6", max_tokens: 64, messages: user })
      )
      expect(message).toMatchObject({
        type: "message",
        role: "assistant",
        model: "claude-sonnet-4-6",
        content: [{ type: "text", text: "Hello there world" }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: { input_tokens: 11, output_tokens: 3, cache_read_input_tokens: 100, cache_creation_input_tokens: 50 }
      })
      const [request] = upstream.requests()
      expect(request).toMatchObject({ path: "/v1/messages", protocol: "anthropic-messages" })
      // SDK 1.x sends the API key as a bearer token, no longer as x-api-key.
      expect(request!.headers.authorization).toBe("Bearer sk-ant-test")
      expect(request!.headers["anthropic-version"]).toMatch(/^\d{4}-\d{2}-\d{2}$/)
    }))

  it.scopedLive("a streamed text reply in word deltas, with usage from message_start and message_delta", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Hello there world", usage: { input: 11, output: 3, cacheRead: 5 } })
      const { deltas, message, types } = yield* call(async () => {
        const stream = anthropic(upstream).messages.stream({
          model: "claude-sonnet-4-6",
          max_tokens: 64,
          messages: user
        })
        const deltas: Array<string> = []
        const types: Array<string> = []
        stream.on("text", (delta) => deltas.push(delta))
        stream.on("streamEvent", (event) => types.push(event.type))
        return { deltas, types, message: await stream.finalMessage() }
      })
      expect(deltas).toEqual(["Hello", " there", " world"])
      expect(types).toEqual([
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop"
      ])
      expect(message.content).toEqual([{ type: "text", text: "Hello there world" }])
      expect(message.stop_reason).toBe("end_turn")
      expect(message.usage).toMatchObject({ input_tokens: 11, output_tokens: 3, cache_read_input_tokens: 5 })
    }))

  it.scopedLive("two parallel tool_use blocks, reassembled by the stream helper", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Let me check.", toolCalls: twoCalls })
      const { fragments, message } = yield* call(async () => {
        const stream = anthropic(upstream).messages.stream({
          model: "claude-sonnet-4-6",
          max_tokens: 256,
          messages: user,
          tools: anthropicTools
        })
        let fragments = 0
        stream.on("inputJson", (partial) => {
          if (partial !== "") fragments++
        })
        const message = await stream.finalMessage()
        return { fragments, message }
      })
      expect(message.stop_reason).toBe("tool_use")
      expect(message.content[0]).toEqual({ type: "text", text: "Let me check." })
      const calls = message.content.flatMap((block) =>
        block.type === "tool_use" ? [{ id: block.id, name: block.name, arguments: block.input }] : []
      )
      expect(calls).toEqual(twoCalls)
      expect(fragments).toBeGreaterThan(4)

      upstream.script({ toolCalls: [{ name: "get_time", arguments: { zone: "UTC" } }] })
      const plain = yield* call(() =>
        anthropic(upstream).messages.create({ model: "claude-sonnet-4-6", max_tokens: 256, messages: user })
      )
      expect(plain.content).toEqual([
        { type: "tool_use", id: expect.stringMatching(/^toolu_/), name: "get_time", input: { zone: "UTC" } }
      ])
    }))

  it.scopedLive("thinking streamed with its signature, and not streamed", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const thinking = "The user greets me; greet back"
      upstream.script([{ thinking, text: "Hi!" }, { thinking, text: "Hi!" }])
      const request = {
        model: "claude-sonnet-4-6",
        max_tokens: 2048,
        thinking: { type: "enabled" as const, budget_tokens: 1024 },
        messages: user
      }
      const { deltas, message, signatures } = yield* call(async () => {
        const stream = anthropic(upstream).messages.stream(request)
        const deltas: Array<string> = []
        const signatures: Array<string> = []
        stream.on("thinking", (delta) => deltas.push(delta))
        stream.on("signature", (signature) => signatures.push(signature))
        return { deltas, signatures, message: await stream.finalMessage() }
      })
      expect(deltas.length).toBeGreaterThan(1)
      expect(deltas.join("")).toBe(thinking)
      expect(signatures).toHaveLength(1)
      expect(message.content).toEqual([
        { type: "thinking", thinking, signature: signatures[0] },
        { type: "text", text: "Hi!" }
      ])
      const plain = yield* call(() => anthropic(upstream).messages.create(request))
      expect(plain.content[0]).toEqual({ type: "thinking", thinking, signature: signatures[0] })
    }))

  it.scopedLive("a reply cut by max_tokens stops with max_tokens", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "cut short", stopReason: "length" })
      const message = yield* call(() =>
        anthropic(upstream).messages.stream({ model: "claude-sonnet-4-6", max_tokens: 2, messages: user })
          .finalMessage()
      )
      expect(message.stop_reason).toBe("max_tokens")
    }))

  it.scopedLive("count_tokens answers the provider's own count", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const count = yield* call(() =>
        anthropic(upstream).messages.countTokens({ model: "claude-sonnet-4-6", messages: user })
      )
      const body = JSON.stringify(upstream.requests()[0]!.body)
      expect(count).toEqual({ input_tokens: Math.ceil(body.length / 4) })
      expect(upstream.requests()[0]!.protocol).toBe("anthropic-count-tokens")
    }))

  it.scopedLive("a 429 with retry-after is retried after the advertised wait", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script([{ error: { status: 429, retryAfter: 1 } }, { text: "after the wait" }])
      const { ms, value } = yield* timed(call(() =>
        anthropic(upstream, { maxRetries: 1 }).messages.stream({
          model: "claude-sonnet-4-6",
          max_tokens: 64,
          messages: user
        }).finalMessage()
      ))
      expect(value.content).toEqual([{ type: "text", text: "after the wait" }])
      expect(ms).toBeGreaterThanOrEqual(950)
      expect(upstream.requests()).toHaveLength(2)
    }))

  it.scopedLive("a 401 is the SDK's AuthenticationError; a 529 is overloaded_error", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script([{ error: { status: 401 } }, { error: { status: 529 } }])
      const request = { model: "claude-sonnet-4-6", max_tokens: 64, messages: user }
      const unauthorized = yield* failure(() => anthropic(upstream, { maxRetries: 1 }).messages.create(request))
      expect(unauthorized).toBeInstanceOf(Anthropic.AuthenticationError)
      expect(unauthorized).toMatchObject({
        status: 401,
        error: { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } }
      })
      const overloaded = yield* failure(() => anthropic(upstream).messages.create(request))
      expect(overloaded).toBeInstanceOf(Anthropic.InternalServerError)
      expect(overloaded).toMatchObject({ status: 529, error: { type: "error", error: { type: "overloaded_error" } } })
      expect(upstream.requests()).toHaveLength(2)
    }))
})

describe("fake upstream", () => {
  it.scopedLive("answers ok when nothing is scripted; scripts per model before any model", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const client = openai(upstream)
      const reply = (model: string) =>
        Effect.map(
          call(() => client.chat.completions.create({ model, messages: user })),
          (completion) => completion.choices[0]!.message.content
        )
      expect(yield* reply("a")).toBe("ok")
      upstream.script({ text: "for b" }, { model: "b" })
      upstream.script({ text: "for anyone" })
      expect(yield* reply("a")).toBe("for anyone")
      expect(yield* reply("b")).toBe("for b")
      expect(yield* reply("b")).toBe("ok")
      upstream.reset()
      expect(upstream.requests()).toEqual([])
    }))

  it.scopedLive("a stream cut after N events fails the SDK after N events", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      upstream.script({ text: "Hello there world", cutAfterEvents: 3 })
      const { chunks, error } = yield* call(async () => {
        const stream = await openai(upstream).chat.completions.create({ model: "m", messages: user, stream: true })
        const chunks: Array<unknown> = []
        try {
          for await (const chunk of stream) chunks.push(chunk)
          return { chunks, error: undefined }
        } catch (error) {
          return { chunks, error }
        }
      })
      expect(chunks).toHaveLength(3)
      expect(error).toBeInstanceOf(Error)

      upstream.script({ text: "Hello there world", cutAfterEvents: 4 })
      const cut = yield* failure(() =>
        anthropic(upstream).messages.stream({ model: "m", max_tokens: 8, messages: user }).finalMessage()
      )
      expect(cut).toBeInstanceOf(Error)
    }))

  it.scopedLive("latency and token delays are real time", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start({ tokenDelayMs: 40 })
      upstream.script({ text: "one two three four five", latencyMs: 100 })
      const { ms } = yield* timed(call(async () =>
        collect(await openai(upstream).chat.completions.create({ model: "m", messages: user, stream: true }))
      ))
      expect(ms).toBeGreaterThanOrEqual(100 + 5 * 40 - 10)
    }))

  it.scopedLive("lists models in either SDK's shape", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start({ models: ["gpt-4o-mini", "claude-sonnet-4-6"] })
      const openAiModels = yield* call(async () => collect(await openai(upstream).models.list()))
      expect(openAiModels.map((model) => [model.id, model.object])).toEqual([
        ["gpt-4o-mini", "model"],
        ["claude-sonnet-4-6", "model"]
      ])
      const claudeModels = yield* call(async () => collect(await anthropic(upstream).models.list()))
      expect(claudeModels.map((model) => model.id)).toEqual(["gpt-4o-mini", "claude-sonnet-4-6"])
    }))

  it.scopedLive("refuses what a real upstream refuses, in the protocol's error body", () =>
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const post = (path: string, body: string) =>
        call(async () => {
          const response = await fetch(upstream.url + path, { method: "POST", body })
          return { status: response.status, body: await response.json() }
        })
      expect(yield* post("/v1/messages", JSON.stringify({ model: "m", messages: user }))).toEqual({
        status: 400,
        body: {
          type: "error",
          error: { type: "invalid_request_error", message: "max_tokens: Field required" },
          request_id: expect.any(String)
        }
      })
      expect(yield* post("/v1/chat/completions", "{not json")).toMatchObject({
        status: 400,
        body: { error: { type: "invalid_request_error", param: null, code: null } }
      })
      expect(yield* post("/v1/nowhere", "{}")).toMatchObject({
        status: 404,
        body: { error: { message: "Invalid URL (POST /v1/nowhere)" } }
      })
    }))

  it.live(
    "the script runs it as a process, scripted over HTTP, until SIGTERM",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const script = fileURLToPath(new URL("../../../scripts/fake-upstream.ts", import.meta.url))
        const child = ChildProcess.spawn(process.execPath, [script], {
          env: { ...process.env, PORT: "0", FIXED_LATENCY_MS: "0" },
          stdio: ["ignore", "pipe", "inherit"]
        })
        const exited = yield* Deferred.make<number | null>()
        child.on("exit", (code) => Deferred.unsafeDone(exited, Effect.succeed(code)))
        yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
        const url = yield* Effect.async<string>((resume) => {
          let output = ""
          child.stdout!.on("data", (chunk: Buffer) => {
            output += chunk.toString()
            const match = output.match(/^fake-upstream listening (http:\/\/127\.0\.0\.1:\d+)\n/)
            if (match) resume(Effect.succeed(match[1]!))
          })
        }).pipe(
          Effect.raceFirst(Effect.flatMap(Deferred.await(exited), (code) => Effect.die(`script exited with ${code}`))),
          Effect.timeout("20 seconds")
        )
        const admin = (path: string, body?: unknown) =>
          call(async () => {
            const response = await fetch(url + path, {
              method: body === undefined ? "GET" : "POST",
              ...(body === undefined ? {} : { body: JSON.stringify(body) })
            })
            return response.json()
          })
        expect(yield* admin("/_fake/script?model=m", [{ text: "scripted" }, { text: "again" }])).toEqual({ queued: 2 })
        const completion = yield* call(() =>
          new OpenAI({ apiKey: "k", baseURL: `${url}/v1` }).chat.completions.create({ model: "m", messages: user })
        )
        expect(completion.choices[0]!.message.content).toBe("scripted")
        expect(yield* admin("/_fake/requests")).toMatchObject([{ path: "/v1/chat/completions", body: { model: "m" } }])
        expect(yield* admin("/_fake/reset", {})).toEqual({ reset: true })
        expect(yield* admin("/_fake/requests")).toEqual([])
        child.kill("SIGTERM")
        yield* Deferred.await(exited).pipe(Effect.timeout("20 seconds"))
      })),
    60_000
  )
})
