/**
 * A canonical request as a model layer call to a target of another
 * protocol. History is replayed as the target's own (so the library keeps
 * tool calls and signatures), except reasoning the target cannot take back
 * as reasoning: that is dropped, never turned into text. What the library's
 * options do not cover is written into the upstream payload.
 */
import type { Credentials, ModelClient } from "@agent-runtime/models"
import * as Canonical from "./Canonical.ts"

/** Whether a reasoning block from history can be replayed to `api` as reasoning. */
const replayable = (api: string, block: Extract<Canonical.Content, { type: "thinking" }>): Canonical.Content | undefined => {
  const signature = block.thinkingSignature
  switch (api) {
    case "anthropic-messages":
      // Anthropic checks the signature; unsigned reasoning would be refused (or, worse, sent as text).
      return signature ? block : undefined
    case "openai-completions":
      // Plain reasoning text goes back in the field it came in; signed reasoning belongs to another API.
      return signature ? undefined : { ...block, thinkingSignature: "reasoning_content" }
    case "openai-responses":
      // The library replays a reasoning item it stored as JSON; anything else is not one.
      return signature?.startsWith("{\"") && signature.includes("\"type\":\"reasoning\"") ? block : undefined
    default:
      return undefined
  }
}

const asTarget = (messages: ReadonlyArray<Canonical.Message>, model: Credentials.Target["model"]) =>
  messages.map((message): Canonical.Message =>
    message.role !== "assistant" ? message : {
      ...message,
      api: model.api,
      provider: model.provider,
      model: model.id,
      content: message.content.flatMap((block) => {
        if (block.type !== "thinking") return [block]
        const kept = replayable(model.api, block)
        return kept === undefined ? [] : [kept]
      })
    }
  )

type Payload = Record<string, unknown>

/** Tool choice, parallel calls, stop sequences and top_p in the target API's own fields. */
const patch = (request: Canonical.Request, api: string) => (payload: unknown): unknown => {
  const body = payload as Payload
  const choice = request.toolChoice
  switch (api) {
    case "openai-completions":
    case "openai-responses": {
      if (choice !== undefined) {
        body.tool_choice = choice.type !== "tool"
          ? choice.type
          : api === "openai-completions"
          ? { type: "function", function: { name: choice.name } }
          : { type: "function", name: choice.name }
      }
      if (request.parallelToolCalls !== undefined && body.tools !== undefined) {
        body.parallel_tool_calls = request.parallelToolCalls
      }
      if (request.topP !== undefined) body.top_p = request.topP
      if (request.stop !== undefined && api === "openai-completions") body.stop = request.stop
      return body
    }
    case "anthropic-messages": {
      if (choice !== undefined || request.parallelToolCalls === false) {
        const type = choice === undefined ? "auto" : choice.type === "required" ? "any" : choice.type
        body.tool_choice = {
          type,
          ...(choice?.type === "tool" ? { name: choice.name } : {}),
          ...(request.parallelToolCalls === false && type !== "none" ? { disable_parallel_tool_use: true } : {})
        }
      }
      if (request.topP !== undefined) body.top_p = request.topP
      if (request.stop !== undefined) body.stop_sequences = request.stop
      return body
    }
    default:
      return undefined
  }
}

export const toCall = (tenantId: string, target: Credentials.Target, request: Canonical.Request): ModelClient.Call => ({
  tenantId,
  keyScope: target.keyScope,
  model: target.id,
  context: { ...request.context, messages: asTarget(request.context.messages, target.model) },
  reasoning: request.reasoning,
  maxTokens: request.maxTokens,
  temperature: request.temperature,
  options: {
    ...(request.toolChoice?.type === "none" ? { toolChoice: "none" as const } : {}),
    ...(request.thinkingBudget !== undefined && request.reasoning !== undefined
      ? { thinkingBudgets: { [request.reasoning]: request.thinkingBudget } }
      : {}),
    onPayload: patch(request, target.model.api)
  },
  usage: { kind: "response" }
})


/**
 * Holds back a reasoning delta that is only a part separator (the library
 * streams "\n\n" after each responses summary part, also the last) until more
 * reasoning of the same block follows, so streamed reasoning adds up to the
 * finished text exactly.
 */
export const settleReasoning = () => {
  const held = new Map<number, string>()
  return (event: ModelClient.ModelEvent): ModelClient.ModelEvent | undefined => {
    if (event.type === "thinking_delta") {
      const before = held.get(event.contentIndex) ?? ""
      if (event.delta.trim() === "") {
        held.set(event.contentIndex, before + event.delta)
        return undefined
      }
      held.delete(event.contentIndex)
      return before === "" ? event : { ...event, delta: before + event.delta }
    }
    if (event.type === "thinking_end") held.delete(event.contentIndex)
    return event
  }
}
