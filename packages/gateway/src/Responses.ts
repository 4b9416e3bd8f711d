/**
 * The responses protocol (`POST /v1/responses`): `input` (a string or
 * items) into the canonical form, response objects and the `response.*`
 * event stream out, the OpenAI error body. The gateway keeps no state, so
 * `previous_response_id` cannot be served across protocols.
 */
import type { ModelClient } from "@agent-runtime/models"
import * as Canonical from "./Canonical.ts"
import { errorBody } from "./ChatCompletions.ts"
import { invalid } from "./GatewayError.ts"
import type { Codec, StreamEncoder } from "./internal/codec.ts"
import * as Sse from "./internal/sse.ts"
import * as TokenUsage from "./internal/tokenUsage.ts"

const { isObject } = Canonical

const userParts = (content: unknown, param: string): string | Array<Canonical.UserContent> => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return invalid("content must be a string or an array of parts", param)
  return content.map((part, i): Canonical.UserContent => {
    if (!isObject(part)) return invalid("a content part must be an object", `${param}.${i}`)
    if (part.type === "input_text" || part.type === "output_text" || part.type === "text") {
      return { type: "text", text: String(part.text ?? "") }
    }
    if (part.type === "input_image") {
      return Canonical.imageFromDataUrl(String(part.image_url), `${param}.${i}.image_url`)
    }
    return invalid(`content part type ${JSON.stringify(part.type)} cannot be translated`, `${param}.${i}.type`)
  })
}

const decodeInput = (input: unknown, system: Array<string>) => {
  if (typeof input === "string") return [{ role: "user", content: input, timestamp: 0 } satisfies Canonical.Message]
  if (!Array.isArray(input)) return invalid("input must be a string or an array of items", "input")
  const out: Array<Canonical.Message> = []
  const toolNames = new Map<string, string>()
  // Reasoning, messages and function calls of one assistant turn arrive as separate items.
  let assistant: Array<Canonical.Content> | undefined
  const assistantTurn = () => {
    if (assistant === undefined) {
      assistant = []
      out.push(Canonical.historyMessage(assistant))
    }
    return assistant
  }
  input.forEach((item, i) => {
    const param = `input.${i}`
    if (!isObject(item)) return invalid("an input item must be an object", param)
    const type = item.type ?? "message"
    if (type === "message") {
      if (item.role === "assistant") {
        const text = Canonical.textOf(item.content)
        if (text !== "") assistantTurn().push({ type: "text", text })
        return
      }
      assistant = undefined
      if (item.role === "system" || item.role === "developer") return void system.push(Canonical.textOf(item.content))
      if (item.role === "user") {
        return void out.push({ role: "user", content: userParts(item.content, `${param}.content`), timestamp: 0 })
      }
      return invalid(`unknown role ${JSON.stringify(item.role)}`, `${param}.role`)
    }
    if (type === "reasoning") {
      const thinking = Canonical.textOf(item.summary)
      const signature = typeof item.encrypted_content === "string" ? item.encrypted_content : undefined
      if (thinking !== "" || signature !== undefined) {
        assistantTurn().push({
          type: "thinking",
          thinking,
          ...(signature === undefined ? {} : { thinkingSignature: signature })
        })
      }
      return
    }
    if (type === "function_call") {
      const id = String(item.call_id ?? "")
      toolNames.set(id, String(item.name ?? ""))
      return void assistantTurn().push({
        type: "toolCall",
        id,
        name: String(item.name ?? ""),
        arguments: Canonical.parseArguments(item.arguments)
      })
    }
    if (type === "function_call_output") {
      assistant = undefined
      const id = String(item.call_id ?? "")
      return void out.push(Canonical.toolResult(toolNames, id, [{ type: "text", text: Canonical.textOf(item.output) }]))
    }
    return invalid(`input item type ${JSON.stringify(type)} cannot be translated`, `${param}.type`)
  })
  return out
}

const decodeTools = (tools: unknown): Array<ModelClient.Tool> | undefined => {
  if (tools === undefined || tools === null) return undefined
  if (!Array.isArray(tools)) return invalid("tools must be an array", "tools")
  return tools.map((tool, i) => {
    if (!isObject(tool) || tool.type !== "function") {
      return invalid("only function tools can be translated", `tools.${i}`)
    }
    return {
      name: String(tool.name),
      description: String(tool.description ?? ""),
      parameters: (tool.parameters ?? { type: "object", properties: {} }) as ModelClient.Tool["parameters"]
    }
  })
}

const decodeToolChoice = (choice: unknown): Canonical.ToolChoice | undefined => {
  if (choice === undefined || choice === null) return undefined
  if (choice === "auto" || choice === "none" || choice === "required") return { type: choice }
  if (isObject(choice) && choice.type === "function" && typeof choice.name === "string") {
    return { type: "tool", name: choice.name }
  }
  return invalid("tool_choice must be auto, none, required or {type: function, name}", "tool_choice")
}

