/**
 * A canonical request for a messages upstream (`POST /v1/messages`), and its
 * answer — a message object or the `message_start` ... `message_stop` event
 * stream — back into the canonical form. Reasoning in history is replayed
 * only when it is signed (Anthropic verifies it); anything else is dropped,
 * never turned into text.
 */
import type { Catalog } from "@agent-runtime/models"
import * as Canonical from "../Canonical.ts"
import * as Answer from "./answer.ts"
import type { UpstreamCodec } from "./codec.ts"
import * as TokenUsage from "./tokenUsage.ts"

/** The thinking budget of each reasoning level when the client named a level, not a budget. */
const budgets: Record<string, number> = { minimal: 1024, low: 2048, medium: 8192, high: 16384, xhigh: 16384 }
/** Anthropic's smallest budget. */
const minBudget = 1024
/** Tokens left for the answer when the budget shares the output limit. */
const answerRoom = 1024

type Block = Record<string, unknown>

const userBlocks = (content: string | ReadonlyArray<Canonical.UserContent>): Array<Block> =>
  typeof content === "string"
    ? [{ type: "text", text: content }]
    : content.map((part) =>
      part.type === "text"
        ? { type: "text", text: part.text }
        : { type: "image", source: { type: "base64", media_type: part.mimeType, data: part.data } }
    )

const assistantBlocks = (content: ReadonlyArray<Canonical.Content>): Array<Block> =>
  content.flatMap((block): Array<Block> => {
    switch (block.type) {
      case "thinking":
        if (!block.thinkingSignature) return []
        return block.redacted
          ? [{ type: "redacted_thinking", data: block.thinkingSignature }]
          : [{ type: "thinking", thinking: block.thinking, signature: block.thinkingSignature }]
      case "text":
        return block.text === "" ? [] : [{ type: "text", text: block.text }]
      case "toolCall":
        return [{ type: "tool_use", id: Canonical.toolId(block.id), name: block.name, input: block.arguments }]
    }
  })

/** Turns alternate: tool results and a following user message share one user turn; an empty assistant turn is left out. */
const messagesOf = (messages: ReadonlyArray<Canonical.Message>) => {
  const out: Array<{ role: "user" | "assistant"; content: Array<Block> }> = []
  const push = (role: "user" | "assistant", content: Array<Block>) => {
    if (content.length === 0) return
    const last = out.at(-1)
    if (last?.role === role) { for (const part of content) last.content.push(part) }
    else out.push({ role, content })
  }
  for (const message of messages) {
    if (message.role === "user") push("user", userBlocks(message.content))
    else if (message.role === "assistant") push("assistant", assistantBlocks(message.content))
    else if (message.role === "toolResult") {
      push("user", [{
        type: "tool_result",
        tool_use_id: Canonical.toolId(message.toolCallId),
        content: userBlocks(message.content),
        ...(message.isError ? { is_error: true } : {})
      }])
    }
  }
  return out
}

const encode = (request: Canonical.Request, model: Catalog.CatalogModel): Canonical.Json => {
  const body: Record<string, unknown> = { model: model.id, messages: messagesOf(request.context.messages) }
  let maxTokens = request.maxTokens ?? model.maxTokens
  if (request.reasoning !== undefined && model.reasoning) {
    // As the model layer does: the budget comes on top of the answer's limit, within the model's.
    let budget = request.thinkingBudget ?? budgets[request.reasoning]!
    maxTokens = request.maxTokens === undefined
      ? model.maxTokens
      : Math.min(request.maxTokens + budget, model.maxTokens)
    if (maxTokens <= budget) budget = Math.max(0, maxTokens - answerRoom)
    if (budget >= minBudget) body.thinking = { type: "enabled", budget_tokens: budget }
  }
  body.max_tokens = maxTokens
  if (request.context.systemPrompt !== undefined) body.system = request.context.systemPrompt
  if (request.stream) body.stream = true
  // Anthropic refuses a temperature with thinking on.
  if (request.temperature !== undefined && body.thinking === undefined) body.temperature = request.temperature
  if (request.topP !== undefined) body.top_p = request.topP
  if (request.stop !== undefined) body.stop_sequences = request.stop
  const tools = request.context.tools
  if (tools !== undefined && tools.length > 0) {
    body.tools = tools.map((tool) => ({
      name: tool.name,
      description: tool.description,
      input_schema: tool.parameters
    }))
  }
  const choice = request.toolChoice
  if (choice !== undefined || request.parallelToolCalls === false) {
    const type = choice === undefined ? "auto" : choice.type === "required" ? "any" : choice.type
    body.tool_choice = {
      type,
      ...(choice?.type === "tool" ? { name: choice.name } : {}),
      ...(request.parallelToolCalls === false && type !== "none" ? { disable_parallel_tool_use: true } : {})
    }
  }
  return body
}

const stopReason = (reason: unknown): Canonical.StopReason | undefined =>
  reason === "max_tokens" || reason === "model_context_window_exceeded"
    ? "length"
    : reason === "tool_use"
    ? "toolUse"
    : reason === null || reason === undefined
    ? undefined
    : "stop"

const decode = (body: any): Canonical.AssistantMessage => {
  const content = (Array.isArray(body?.content) ? body.content : []).flatMap((block: any): Array<Canonical.Content> => {
    switch (block?.type) {
      case "text":
        return [{ type: "text", text: String(block.text ?? "") }]
      case "thinking":
        return [{
          type: "thinking",
          thinking: String(block.thinking ?? ""),
          thinkingSignature: String(block.signature ?? "")
        }]
      case "redacted_thinking":
        return [{ type: "thinking", thinking: "", thinkingSignature: String(block.data ?? ""), redacted: true }]
      case "tool_use":
        return [{
          type: "toolCall",
          id: String(block.id),
          name: String(block.name),
          arguments: Canonical.parseArguments(block.input)
        }]
      default:
        return []
    }
  })
  return Answer.message(content, stopReason(body?.stop_reason) ?? "stop", TokenUsage.fromMessages(body?.usage))
}

const decoder = (answer: Answer.Answer) => (event: any): unknown => {
  switch (event?.type) {
    case "message_start":
      answer.tokens = TokenUsage.fromMessages(event.message?.usage, answer.tokens)
      return
    case "content_block_start": {
      const block = event.content_block
      if (block?.type === "text") answer.text(String(block.text ?? ""))
      else if (block?.type === "thinking") answer.thinking(String(block.thinking ?? ""))
      else if (block?.type === "redacted_thinking") answer.redacted(String(block.data ?? ""))
      else if (block?.type === "tool_use") answer.toolCall(String(block.id), String(block.name))
      return
    }
    case "content_block_delta": {
      const delta = event.delta
      if (delta?.type === "text_delta") answer.text(String(delta.text))
      else if (delta?.type === "thinking_delta") answer.thinking(String(delta.thinking))
      else if (delta?.type === "signature_delta") answer.signature(String(delta.signature))
      else if (delta?.type === "input_json_delta") answer.arguments(String(delta.partial_json))
      return
    }
    case "content_block_stop":
      return answer.end()
    case "message_delta": {
      const reason = stopReason(event.delta?.stop_reason)
      if (reason !== undefined) answer.stop(reason)
      if (event.usage !== undefined) answer.tokens = TokenUsage.fromMessages(event.usage, answer.tokens)
      return
    }
    case "error":
      return event.error ?? event
  }
}

export const upstream: UpstreamCodec = {
  api: "anthropic-messages",
  path: "/v1/messages",
  anthropic: true,
  headers: { "anthropic-version": "2023-06-01" },
  encode,
  decode,
  decoder
}
