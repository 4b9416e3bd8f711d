/**
 * The messages protocol (`POST /v1/messages`): requests into the canonical
 * form, message objects and the `message_start` ... `message_stop` event
 * stream out, and the `{type: "error", error: {type, message}}` body the
 * Anthropic SDK reads (our code rides in `error.code`).
 */
import type { ModelClient } from "@agent-runtime/models"
import * as Canonical from "./Canonical.ts"
import { type GatewayError, invalid } from "./GatewayError.ts"
import type { Codec, StreamEncoder } from "./internal/codec.ts"
import * as Sse from "./internal/sse.ts"
import * as TokenUsage from "./internal/tokenUsage.ts"

const { isObject } = Canonical

const image = (block: Canonical.Json, param: string): Canonical.UserContent => {
  const source = isObject(block.source) ? block.source : {}
  if (source.type !== "base64") return invalid("only base64 image sources can be translated", `${param}.source`)
  return { type: "image", mimeType: String(source.media_type), data: String(source.data) }
}

const resultContent = (content: unknown, param: string): Array<Canonical.UserContent> => {
  if (typeof content === "string") return [{ type: "text", text: content }]
  if (!Array.isArray(content)) return []
  return content.flatMap((block, i): Array<Canonical.UserContent> =>
    !isObject(block)
      ? []
      : block.type === "text"
      ? [{ type: "text", text: String(block.text ?? "") }]
      : block.type === "image"
      ? [image(block, `${param}.${i}`)]
      : []
  )
}

const decodeMessages = (messages: ReadonlyArray<unknown>) => {
  const out: Array<Canonical.Message> = []
  const toolNames = new Map<string, string>()
  messages.forEach((message, i) => {
    const param = `messages.${i}`
    if (!isObject(message)) return invalid("a message must be an object", param)
    const blocks: ReadonlyArray<unknown> = typeof message.content === "string"
      ? [{ type: "text", text: message.content }]
      : Array.isArray(message.content)
      ? message.content
      : invalid("content must be a string or an array of blocks", `${param}.content`)
    if (message.role === "assistant") {
      const content: Array<Canonical.Content> = []
      blocks.forEach((block, j) => {
        if (!isObject(block)) return
        if (block.type === "text") content.push({ type: "text", text: String(block.text ?? "") })
        else if (block.type === "thinking") {
          content.push({
            type: "thinking",
            thinking: String(block.thinking ?? ""),
            ...(typeof block.signature === "string" && block.signature !== ""
              ? { thinkingSignature: block.signature }
              : {})
          })
        } else if (block.type === "redacted_thinking") {
          content.push({ type: "thinking", thinking: "", thinkingSignature: String(block.data ?? ""), redacted: true })
        } else if (block.type === "tool_use") {
          const id = String(block.id ?? "")
          toolNames.set(id, String(block.name ?? ""))
          content.push({
            type: "toolCall",
            id,
            name: String(block.name ?? ""),
            arguments: Canonical.parseArguments(block.input)
          })
        } else invalid(`block type ${JSON.stringify(block.type)} cannot be translated`, `${param}.content.${j}.type`)
      })
      return void out.push(Canonical.historyMessage(content))
    }
    if (message.role !== "user") return invalid(`unknown role ${JSON.stringify(message.role)}`, `${param}.role`)
    // Tool results become their own messages, ahead of what else the user turn says.
    const parts: Array<Canonical.UserContent> = []
    blocks.forEach((block, j) => {
      const at = `${param}.content.${j}`
      if (!isObject(block)) return
      if (block.type === "tool_result") {
        const id = String(block.tool_use_id ?? "")
        out.push(
          Canonical.toolResult(toolNames, id, resultContent(block.content, `${at}.content`), block.is_error === true)
        )
      } else if (block.type === "text") parts.push({ type: "text", text: String(block.text ?? "") })
      else if (block.type === "image") parts.push(image(block, at))
      else invalid(`block type ${JSON.stringify(block.type)} cannot be translated`, `${at}.type`)
    })
    if (parts.length > 0) out.push({ role: "user", content: parts, timestamp: 0 })
  })
  return out
}

