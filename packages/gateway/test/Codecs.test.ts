import { describe, expect, it } from "vitest"
import * as ChatCompletions from "../src/ChatCompletions.ts"
import { GatewayError } from "../src/GatewayError.ts"
import * as Sse from "../src/internal/sse.ts"
import * as Messages from "../src/Messages.ts"
import * as Responses from "../src/Responses.ts"
import * as TokenCount from "../src/TokenCount.ts"

const tools = [{ type: "function", function: { name: "f", description: "d", parameters: { type: "object" } } }]

describe("decoding into the canonical form", () => {
  it("chat: system and developer messages, images, tool calls and their results, controls", () => {
    const request = ChatCompletions.codec.decode({
      model: "p/m",
      messages: [
        { role: "system", content: "s1" },
        { role: "developer", content: [{ type: "text", text: "s2" }] },
        {
          role: "user",
          content: [{ type: "text", text: "look" }, {
            type: "image_url",
            image_url: { url: "data:image/png;base64,AAAA" }
          }]
        },
        {
          role: "assistant",
          content: null,
          reasoning_content: "hmm",
          tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: '{"x":1}' } }]
        },
        { role: "tool", tool_call_id: "c1", content: "done" }
      ],
      tools,
      tool_choice: { type: "function", function: { name: "f" } },
      reasoning_effort: "low",
      max_completion_tokens: 9,
      stop: "END",
      parallel_tool_calls: false,
      stream: true,
      stream_options: { include_usage: true }
    })
    expect(request.context.systemPrompt).toBe("s1\n\ns2")
    expect(request.context.messages[0]).toMatchObject({
      role: "user",
      content: [{ type: "text" }, { type: "image", mimeType: "image/png", data: "AAAA" }]
    })
    expect(request.context.messages[1]).toMatchObject({
      role: "assistant",
      content: [{ type: "thinking", thinking: "hmm" }, { type: "toolCall", id: "c1", name: "f", arguments: { x: 1 } }]
    })
    expect(request.context.messages[2]).toMatchObject({
      role: "toolResult",
      toolCallId: "c1",
      toolName: "f",
      content: [{ type: "text", text: "done" }]
    })
    expect(request).toMatchObject({
      toolChoice: { type: "tool", name: "f" },
      reasoning: "low",
      maxTokens: 9,
      stop: ["END"],
      parallelToolCalls: false,
      stream: true,
      includeUsage: true
    })
  })

  it("responses: instructions, items of one assistant turn kept together, reasoning with its signature", () => {
    const request = Responses.codec.decode({
      model: "p/m",
      instructions: "be brief",
      input: [
        { role: "user", content: "hi" },
        { type: "reasoning", summary: [{ type: "summary_text", text: "think" }], encrypted_content: "sig" },
        { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "c1", output: "ok" }
      ],
      reasoning: { effort: "high" }
    })
    expect(request.context.systemPrompt).toBe("be brief")
    expect(request.context.messages.map((message) => message.role)).toEqual(["user", "assistant", "toolResult"])
    expect(request.context.messages[1]).toMatchObject({
      content: [{ type: "thinking", thinking: "think", thinkingSignature: "sig" }, { type: "toolCall", id: "c1" }]
    })
    expect(request.reasoning).toBe("high")
    expect(() => Responses.codec.decode({ model: "p/m", input: "x", previous_response_id: "resp_1" })).toThrow(
      GatewayError
    )
  })

  it("messages: tool results ahead of the user's text, thinking budget, tool choice any", () => {
    const request = Messages.codec.decode({
      model: "p/m",
      max_tokens: 100,
      system: [{ type: "text", text: "sys", cache_control: { type: "ephemeral" } }],
      messages: [
        { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "f", input: { a: 1 } }] },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "t1", content: "r", is_error: true }, {
            type: "text",
            text: "next"
          }]
        }
      ],
      thinking: { type: "enabled", budget_tokens: 3000 },
      tool_choice: { type: "any", disable_parallel_tool_use: true }
    })
    expect(request.context.systemPrompt).toBe("sys")
    expect(request.context.messages.map((message) => message.role)).toEqual(["assistant", "toolResult", "user"])
    expect(request.context.messages[1]).toMatchObject({ isError: true, toolName: "f" })
    expect(request).toMatchObject({
      reasoning: "low",
      thinkingBudget: 3000,
      toolChoice: { type: "required" },
      parallelToolCalls: false
    })
    expect(() => Messages.validate({ model: "p/m", messages: [] })).toThrow(/max_tokens/)
  })

  it("refuses what cannot be translated with 400 naming the field", () => {
    try {
      ChatCompletions.codec.decode({
        model: "p/m",
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://x/y.png" } }] }]
      })
      expect.unreachable()
    } catch (error) {
      expect(error).toMatchObject({ status: 400, code: "INVALID_REQUEST", param: "messages.0.content.0.image_url" })
    }
  })
})

describe("SSE frames", () => {
  it("splits frames across chunks and normalises CRLF", () => {
    const splitter = new Sse.Splitter()
    expect(splitter.push('data: {"a"')).toEqual([])
    expect(splitter.push(":1}\r\n\r\nevent: x\ndata: 2\n\nda")).toEqual(['data: {"a":1}\n\n', "event: x\ndata: 2\n\n"])
    expect(splitter.rest()).toBe("da")
    expect(Sse.dataOf("event: x\ndata: 2\n\n")).toBe("2")
  })

  it("chat usage tap drops the usage chunk the client did not ask for, keeping its counts", () => {
    const tap = ChatCompletions.codec.usageTap({})
    expect(tap.frame('data: {"choices":[{"delta":{}}],"usage":null}\n\n')).toBe(true)
    expect(
      tap.frame(
        'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}\n\n'
      )
    ).toBe(false)
    expect(tap.usage()).toMatchObject({ input: 6, cacheRead: 4, output: 2 })
    expect(
      ChatCompletions.codec.usageTap({ stream_options: { include_usage: true } }).frame(
        'data: {"choices":[],"usage":{}}\n\n'
      )
    ).toBe(true)
  })
})

describe("token estimate", () => {
  it("counts system prompt, tools and images", () => {
    const base = Messages.codec.decode({ model: "p/m", messages: [{ role: "user", content: "hello there" }] })
    const withSystem = Messages.codec.decode({
      model: "p/m",
      system: "x".repeat(400),
      messages: [{ role: "user", content: "hello there" }]
    })
    const withTools = Messages.codec.decode({
      model: "p/m",
      messages: [{ role: "user", content: "hello there" }],
      tools: [{ name: "f", description: "y".repeat(400), input_schema: { type: "object" } }]
    })
    const withImage = Messages.codec.decode({
      model: "p/m",
      messages: [{
        role: "user",
        content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AA" } }]
      }]
    })
    expect(TokenCount.estimate(withSystem) - TokenCount.estimate(base)).toBe(100)
    expect(TokenCount.estimate(withTools) - TokenCount.estimate(base)).toBeGreaterThan(100)
    expect(TokenCount.estimate(withImage)).toBeGreaterThanOrEqual(1600)
  })
})
