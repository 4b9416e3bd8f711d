/**
 * The one form every inbound protocol decodes into, every upstream codec
 * encodes from, and every translated answer is encoded from. The
 * conversation and the answer are in the model layer's terms (its context:
 * system prompt, messages, tools; its assistant message and stream events),
 * so all protocols meet in one vocabulary; what the context cannot say (tool
 * choice, parallel tool calls, stop sequences, top_p, thinking budgets)
 * rides alongside.
 */
import type { ModelClient } from "@agent-runtime/models"
import { invalid } from "./GatewayError.ts"

/** The three inbound wire protocols, named after their endpoints. */
export type Protocol = "chat" | "responses" | "messages"

/** The model layer's API each protocol speaks upstream: a request in and out of the same one passes through. */
export const nativeApi: Record<Protocol, string> = {
  chat: "openai-completions",
  responses: "openai-responses",
  messages: "anthropic-messages"
}

export type ToolChoice =
  | { readonly type: "auto" }
  | { readonly type: "none" }
  | { readonly type: "required" }
  | { readonly type: "tool"; readonly name: string }

export type AssistantMessage = ModelClient.AssistantMessage
export type Message = ModelClient.Message
export type Content = AssistantMessage["content"][number]
export type ToolCall = Extract<Content, { readonly type: "toolCall" }>
export type Usage = AssistantMessage["usage"]
export type StopReason = AssistantMessage["stopReason"]
export type UserContent = Exclude<Extract<Message, { readonly role: "user" }>["content"], string>[number]

export interface Request {
  readonly protocol: Protocol
  /** As the client named it: `provider/model-id`, a custom provider's model, or `auto`. */
  readonly model: string
  readonly stream: boolean
  readonly context: ModelClient.Context
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
  readonly topP?: number | undefined
  readonly stop?: ReadonlyArray<string> | undefined
  readonly reasoning?: ModelClient.ThinkingLevel | undefined
  /** `thinking.budget_tokens`, kept exact for an upstream that takes a budget. */
  readonly thinkingBudget?: number | undefined
  readonly toolChoice?: ToolChoice | undefined
  readonly parallelToolCalls?: boolean | undefined
  /** Chat completions' `stream_options.include_usage`: the client wants the usage chunk. */
  readonly includeUsage: boolean
}

export type Json = { readonly [key: string]: unknown }

export const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Tool arguments as an object: a string that is not JSON object text becomes `{}` (a model's broken call). */
export const parseArguments = (text: unknown): Record<string, any> => {
  if (isObject(text)) return text as Record<string, any>
  if (typeof text !== "string" || text.trim() === "") return {}
  try {
    const parsed = JSON.parse(text)
    return isObject(parsed) ? parsed as Record<string, any> : {}
  } catch {
    return {}
  }
}

/** `data:<mime>;base64,<data>` as an image block; other URLs cannot be sent to every upstream. */
export const imageFromDataUrl = (url: string, param: string): UserContent => {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url)
  return match === null
    ? invalid("only base64 data: URLs are accepted for images", param)
    : { type: "image", mimeType: match[1]!, data: match[2]! }
}

/** Effort names shared by chat's `reasoning_effort` and responses' `reasoning.effort`. */
export const effortLevel = (effort: unknown, param: string): ModelClient.ThinkingLevel | undefined => {
  switch (effort) {
    case undefined:
    case null:
    case "none":
      return undefined
    case "minimal":
    case "low":
    case "medium":
    case "high":
    case "xhigh":
      return effort
    default:
      return invalid(`unknown reasoning effort ${JSON.stringify(effort)}`, param)
  }
}

/** The level whose default budget is nearest above `budget` (the exact budget is sent where it can be). */
export const levelOfBudget = (budget: number): ModelClient.ThinkingLevel =>
  budget <= 1024 ? "minimal" : budget <= 4096 ? "low" : budget <= 10240 ? "medium" : "high"

/** An assistant message of history (or an answer being built); which model wrote it does not matter upstream. */
export const historyMessage = (content: Array<Content>): AssistantMessage => ({
  role: "assistant",
  content,
  api: "",
  provider: "",
  model: "",
  usage: emptyUsage(),
  stopReason: content.some((block) => block.type === "toolCall") ? "toolUse" : "stop",
  timestamp: 0
})

/** A tool's answer to the call `toolCallId` of history; `toolNames` maps the calls seen so far to their tools. */
export const toolResult = (
  toolNames: ReadonlyMap<string, string>,
  toolCallId: string,
  content: Extract<Message, { readonly role: "toolResult" }>["content"],
  isError = false
): Message => ({
  role: "toolResult",
  toolCallId,
  toolName: toolNames.get(toolCallId) ?? "",
  content,
  isError,
  timestamp: 0
})

export const emptyUsage = (): Usage => ({
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 0,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 }
})

/** Text of a block list (system prompts, tool results given as parts). */
export const textOf = (value: unknown): string =>
  typeof value === "string"
    ? value
    : Array.isArray(value)
    ? value.map((part) => (isObject(part) && typeof part.text === "string" ? part.text : "")).join("")
    : ""

let counter = 0
/** Ids for answers we make up (translated replies): unique per process, cheap. */
export const makeId = (prefix: string) =>
  `${prefix}${Date.now().toString(36)}${(counter++).toString(36).padStart(6, "0")}${
    Math.random().toString(36).slice(2, 10)
  }`

/**
 * A tool call id as every upstream accepts it (Anthropic: letters, digits,
 * `_` and `-`, at most 64). The same id always maps the same way, so a tool
 * result still answers its call.
 */
export const toolId = (id: string): string => {
  const safe = id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 64)
  return safe === "" ? "call_" : safe
}
