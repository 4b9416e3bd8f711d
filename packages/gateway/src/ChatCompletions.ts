/**
 * The chat completions protocol (`POST /v1/chat/completions`): requests
 * into the canonical form, answers and `chat.completion.chunk` streams out,
 * the `{error: {message, type, param, code}}` body the OpenAI SDK reads.
 */
import type { ModelClient } from "@agent-runtime/models"
import * as Canonical from "./Canonical.ts"
import { type GatewayError, invalid } from "./GatewayError.ts"
import type { Codec, StreamEncoder } from "./internal/codec.ts"
import * as Sse from "./internal/sse.ts"
import * as TokenUsage from "./internal/tokenUsage.ts"

const { isObject } = Canonical

const userContent = (content: unknown, param: string): string | Array<Canonical.UserContent> => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return invalid("content must be a string or an array of parts", param)
  return content.map((part, i): Canonical.UserContent => {
    if (!isObject(part)) return invalid("a content part must be an object", `${param}.${i}`)
    if (part.type === "text") return { type: "text", text: String(part.text ?? "") }
    if (part.type === "image_url") {
      const url = isObject(part.image_url) ? part.image_url.url : part.image_url
      return Canonical.imageFromDataUrl(String(url), `${param}.${i}.image_url`)
    }
    return invalid(`content part type ${JSON.stringify(part.type)} cannot be translated`, `${param}.${i}.type`)
  })
}

const decodeMessages = (messages: ReadonlyArray<unknown>) => {
  const system: Array<string> = []
  const out: Array<Canonical.Message> = []
  const toolNames = new Map<string, string>()
  messages.forEach((message, i) => {
    const param = `messages.${i}`
    if (!isObject(message)) return invalid("a message must be an object", param)
    switch (message.role) {
      case "system":
      case "developer":
        return void system.push(Canonical.textOf(message.content))
      case "user":
        return void out.push({ role: "user", content: userContent(message.content, `${param}.content`), timestamp: 0 })
      case "assistant": {
        const content: Array<Canonical.Content> = []
        const reasoning = message.reasoning_content ?? message.reasoning
        if (typeof reasoning === "string" && reasoning !== "") content.push({ type: "thinking", thinking: reasoning })
        const text = Canonical.textOf(message.content)
        if (text !== "") content.push({ type: "text", text })
        if (Array.isArray(message.tool_calls)) {
          for (const call of message.tool_calls) {
            if (!isObject(call) || !isObject(call.function)) continue
            const id = String(call.id ?? "")
            const name = String(call.function.name ?? "")
            toolNames.set(id, name)
            content.push({ type: "toolCall", id, name, arguments: Canonical.parseArguments(call.function.arguments) })
          }
        }
        return void out.push(Canonical.historyMessage(content))
      }
      case "tool": {
        const id = String(message.tool_call_id ?? "")
        return void out.push(
          Canonical.toolResult(toolNames, id, [{ type: "text", text: Canonical.textOf(message.content) }])
        )
      }
      default:
        return invalid(`unknown role ${JSON.stringify(message.role)}`, `${param}.role`)
    }
  })
  return { system, messages: out }
}

const decodeTools = (tools: unknown): Array<ModelClient.Tool> | undefined => {
  if (tools === undefined || tools === null) return undefined
  if (!Array.isArray(tools)) return invalid("tools must be an array", "tools")
  return tools.map((tool, i) => {
    if (!isObject(tool) || !isObject(tool.function)) {
      return invalid("a tool must be {type: function, function}", `tools.${i}`)
    }
    return {
      name: String(tool.function.name),
      description: String(tool.function.description ?? ""),
      parameters: (tool.function.parameters ?? { type: "object", properties: {} }) as ModelClient.Tool["parameters"]
    }
  })
}

const decodeToolChoice = (choice: unknown): Canonical.ToolChoice | undefined => {
  if (choice === undefined || choice === null) return undefined
  if (choice === "auto" || choice === "none" || choice === "required") return { type: choice }
  if (isObject(choice) && isObject(choice.function) && typeof choice.function.name === "string") {
    return { type: "tool", name: choice.function.name }
  }
  return invalid("tool_choice must be auto, none, required or {type: function, function: {name}}", "tool_choice")
}

const decode = (body: Canonical.Json): Canonical.Request => {
  if (!Array.isArray(body.messages)) return invalid("messages must be an array", "messages")
  const { messages, system } = decodeMessages(body.messages)
  const tools = decodeTools(body.tools)
  const stop = typeof body.stop === "string"
    ? [body.stop]
    : Array.isArray(body.stop)
    ? body.stop.map(String)
    : undefined
  const maxTokens = body.max_completion_tokens ?? body.max_tokens
  return {
    protocol: "chat",
    model: body.model as string,
    stream: body.stream === true,
    context: {
      ...(system.length === 0 ? {} : { systemPrompt: system.join("\n\n") }),
      messages,
      ...(tools === undefined ? {} : { tools })
    },
    maxTokens: typeof maxTokens === "number" ? maxTokens : undefined,
    temperature: typeof body.temperature === "number" ? body.temperature : undefined,
    topP: typeof body.top_p === "number" ? body.top_p : undefined,
    stop,
    reasoning: Canonical.effortLevel(body.reasoning_effort, "reasoning_effort"),
    toolChoice: decodeToolChoice(body.tool_choice),
    parallelToolCalls: typeof body.parallel_tool_calls === "boolean" ? body.parallel_tool_calls : undefined,
    includeUsage: isObject(body.stream_options) && body.stream_options.include_usage === true
  }
}

