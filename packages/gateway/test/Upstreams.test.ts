import type { Catalog, ModelClient } from "@agent-runtime/models"
import { describe, expect, it } from "vitest"
import * as ChatCompletions from "../src/ChatCompletions.ts"
import { Answer } from "../src/internal/answer.ts"
import * as ChatUpstream from "../src/internal/chatUpstream.ts"
import * as MessagesUpstream from "../src/internal/messagesUpstream.ts"
import * as ResponsesUpstream from "../src/internal/responsesUpstream.ts"
import * as Messages from "../src/Messages.ts"

const model = (api: string, compat?: object) =>
  ({
    id: "m1",
    api,
    provider: "p",
    baseUrl: "http://x",
    reasoning: true,
    maxTokens: 32000,
    compat
  }) as unknown as Catalog.CatalogModel

/** The events an upstream decoder makes of a list of event data. */
const decodeAll = (decoder: (answer: Answer) => (data: any) => unknown, events: ReadonlyArray<unknown>) => {
  const seen: Array<ModelClient.ModelEvent> = []
  const answer = new Answer((event) => seen.push(event))
  const decode = decoder(answer)
  for (const event of events) expect(decode(event)).toBeUndefined()
  answer.done()
  return { seen, answer }
}

describe("encoding for an upstream", () => {
  const history = Messages.codec.decode({
    model: "p/m1",
    max_tokens: 100,
    system: "sys",
    messages: [
      { role: "user", content: "hi" },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "signed", signature: "sig" },
          { type: "tool_use", id: "toolu.1", name: "f", input: { a: 1 } }
        ]
      },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "toolu.1", content: "r" }, { type: "text", text: "more" }]
      }
    ],
    thinking: { type: "enabled", budget_tokens: 3000 },
    tool_choice: { type: "any", disable_parallel_tool_use: true }
  })

  it("chat: system first, tool ids normalised on both sides, signed reasoning left out, compat's output limit field", () => {
    const body = ChatUpstream.upstream.encode(
      history,
      model("openai-completions", { maxTokensField: "max_tokens" })
    ) as any
    expect(body.messages.map((message: any) => message.role)).toEqual(["system", "user", "assistant", "tool", "user"])
    expect(body.messages[2]).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [{ id: "toolu_1", type: "function", function: { name: "f", arguments: '{"a":1}' } }]
    })
    expect(body.messages[3]).toEqual({ role: "tool", tool_call_id: "toolu_1", content: "r" })
    expect(body).toMatchObject({ max_tokens: 100, reasoning_effort: "low", tool_choice: "required" })
    expect(JSON.stringify(body)).not.toContain("signed")
  })

  it("responses: stateless, instructions, reasoning asked with its encrypted content", () => {
    const body = ResponsesUpstream.upstream.encode({ ...history, stream: true }, model("openai-responses")) as any
    expect(body).toMatchObject({
      store: false,
      stream: true,
      instructions: "sys",
      reasoning: { effort: "low", summary: "auto" },
      include: ["reasoning.encrypted_content"],
      max_output_tokens: 100
    })
    expect(body.input.map((item: any) => item.type ?? item.role)).toEqual([
      "user",
      "function_call",
      "function_call_output",
      "user"
    ])
  })

  it("messages: one user turn for tool results and text, budget on top of the limit, no temperature with thinking", () => {
    const request = ChatCompletions.codec.decode({
      model: "p/m1",
      messages: [
        { role: "user", content: "hi" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }]
        },
        { role: "tool", tool_call_id: "c1", content: "r" },
        { role: "user", content: "and?" }
      ],
      reasoning_effort: "low",
      temperature: 0.5,
      max_completion_tokens: 500,
      parallel_tool_calls: false,
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }]
    })
    const body = MessagesUpstream.upstream.encode(request, model("anthropic-messages")) as any
    expect(body.messages.map((message: any) => message.role)).toEqual(["user", "assistant", "user"])
    expect(body.messages[2].content).toEqual([
      { type: "tool_result", tool_use_id: "c1", content: [{ type: "text", text: "r" }] },
      { type: "text", text: "and?" }
    ])
    expect(body).toMatchObject({
      max_tokens: 2548,
      thinking: { type: "enabled", budget_tokens: 2048 },
      tool_choice: { type: "auto", disable_parallel_tool_use: true }
    })
    expect(body.temperature).toBeUndefined()
  })
})

