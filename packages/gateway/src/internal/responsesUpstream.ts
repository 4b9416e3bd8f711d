/**
 * A canonical request for a responses upstream (`POST /responses`, stateless:
 * `store: false`), and its answer — a response object or the `response.*`
 * event stream — back into the canonical form. A reasoning item keeps its
 * whole JSON (encrypted content included) as the block's signature, which is
 * what this upstream takes back; reasoning of any other origin is dropped
 * from history, never turned into text.
 */
import type { Catalog } from "@agent-runtime/models"
import * as Canonical from "../Canonical.ts"
import * as Answer from "./answer.ts"
import type { UpstreamCodec } from "./codec.ts"
import * as TokenUsage from "./tokenUsage.ts"

/** A reasoning item this upstream gave us earlier, if the signature is one. */
const reasoningItem = (signature: string | undefined): unknown => {
  if (signature === undefined || !signature.startsWith("{")) return undefined
  try {
    const item = JSON.parse(signature)
    return item?.type === "reasoning" ? item : undefined
  } catch {
    return undefined
  }
}

const userContent = (content: string | ReadonlyArray<Canonical.UserContent>) =>
  typeof content === "string"
    ? content
    : content.map((part) =>
      part.type === "text"
        ? { type: "input_text", text: part.text }
        : { type: "input_image", detail: "auto", image_url: `data:${part.mimeType};base64,${part.data}` }
    )

const inputOf = (messages: ReadonlyArray<Canonical.Message>) => {
  const out: Array<unknown> = []
  for (const message of messages) {
    if (message.role === "user") out.push({ role: "user", content: userContent(message.content) })
    else if (message.role === "toolResult") {
      out.push({
        type: "function_call_output",
        call_id: Canonical.toolId(message.toolCallId),
        output: message.content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("")
      })
    } else if (message.role === "assistant") {
      for (const block of message.content) {
        if (block.type === "thinking") {
          const item = reasoningItem(block.thinkingSignature)
          if (item !== undefined) out.push(item)
        } else if (block.type === "text") {
          if (block.text !== "") out.push({ role: "assistant", content: block.text })
        } else {
          out.push({
            type: "function_call",
            call_id: Canonical.toolId(block.id),
            name: block.name,
            arguments: JSON.stringify(block.arguments)
          })
        }
      }
    }
  }
  return out
}

const encode = (request: Canonical.Request, model: Catalog.CatalogModel): Canonical.Json => {
  const body: Record<string, unknown> = { model: model.id, input: inputOf(request.context.messages), store: false }
  if (request.context.systemPrompt !== undefined) body.instructions = request.context.systemPrompt
  if (request.stream) body.stream = true
  if (request.maxTokens !== undefined) body.max_output_tokens = request.maxTokens
  if (request.temperature !== undefined) body.temperature = request.temperature
  if (request.topP !== undefined) body.top_p = request.topP
  if (request.reasoning !== undefined && model.reasoning) {
    body.reasoning = { effort: request.reasoning, summary: "auto" }
    // Without stored state, the encrypted reasoning is what lets a later turn carry it back.
    body.include = ["reasoning.encrypted_content"]
  }
  const tools = request.context.tools
  if (tools !== undefined && tools.length > 0) {
    body.tools = tools.map((tool) => ({
      type: "function",
      name: tool.name,
      description: tool.description,
      parameters: tool.parameters,
      strict: false
    }))
    if (request.parallelToolCalls !== undefined) body.parallel_tool_calls = request.parallelToolCalls
  }
  const choice = request.toolChoice
  if (choice !== undefined) {
    body.tool_choice = choice.type === "tool"
      ? { type: "function", name: choice.name }
      : choice.type
  }
  return body
}

const summaryOf = (item: any) =>
  (Array.isArray(item?.summary) ? item.summary : []).map((part: any) => String(part?.text ?? "")).join("\n\n")

const decode = (body: any): Canonical.AssistantMessage => {
  const content = (Array.isArray(body?.output) ? body.output : []).flatMap((item: any): Array<Canonical.Content> => {
    switch (item?.type) {
      case "reasoning":
        return [{ type: "thinking", thinking: summaryOf(item), thinkingSignature: JSON.stringify(item) }]
      case "message": {
        const parts = Array.isArray(item.content) ? item.content : []
        const text = parts.map((part: any) => String(part?.text ?? part?.refusal ?? "")).join("")
        return [{ type: "text", text }]
      }
      case "function_call":
        return [{
          type: "toolCall",
          id: String(item.call_id),
          name: String(item.name),
          arguments: Canonical.parseArguments(item.arguments)
        }]
      default:
        return []
    }
  })
  const stop = body?.status === "incomplete"
    ? "length"
    : content.some((block: Canonical.Content) => block.type === "toolCall")
    ? "toolUse"
    : "stop"
  const usage = Canonical.isObject(body?.usage) ? TokenUsage.fromResponses(body.usage) : undefined
  return Answer.message(content, stop, usage)
}

const decoder = (answer: Answer.Answer) => (event: any): unknown => {
  switch (event?.type) {
    case "response.output_item.added": {
      const item = event.item
      if (item?.type === "reasoning") answer.thinking("")
      else if (item?.type === "message") answer.text("")
      else if (item?.type === "function_call") answer.toolCall(String(item.call_id), String(item.name))
      return
    }
    case "response.reasoning_summary_part.added":
      // Summary parts of one item read as paragraphs.
      if (event.summary_index > 0) answer.thinking("\n\n")
      return
    case "response.reasoning_summary_text.delta":
    case "response.reasoning_text.delta":
      return answer.thinking(String(event.delta))
    case "response.output_text.delta":
    case "response.refusal.delta":
      return answer.text(String(event.delta))
    case "response.function_call_arguments.delta":
      return answer.arguments(String(event.delta))
    case "response.output_item.done": {
      const item = event.item
      if (item?.type === "reasoning") answer.signature(JSON.stringify(item))
      else if (item?.type === "function_call" && !answer.hasArguments) answer.arguments(String(item.arguments ?? ""))
      return answer.end()
    }
    case "response.completed":
    case "response.incomplete": {
      const response = event.response
      if (Canonical.isObject(response?.usage)) answer.tokens = TokenUsage.fromResponses(response.usage)
      if (event.type === "response.incomplete") answer.stop("length")
      return
    }
    case "response.failed":
      return event.response?.error ?? event
    case "error":
      return event
  }
}

export const upstream: UpstreamCodec = {
  api: "openai-responses",
  path: "/responses",
  anthropic: false,
  headers: {},
  encode,
  decode,
  decoder
}
