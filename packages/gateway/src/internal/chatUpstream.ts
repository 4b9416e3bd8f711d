/**
 * A canonical request for a chat completions upstream
 * (`POST /chat/completions`), and its answer — a completion or a stream of
 * `chat.completion.chunk`s — back into the canonical form. Reasoning in
 * history goes back as `reasoning_content` only when it is plain text (not
 * another API's signed reasoning). The model's compatibility settings decide
 * the output limit's field, whether reasoning effort and streamed usage can
 * be asked for.
 */
import type { Catalog } from "@agent-runtime/models"
import * as Canonical from "../Canonical.ts"
import * as Answer from "./answer.ts"
import type { UpstreamCodec } from "./codec.ts"
import * as TokenUsage from "./tokenUsage.ts"

/** The compatibility settings this encoder reads (custom providers and catalog models may set them). */
interface Compat {
  readonly maxTokensField?: "max_completion_tokens" | "max_tokens"
  readonly supportsReasoningEffort?: boolean
  readonly supportsUsageInStreaming?: boolean
  readonly thinkingFormat?: string
}

const userContent = (content: string | ReadonlyArray<Canonical.UserContent>) =>
  typeof content === "string"
    ? content
    : content.map((part) =>
      part.type === "text"
        ? { type: "text", text: part.text }
        : { type: "image_url", image_url: { url: `data:${part.mimeType};base64,${part.data}` } }
    )

const messagesOf = (request: Canonical.Request) => {
  const out: Array<Record<string, unknown>> = []
  if (request.context.systemPrompt !== undefined) out.push({ role: "system", content: request.context.systemPrompt })
  for (const message of request.context.messages) {
    if (message.role === "user") out.push({ role: "user", content: userContent(message.content) })
    else if (message.role === "toolResult") {
      out.push({
        role: "tool",
        tool_call_id: Canonical.toolId(message.toolCallId),
        content: message.content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("")
      })
    } else if (message.role === "assistant") {
      let text = ""
      let reasoning = ""
      const calls: Array<unknown> = []
      for (const block of message.content) {
        if (block.type === "text") text += block.text
        else if (block.type === "thinking") {
          if (!block.thinkingSignature) reasoning += block.thinking
        } else {
          calls.push({
            id: Canonical.toolId(block.id),
            type: "function",
            function: { name: block.name, arguments: JSON.stringify(block.arguments) }
          })
        }
      }
      if (text === "" && calls.length === 0) continue
      out.push({
        role: "assistant",
        content: text === "" ? null : text,
        ...(reasoning === "" ? {} : { reasoning_content: reasoning }),
        ...(calls.length === 0 ? {} : { tool_calls: calls })
      })
    }
  }
  return out
}

const encode = (request: Canonical.Request, model: Catalog.CatalogModel): Canonical.Json => {
  const compat = (model.compat ?? {}) as Compat
  const body: Record<string, unknown> = { model: model.id, messages: messagesOf(request) }
  if (request.stream) {
    body.stream = true
    // Usage in a stream only comes when asked for; the gateway needs it for the usage record.
    if (compat.supportsUsageInStreaming !== false) body.stream_options = { include_usage: true }
  }
  if (request.maxTokens !== undefined) body[compat.maxTokensField ?? "max_completion_tokens"] = request.maxTokens
  if (request.temperature !== undefined) body.temperature = request.temperature
  if (request.topP !== undefined) body.top_p = request.topP
  if (request.stop !== undefined) body.stop = request.stop
  if (
    request.reasoning !== undefined && model.reasoning && compat.supportsReasoningEffort !== false &&
    (compat.thinkingFormat === undefined || compat.thinkingFormat === "openai")
  ) {
    body.reasoning_effort = request.reasoning === "xhigh" ? "high" : request.reasoning
  }
  const tools = request.context.tools
  if (tools !== undefined && tools.length > 0) {
    body.tools = tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, description: tool.description, parameters: tool.parameters }
    }))
    if (request.parallelToolCalls !== undefined) body.parallel_tool_calls = request.parallelToolCalls
  }
  const choice = request.toolChoice
  if (choice !== undefined) {
    body.tool_choice = choice.type === "tool" ? { type: "function", function: { name: choice.name } } : choice.type
  }
  return body
}

const stopReason = (reason: unknown): Canonical.StopReason | undefined =>
  reason === "length"
    ? "length"
    : reason === "tool_calls" || reason === "function_call"
    ? "toolUse"
    : reason === null || reason === undefined
    ? undefined
    : "stop"

/** Reasoning text under the names OpenAI-compatible servers use for it. */
const reasoningOf = (message: any): unknown => message.reasoning_content ?? message.reasoning ?? message.reasoning_text

const decode = (body: any): Canonical.AssistantMessage => {
  const choice = Array.isArray(body?.choices) ? body.choices[0] : undefined
  const message = choice?.message ?? {}
  const content: Array<Canonical.Content> = []
  const reasoning = reasoningOf(message)
  if (typeof reasoning === "string" && reasoning !== "") content.push({ type: "thinking", thinking: reasoning })
  if (typeof message.content === "string" && message.content !== "") {
    content.push({ type: "text", text: message.content })
  }
  for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
    content.push({
      type: "toolCall",
      id: String(call?.id ?? ""),
      name: String(call?.function?.name ?? ""),
      arguments: Canonical.parseArguments(call?.function?.arguments)
    })
  }
  const usage = Canonical.isObject(body?.usage) ? TokenUsage.fromChat(body.usage) : undefined
  return Answer.message(content, stopReason(choice?.finish_reason) ?? "stop", usage)
}

const decoder = (answer: Answer.Answer) => {
  // Calls are told apart by `index`; a new index opens the next call.
  let call: unknown
  return (chunk: any): unknown => {
    if (chunk?.error !== undefined) return chunk.error
    if (Canonical.isObject(chunk?.usage)) answer.tokens = TokenUsage.fromChat(chunk.usage)
    const choice = Array.isArray(chunk?.choices) ? chunk.choices[0] : undefined
    if (choice === undefined) return
    const delta = choice.delta ?? {}
    const reasoning = reasoningOf(delta)
    if (typeof reasoning === "string" && reasoning !== "") answer.thinking(reasoning)
    if (typeof delta.content === "string" && delta.content !== "") answer.text(delta.content)
    if (Array.isArray(delta.tool_calls)) {
      for (const part of delta.tool_calls) {
        const index = part?.index ?? 0
        if (index !== call) {
          call = index
          answer.toolCall(String(part?.id ?? ""), String(part?.function?.name ?? ""))
        }
        const args = part?.function?.arguments
        if (typeof args === "string") answer.arguments(args)
      }
    }
    const reason = stopReason(choice.finish_reason)
    if (reason !== undefined) answer.stop(reason)
  }
}

export const upstream: UpstreamCodec = {
  api: "openai-completions",
  path: "/chat/completions",
  anthropic: false,
  headers: {},
  encode,
  decode,
  decoder
}