const decodeTools = (tools: unknown): Array<ModelClient.Tool> | undefined => {
  if (tools === undefined || tools === null) return undefined
  if (!Array.isArray(tools)) return invalid("tools must be an array", "tools")
  return tools.map((tool, i) => {
    if (!isObject(tool) || (tool.type !== undefined && tool.type !== "custom") || !isObject(tool.input_schema)) {
      return invalid("only custom tools with an input_schema can be translated", `tools.${i}`)
    }
    return {
      name: String(tool.name),
      description: String(tool.description ?? ""),
      parameters: tool.input_schema as ModelClient.Tool["parameters"]
    }
  })
}

const decodeToolChoice = (choice: unknown): Canonical.ToolChoice | undefined => {
  if (choice === undefined || choice === null) return undefined
  if (!isObject(choice)) return invalid("tool_choice must be an object", "tool_choice")
  switch (choice.type) {
    case "auto":
    case "none":
      return { type: choice.type }
    case "any":
      return { type: "required" }
    case "tool":
      return { type: "tool", name: String(choice.name) }
    default:
      return invalid("tool_choice.type must be auto, any, tool or none", "tool_choice.type")
  }
}

/** Checks what the messages API itself requires (the SDK's own types say the same). */
export const validate = (body: Canonical.Json) => {
  if (typeof body.max_tokens !== "number") invalid("max_tokens: Field required", "max_tokens")
  if (!Array.isArray(body.messages)) invalid("messages: Field required", "messages")
}

const decode = (body: Canonical.Json): Canonical.Request => {
  const messages = decodeMessages(body.messages as ReadonlyArray<unknown>)
  const tools = decodeTools(body.tools)
  const system = Canonical.textOf(body.system)
  const thinking = isObject(body.thinking) ? body.thinking : undefined
  const budget = thinking?.type === "enabled" && typeof thinking.budget_tokens === "number"
    ? thinking.budget_tokens
    : undefined
  const choice = isObject(body.tool_choice) ? body.tool_choice : undefined
  return {
    protocol: "messages",
    model: body.model as string,
    stream: body.stream === true,
    context: {
      ...(system === "" ? {} : { systemPrompt: system }),
      messages,
      ...(tools === undefined ? {} : { tools })
    },
    maxTokens: body.max_tokens as number,
    temperature: typeof body.temperature === "number" ? body.temperature : undefined,
    topP: typeof body.top_p === "number" ? body.top_p : undefined,
    stop: Array.isArray(body.stop_sequences) ? body.stop_sequences.map(String) : undefined,
    reasoning: budget !== undefined
      ? Canonical.levelOfBudget(budget)
      : thinking?.type === "adaptive"
      ? "medium"
      : undefined,
    thinkingBudget: budget,
    toolChoice: decodeToolChoice(body.tool_choice),
    parallelToolCalls: choice?.disable_parallel_tool_use === true ? false : undefined,
    includeUsage: false
  }
}

const stopReason = (reason: Canonical.StopReason) =>
  reason === "length" ? "max_tokens" : reason === "toolUse" ? "tool_use" : "end_turn"

const usageOf = (usage: Canonical.Usage) => ({
  input_tokens: usage.input,
  cache_creation_input_tokens: usage.cacheWrite,
  cache_read_input_tokens: usage.cacheRead,
  output_tokens: usage.output
})

const block = (content: Canonical.Content) => {
  switch (content.type) {
    case "thinking":
      return content.redacted
        ? { type: "redacted_thinking", data: content.thinkingSignature ?? "" }
        : { type: "thinking", thinking: content.thinking, signature: content.thinkingSignature ?? "" }
    case "text":
      return { type: "text", text: content.text }
    case "toolCall":
      return { type: "tool_use", id: content.id, name: content.name, input: content.arguments }
  }
}

const encode = (message: Canonical.AssistantMessage, request: Canonical.Request) => ({
  id: Canonical.makeId("msg_"),
  type: "message",
  role: "assistant",
  model: request.model,
  content: message.content.map(block),
  stop_reason: stopReason(message.stopReason),
  stop_sequence: null,
  usage: usageOf(message.usage)
})

