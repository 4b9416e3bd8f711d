/**
 * Token counts of one answer in the model layer's terms (input excludes
 * cached tokens; output includes reasoning), read from whichever protocol
 * the upstream spoke, and the usage entry they become.
 */
import type { Credentials, UsageLog } from "@agent-runtime/models"
import { Option } from "effect"

export interface TokenUsage {
  readonly input: number
  readonly output: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly reasoning?: number | undefined
}

const count = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) ? value : 0)

/** Chat completions' `usage`: OpenAI counts cached tokens inside `prompt_tokens`. */
export const fromChat = (usage: any): TokenUsage => {
  const cached = count(usage?.prompt_tokens_details?.cached_tokens)
  return {
    input: Math.max(0, count(usage?.prompt_tokens) - cached),
    output: count(usage?.completion_tokens),
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: usage?.completion_tokens_details?.reasoning_tokens ?? undefined
  }
}

/** Responses' `usage`, cached tokens likewise inside `input_tokens`. */
export const fromResponses = (usage: any): TokenUsage => {
  const cached = count(usage?.input_tokens_details?.cached_tokens)
  return {
    input: Math.max(0, count(usage?.input_tokens) - cached),
    output: count(usage?.output_tokens),
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: usage?.output_tokens_details?.reasoning_tokens ?? undefined
  }
}

/** Messages' `usage`; in a stream `message_delta` repeats or updates what `message_start` said. */
export const fromMessages = (usage: any, before?: TokenUsage): TokenUsage => ({
  input: usage?.input_tokens ?? before?.input ?? 0,
  output: usage?.output_tokens ?? before?.output ?? 0,
  cacheRead: usage?.cache_read_input_tokens ?? before?.cacheRead ?? 0,
  cacheWrite: usage?.cache_creation_input_tokens ?? before?.cacheWrite ?? 0,
  reasoning: usage?.output_tokens_details?.thinking_tokens ?? before?.reasoning
})

/** The usage entry of one gateway answer, priced from the target model's catalog cost. */
export const entry = (tenantId: string, target: Credentials.Target, usage: TokenUsage): UsageLog.Entry => {
  const cost = target.model.cost
  return {
    tenantId,
    keyScope: Option.getOrUndefined(target.keyScope),
    keySource: target.source,
    provider: target.provider,
    model: target.model.id,
    kind: "response",
    input: usage.input,
    output: usage.output,
    cacheRead: usage.cacheRead,
    cacheWrite: usage.cacheWrite,
    reasoning: usage.reasoning,
    costUsd: (usage.input * cost.input + usage.output * cost.output + usage.cacheRead * cost.cacheRead +
      usage.cacheWrite * cost.cacheWrite) / 1_000_000,
    costSource: "catalog"
  }
}