const decode = (body: Canonical.Json): Canonical.Request => {
  if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
    return invalid("previous_response_id needs a responses upstream; send the whole input", "previous_response_id")
  }
  const system: Array<string> = []
  if (typeof body.instructions === "string") system.push(body.instructions)
  const messages = decodeInput(body.input, system)
  const tools = decodeTools(body.tools)
  return {
    protocol: "responses",
    model: body.model as string,
    stream: body.stream === true,
    context: {
      ...(system.length === 0 ? {} : { systemPrompt: system.join("\n\n") }),
      messages,
      ...(tools === undefined ? {} : { tools })
    },
    maxTokens: typeof body.max_output_tokens === "number" ? body.max_output_tokens : undefined,
    temperature: typeof body.temperature === "number" ? body.temperature : undefined,
    topP: typeof body.top_p === "number" ? body.top_p : undefined,
    reasoning: Canonical.effortLevel(isObject(body.reasoning) ? body.reasoning.effort : undefined, "reasoning.effort"),
    toolChoice: decodeToolChoice(body.tool_choice),
    parallelToolCalls: typeof body.parallel_tool_calls === "boolean" ? body.parallel_tool_calls : undefined,
    includeUsage: false
  }
}

const usageOf = (usage: Canonical.Usage) => ({
  input_tokens: usage.input + usage.cacheRead + usage.cacheWrite,
  input_tokens_details: { cached_tokens: usage.cacheRead },
  output_tokens: usage.output,
  output_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 },
  total_tokens: usage.input + usage.cacheRead + usage.cacheWrite + usage.output
})

/** One output item per content block, in order; a thinking signature rides in `encrypted_content`. */
const outputItem = (block: Canonical.Content, id: string, status: string) => {
  switch (block.type) {
    case "thinking":
      return {
        id,
        type: "reasoning",
        summary: block.thinking === "" ? [] : [{ type: "summary_text", text: block.thinking }],
        ...(block.thinkingSignature ? { encrypted_content: block.thinkingSignature } : {})
      }
    case "text":
      return {
        id,
        type: "message",
        status,
        role: "assistant",
        content: [{ type: "output_text", annotations: [], logprobs: [], text: block.text }]
      }
    case "toolCall":
      return {
        id,
        type: "function_call",
        status: "completed",
        arguments: JSON.stringify(block.arguments),
        call_id: block.id,
        name: block.name
      }
  }
}

const itemPrefix = { thinking: "rs_", text: "msg_", toolCall: "fc_" } as const

const shell = (request: Canonical.Request, id: string, createdAt: number) => ({
  id,
  object: "response",
  created_at: createdAt,
  error: null,
  instructions: request.context.systemPrompt ?? null,
  max_output_tokens: request.maxTokens ?? null,
  model: request.model,
  parallel_tool_calls: request.parallelToolCalls ?? true,
  previous_response_id: null,
  reasoning: { effort: request.reasoning ?? null, summary: null },
  store: false,
  temperature: request.temperature ?? null,
  text: { format: { type: "text" } },
  tool_choice: request.toolChoice === undefined
    ? "auto"
    : request.toolChoice.type === "tool"
    ? { type: "function", name: request.toolChoice.name }
    : request.toolChoice.type,
  tools: (request.context.tools ?? []).map((tool) => ({
    type: "function",
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters,
    strict: false
  })),
  top_p: request.topP ?? null,
  truncation: "disabled",
  metadata: {}
})

const finished = (
  request: Canonical.Request,
  id: string,
  createdAt: number,
  message: Canonical.AssistantMessage,
  output: Array<unknown>
) => {
  const incomplete = message.stopReason === "length"
  return {
    ...shell(request, id, createdAt),
    status: incomplete ? "incomplete" : "completed",
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    output,
    usage: usageOf(message.usage)
  }
}

const encode = (message: Canonical.AssistantMessage, request: Canonical.Request) => {
  const status = message.stopReason === "length" ? "incomplete" : "completed"
  const output = message.content.map((block) => outputItem(block, Canonical.makeId(itemPrefix[block.type]), status))
  return finished(request, Canonical.makeId("resp_"), Math.floor(Date.now() / 1000), message, output)
}