const finishReason = (reason: Canonical.StopReason) =>
  reason === "length" ? "length" : reason === "toolUse" ? "tool_calls" : "stop"

const usageOf = (usage: Canonical.Usage) => ({
  prompt_tokens: usage.input + usage.cacheRead + usage.cacheWrite,
  completion_tokens: usage.output,
  total_tokens: usage.input + usage.cacheRead + usage.cacheWrite + usage.output,
  prompt_tokens_details: { cached_tokens: usage.cacheRead },
  completion_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 }
})

const encode = (message: Canonical.AssistantMessage, request: Canonical.Request) => {
  const text = message.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")
  const reasoning = message.content.flatMap((block) => (block.type === "thinking" ? [block.thinking] : [])).join("")
  const calls = message.content.filter((block): block is Canonical.ToolCall => block.type === "toolCall")
  return {
    id: Canonical.makeId("chatcmpl-"),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: request.model,
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: text === "" && calls.length > 0 ? null : text,
        refusal: null,
        ...(reasoning === "" ? {} : { reasoning_content: reasoning }),
        ...(calls.length === 0 ? {} : {
          tool_calls: calls.map((call) => ({
            id: call.id,
            type: "function",
            function: { name: call.name, arguments: JSON.stringify(call.arguments) }
          }))
        })
      },
      logprobs: null,
      finish_reason: finishReason(message.stopReason)
    }],
    usage: usageOf(message.usage)
  }
}

/**
 * Chunks as OpenAI sends them: a role chunk, deltas, a chunk with the finish
 * reason, the usage chunk (empty `choices`) when asked for, then `[DONE]`.
 * Each tool call keeps its own `index`, and one whose arguments never
 * streamed gets them whole at its end, so no client sees empty arguments.
 */
const encoder = (request: Canonical.Request): StreamEncoder => {
  const base = {
    id: Canonical.makeId("chatcmpl-"),
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: request.model
  }
  const noUsage = request.includeUsage ? { usage: null } : {}
  const chunk = (delta: object, finish: string | null = null) =>
    Sse.frame({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...noUsage })
  const toolIndex = new Map<number, { index: number; streamed: boolean }>()
  return {
    event: (event) => {
      switch (event.type) {
        case "start":
          return chunk({ role: "assistant", content: "", refusal: null })
        case "text_delta":
          return event.delta === "" ? "" : chunk({ content: event.delta })
        case "thinking_delta":
          return event.delta === "" ? "" : chunk({ reasoning_content: event.delta })
        case "toolcall_start": {
          const call = event.partial.content[event.contentIndex] as Canonical.ToolCall
          const index = toolIndex.size
          toolIndex.set(event.contentIndex, { index, streamed: false })
          return chunk({
            tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }]
          })
        }
        case "toolcall_delta": {
          const slot = toolIndex.get(event.contentIndex)
          if (slot === undefined || event.delta === "") return ""
          slot.streamed = true
          return chunk({ tool_calls: [{ index: slot.index, function: { arguments: event.delta } }] })
        }
        case "toolcall_end": {
          const slot = toolIndex.get(event.contentIndex)
          if (slot === undefined || slot.streamed) return ""
          return chunk({
            tool_calls: [{ index: slot.index, function: { arguments: JSON.stringify(event.toolCall.arguments) } }]
          })
        }
        case "done": {
          let out = chunk({}, finishReason(event.message.stopReason))
          if (request.includeUsage) out += Sse.frame({ ...base, choices: [], usage: usageOf(event.message.usage) })
          return out + "data: [DONE]\n\n"
        }
        default:
          return ""
      }
    }
  }
}

const errorType = (status: number) =>
  status === 401
    ? "authentication_error"
    : status === 403
    ? "permission_error"
    : status === 404
    ? "not_found_error"
    : status === 429
    ? "rate_limit_error"
    : status >= 500
    ? "server_error"
    : "invalid_request_error"

/** Also the responses protocol's error body: the same SDK reads both. */
export const errorBody = (error: GatewayError) => ({
  error: { message: error.message, type: errorType(error.status), param: error.param ?? null, code: error.code }
})

/** Reads the usage chunk; drops it when the gateway, not the client, asked for it. */
const usageTap = (request: Canonical.Json) => {
  const forward = isObject(request.stream_options) && request.stream_options.include_usage === true
  let usage: TokenUsage.TokenUsage | undefined
  return {
    frame: (raw: string) => {
      if (!raw.includes('"usage":{')) return true
      const data = Sse.dataOf(raw)
      if (data === undefined) return true
      const chunk = JSON.parse(data)
      if (!isObject(chunk.usage)) return true
      usage = TokenUsage.fromChat(chunk.usage)
      return forward || (Array.isArray(chunk.choices) && chunk.choices.length > 0)
    },
    usage: () => usage
  }
}

export const codec: Codec = {
  protocol: "chat",
  upstreamPath: "/chat/completions",
  decode,
  encode,
  encoder,
  errorBody,
  streamError: (error) => Sse.frame(errorBody(error)),
  usageOfBody: (body) => (isObject(body) && isObject(body.usage) ? TokenUsage.fromChat(body.usage) : undefined),
  usageTap
}