describe("decoding an upstream's stream", () => {
  it("chat: reasoning, text, two tool calls told apart by index, usage and stop", () => {
    const { answer, seen } = decodeAll(ChatUpstream.upstream.decoder, [
      { choices: [{ delta: { role: "assistant", content: "" } }] },
      { choices: [{ delta: { reasoning_content: "hm" } }] },
      { choices: [{ delta: { content: "ok" } }] },
      { choices: [{ delta: { tool_calls: [{ index: 0, id: "c1", function: { name: "f", arguments: "" } }] } }] },
      { choices: [{ delta: { tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] } }] },
      { choices: [{ delta: { tool_calls: [{ index: 0, function: { arguments: "1}" } }] } }] },
      { choices: [{ delta: { tool_calls: [{ index: 1, id: "c2", function: { name: "g", arguments: "{}" } }] } }] },
      { choices: [{ delta: {}, finish_reason: "tool_calls" }] },
      { choices: [], usage: { prompt_tokens: 10, completion_tokens: 3 } }
    ])
    expect(seen.map((event) => event.type)).toEqual([
      "start",
      "thinking_start",
      "thinking_delta",
      "thinking_end",
      "text_start",
      "text_delta",
      "text_end",
      "toolcall_start",
      "toolcall_delta",
      "toolcall_delta",
      "toolcall_end",
      "toolcall_start",
      "toolcall_delta",
      "toolcall_end",
      "done"
    ])
    expect(answer.message.content).toEqual([
      { type: "thinking", thinking: "hm" },
      { type: "text", text: "ok" },
      { type: "toolCall", id: "c1", name: "f", arguments: { a: 1 } },
      { type: "toolCall", id: "c2", name: "g", arguments: {} }
    ])
    expect(answer.message).toMatchObject({ stopReason: "toolUse", usage: { input: 10, output: 3 } })
  })

  it("responses: summary parts as paragraphs, the item as signature, arguments only in the done item", () => {
    const reasoning = {
      id: "rs_1",
      type: "reasoning",
      summary: [{ text: "a" }, { text: "b" }],
      encrypted_content: "enc"
    }
    const { answer } = decodeAll(ResponsesUpstream.upstream.decoder, [
      { type: "response.output_item.added", item: { type: "reasoning" } },
      { type: "response.reasoning_summary_part.added", summary_index: 0 },
      { type: "response.reasoning_summary_text.delta", delta: "a" },
      { type: "response.reasoning_summary_part.added", summary_index: 1 },
      { type: "response.reasoning_summary_text.delta", delta: "b" },
      { type: "response.output_item.done", item: reasoning },
      { type: "response.output_item.added", item: { type: "function_call", call_id: "c1", name: "f" } },
      { type: "response.output_item.done", item: { type: "function_call", arguments: '{"x":2}' } },
      { type: "response.incomplete", response: { usage: { input_tokens: 5, output_tokens: 7 } } }
    ])
    expect(answer.message.content).toEqual([
      { type: "thinking", thinking: "a\n\nb", thinkingSignature: JSON.stringify(reasoning) },
      { type: "toolCall", id: "c1", name: "f", arguments: { x: 2 } }
    ])
    expect(answer.message).toMatchObject({ stopReason: "length", usage: { input: 5, output: 7 } })
  })

  it("messages: signature and redacted thinking kept, usage updated by message_delta, an error event reported", () => {
    const { answer } = decodeAll(MessagesUpstream.upstream.decoder, [
      { type: "message_start", message: { usage: { input_tokens: 9, output_tokens: 1 } } },
      { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "t" } },
      { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "sig" } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_start", index: 1, content_block: { type: "redacted_thinking", data: "opaque" } },
      { type: "content_block_stop", index: 1 },
      { type: "message_delta", delta: { stop_reason: "max_tokens" }, usage: { output_tokens: 4 } }
    ])
    expect(answer.message.content).toEqual([
      { type: "thinking", thinking: "t", thinkingSignature: "sig" },
      { type: "thinking", thinking: "", thinkingSignature: "opaque", redacted: true }
    ])
    expect(answer.message).toMatchObject({ stopReason: "length", usage: { input: 9, output: 4 } })
    const decode = MessagesUpstream.upstream.decoder(new Answer(() => {}))
    expect(decode({ type: "error", error: { type: "overloaded_error", message: "busy" } })).toEqual({
      type: "overloaded_error",
      message: "busy"
    })
  })
})