/** The `response.*` events in the order the OpenAI SDK's stream accumulator expects them. */
const encoder = (request: Canonical.Request): StreamEncoder => {
  const id = Canonical.makeId("resp_")
  const createdAt = Math.floor(Date.now() / 1000)
  let sequence = 0
  const event = (type: string, fields: object) => Sse.frame({ type, ...fields, sequence_number: sequence++ }, type)
  const items = new Map<number, { readonly id: string; readonly outputIndex: number; streamed: boolean }>()
  const output: Array<unknown> = []
  const open = (contentIndex: number, prefix: string) => {
    const item = { id: Canonical.makeId(prefix), outputIndex: items.size, streamed: false }
    items.set(contentIndex, item)
    return item
  }
  return {
    event: (e) => {
      switch (e.type) {
        case "start": {
          const response = {
            ...shell(request, id, createdAt),
            status: "in_progress",
            incomplete_details: null,
            output: [],
            usage: null
          }
          return event("response.created", { response }) + event("response.in_progress", { response })
        }
        case "thinking_start": {
          const item = open(e.contentIndex, "rs_")
          const at = { item_id: item.id, output_index: item.outputIndex, summary_index: 0 }
          return event("response.output_item.added", {
            output_index: item.outputIndex,
            item: { id: item.id, type: "reasoning", summary: [] }
          }) + event("response.reasoning_summary_part.added", { ...at, part: { type: "summary_text", text: "" } })
        }
        case "thinking_delta": {
          const item = items.get(e.contentIndex)!
          return event("response.reasoning_summary_text.delta", {
            item_id: item.id,
            output_index: item.outputIndex,
            summary_index: 0,
            delta: e.delta
          })
        }
        case "thinking_end": {
          const item = items.get(e.contentIndex)!
          const block = e.partial.content[e.contentIndex]!
          const done = outputItem(
            { ...block, type: "thinking", thinking: e.content } as Canonical.Content,
            item.id,
            "completed"
          )
          output[item.outputIndex] = done
          const at = { item_id: item.id, output_index: item.outputIndex, summary_index: 0 }
          return event("response.reasoning_summary_text.done", { ...at, text: e.content }) +
            event("response.reasoning_summary_part.done", { ...at, part: { type: "summary_text", text: e.content } }) +
            event("response.output_item.done", { output_index: item.outputIndex, item: done })
        }
        case "text_start": {
          const item = open(e.contentIndex, "msg_")
          return event("response.output_item.added", {
            output_index: item.outputIndex,
            item: { id: item.id, type: "message", status: "in_progress", role: "assistant", content: [] }
          }) + event("response.content_part.added", {
            item_id: item.id,
            output_index: item.outputIndex,
            content_index: 0,
            part: { type: "output_text", annotations: [], logprobs: [], text: "" }
          })
        }
        case "text_delta": {
          const item = items.get(e.contentIndex)!
          return event("response.output_text.delta", {
            item_id: item.id,
            output_index: item.outputIndex,
            content_index: 0,
            delta: e.delta,
            logprobs: []
          })
        }
        case "text_end": {
          const item = items.get(e.contentIndex)!
          const done = outputItem({ type: "text", text: e.content }, item.id, "completed")
          output[item.outputIndex] = done
          const at = { item_id: item.id, output_index: item.outputIndex, content_index: 0 }
          return event("response.output_text.done", { ...at, text: e.content, logprobs: [] }) +
            event("response.content_part.done", {
              ...at,
              part: { type: "output_text", annotations: [], logprobs: [], text: e.content }
            }) +
            event("response.output_item.done", { output_index: item.outputIndex, item: done })
        }
        case "toolcall_start": {
          const item = open(e.contentIndex, "fc_")
          const call = e.partial.content[e.contentIndex] as Canonical.ToolCall
          return event("response.output_item.added", {
            output_index: item.outputIndex,
            item: {
              id: item.id,
              type: "function_call",
              status: "in_progress",
              arguments: "",
              call_id: call.id,
              name: call.name
            }
          })
        }
        case "toolcall_delta": {
          const item = items.get(e.contentIndex)!
          if (e.delta === "") return ""
          item.streamed = true
          return event("response.function_call_arguments.delta", {
            item_id: item.id,
            output_index: item.outputIndex,
            delta: e.delta
          })
        }
        case "toolcall_end": {
          const item = items.get(e.contentIndex)!
          const done = outputItem(e.toolCall, item.id, "completed") as { arguments: string }
          output[item.outputIndex] = done
          const at = { item_id: item.id, output_index: item.outputIndex }
          // Arguments that never streamed arrive whole, so no client is left with an empty string.
          return (item.streamed
            ? ""
            : event("response.function_call_arguments.delta", { ...at, delta: done.arguments })) +
            event("response.function_call_arguments.done", { ...at, arguments: done.arguments }) +
            event("response.output_item.done", { output_index: item.outputIndex, item: done })
        }
        case "done": {
          const response = finished(request, id, createdAt, e.message, output)
          return event(response.status === "incomplete" ? "response.incomplete" : "response.completed", { response })
        }
        default:
          return ""
      }
    }
  }
}

const usageTap = () => {
  let usage: TokenUsage.TokenUsage | undefined
  return {
    frame: (raw: string) => {
      if (raw.includes('"usage":{')) {
        const data = Sse.dataOf(raw)
        if (data !== undefined) {
          const event = JSON.parse(data)
          if (isObject(event.response) && isObject(event.response.usage)) {
            usage = TokenUsage.fromResponses(event.response.usage)
          }
        }
      }
      return true
    },
    usage: () => usage
  }
}

export const codec: Codec = {
  protocol: "responses",
  upstreamPath: "/responses",
  decode,
  encode,
  encoder,
  errorBody,
  streamError: (error) => {
    const body = errorBody(error).error
    return Sse.frame(
      { type: "error", code: body.code, message: body.message, param: body.param, sequence_number: 0 },
      "error"
    )
  },
  usageOfBody: (body) => (isObject(body) && isObject(body.usage) ? TokenUsage.fromResponses(body.usage) : undefined),
  usageTap
}