/** The messages event grammar; usage comes whole in `message_delta`, which the SDK takes over `message_start`'s. */
const encoder = (request: Canonical.Request): StreamEncoder => {
  const indexOf = new Map<number, number>()
  const event = (type: string, fields: object) => Sse.frame({ type, ...fields }, type)
  const start = (contentIndex: number, content_block: object) => {
    const index = indexOf.size
    indexOf.set(contentIndex, index)
    return event("content_block_start", { index, content_block }) + (index === 0 ? event("ping", {}) : "")
  }
  const delta = (contentIndex: number, delta: object) =>
    event("content_block_delta", { index: indexOf.get(contentIndex), delta })
  const stop = (contentIndex: number) => event("content_block_stop", { index: indexOf.get(contentIndex) })
  const streamed = new Set<number>()
  return {
    event: (e) => {
      switch (e.type) {
        case "start":
          return event("message_start", {
            message: {
              id: Canonical.makeId("msg_"),
              type: "message",
              role: "assistant",
              model: request.model,
              content: [],
              stop_reason: null,
              stop_sequence: null,
              usage: usageOf(e.partial.usage)
            }
          })
        case "text_start":
          return start(e.contentIndex, { type: "text", text: "" })
        case "text_delta":
          return e.delta === "" ? "" : delta(e.contentIndex, { type: "text_delta", text: e.delta })
        case "text_end":
          return stop(e.contentIndex)
        case "thinking_start":
          return start(e.contentIndex, { type: "thinking", thinking: "", signature: "" })
        case "thinking_delta":
          return e.delta === "" ? "" : delta(e.contentIndex, { type: "thinking_delta", thinking: e.delta })
        case "thinking_end": {
          const content = e.partial.content[e.contentIndex]
          const signature = content?.type === "thinking" ? content.thinkingSignature ?? "" : ""
          return (signature === "" ? "" : delta(e.contentIndex, { type: "signature_delta", signature })) +
            stop(e.contentIndex)
        }
        case "toolcall_start": {
          const call = e.partial.content[e.contentIndex] as Canonical.ToolCall
          return start(e.contentIndex, { type: "tool_use", id: call.id, name: call.name, input: {} })
        }
        case "toolcall_delta":
          if (e.delta === "") return ""
          streamed.add(e.contentIndex)
          return delta(e.contentIndex, { type: "input_json_delta", partial_json: e.delta })
        case "toolcall_end":
          return (streamed.has(e.contentIndex)
            ? ""
            : delta(e.contentIndex, { type: "input_json_delta", partial_json: JSON.stringify(e.toolCall.arguments) })) +
            stop(e.contentIndex)
        case "done":
          return event("message_delta", {
            delta: { stop_reason: stopReason(e.message.stopReason), stop_sequence: null },
            usage: usageOf(e.message.usage)
          }) + event("message_stop", {})
        default:
          return ""
      }
    }
  }
}

const errorType = (error: GatewayError) =>
  error.status === 401
    ? "authentication_error"
    : error.status === 403
    ? "permission_error"
    : error.status === 404
    ? "not_found_error"
    : error.status === 413
    ? "request_too_large"
    : error.status === 429
    ? "rate_limit_error"
    : error.status === 503 || error.status === 529
    ? "overloaded_error"
    : error.status >= 500
    ? "api_error"
    : "invalid_request_error"

const errorBody = (error: GatewayError) => ({
  type: "error",
  error: { type: errorType(error), message: error.message, code: error.code }
})

const usageTap = () => {
  let usage: TokenUsage.TokenUsage | undefined
  return {
    frame: (raw: string) => {
      if (raw.includes('"usage":{')) {
        const data = Sse.dataOf(raw)
        if (data !== undefined) {
          const event = JSON.parse(data)
          const found = event.type === "message_start" ? event.message?.usage : event.usage
          if (isObject(found)) usage = TokenUsage.fromMessages(found, usage)
        }
      }
      return true
    },
    usage: () => usage
  }
}

export const codec: Codec = {
  protocol: "messages",
  upstreamPath: "/v1/messages",
  decode,
  encode,
  encoder,
  errorBody,
  streamError: (error) => Sse.frame(errorBody(error), "error"),
  usageOfBody: (body) => (isObject(body) && isObject(body.usage) ? TokenUsage.fromMessages(body.usage) : undefined),
  usageTap
}
