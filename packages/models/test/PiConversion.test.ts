/**
 * pi-ai's chat-completions conversion as patched: a history converted on
 * every request reuses what its earlier messages were converted to, and a
 * transcript collapsed once is not collapsed again. Random histories grown,
 * edited and cut, under several models and settings, must convert exactly as
 * they do converted whole each time.
 */
import { resolveTranscript } from "@earendil-works/pi-ai"
import { convertMessages } from "@earendil-works/pi-ai/api/openai-completions"
import { describe, expect, it } from "@effect/vitest"
import type * as Pi from "../src/internal/pi.ts"

/** A seeded generator, so a failing history can be made again. */
const random = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0
    return state / 2 ** 32
  }
}

type Message = any

const histories = (seed: number) => {
  const next = random(seed)
  const pick = <A>(items: ReadonlyArray<A>): A => items[Math.floor(next() * items.length)]!
  const texts = ["Hello.", "", "  ", "two words", "lone \uD800 surrogate", "line\nbreak", "⟨runtime⟩ quoted"]
  const image = { type: "image", data: "aGk=", mimeType: "image/png" }
  const toolIds: Array<string> = []
  let counter = 0
  const toolId = () => {
    const id = pick(["call_", "call_|item_+/=", `call_${"x".repeat(45)}_`]) + counter++
    toolIds.push(id)
    return id
  }
  const user = (): Message => ({
    role: "user",
    content: next() < 0.6 ? pick(texts) : [{ type: "text", text: pick(texts) }, ...(next() < 0.3 ? [image] : [])],
    timestamp: 1
  })
  const assistant = (): Message => {
    const blocks: Array<unknown> = []
    const count = 1 + Math.floor(next() * 3)
    for (let i = 0; i < count; i++) {
      const kind = next()
      if (kind < 0.55) blocks.push({ type: "text", text: pick(texts) })
      else if (kind < 0.75) {
        blocks.push({ type: "thinking", thinking: pick(texts), ...(next() < 0.3 ? { thinkingSignature: "sig" } : {}) })
      } else blocks.push({ type: "toolCall", id: toolId(), name: pick(["read", "write"]), arguments: { n: i } })
    }
    return {
      role: "assistant",
      content: blocks,
      api: "openai-completions",
      provider: pick(["fake", "other"]),
      model: pick(["m1", "m2"]),
      usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: {} },
      stopReason: pick(["stop", "stop", "stop", "toolUse", "length", "error", "aborted"]),
      timestamp: 1
    }
  }
  const toolResult = (): Message => ({
    role: "toolResult",
    toolCallId: toolIds.length > 0 && next() < 0.85 ? pick(toolIds) : "call_unknown",
    toolName: "read",
    content: [{ type: "text", text: pick(texts) }, ...(next() < 0.2 ? [image] : [])],
    isError: false,
    timestamp: 1
  })
  const tool = (name: string) => ({ name, description: name, parameters: { type: "object", properties: {} } })
  const system = (): Message => ({
    role: "system",
    content: "Be brief.",
    ...(next() < 0.5 ? { toolsAdded: [tool(pick(["read", "write", "search"]))] } : {}),
    timestamp: 1
  })
  const message = (): Message => {
    const kind = next()
    return kind < 0.3 ? user() : kind < 0.7 ? assistant() : kind < 0.95 ? toolResult() : system()
  }
  return { next, pick, message }
}

const model = (provider: string, input: Array<"text" | "image">, reasoning: boolean) =>
  ({
    id: "m1",
    name: "m1",
    api: "openai-completions",
    provider,
    baseUrl: "http://127.0.0.1:1/v1",
    reasoning,
    input,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: 100_000,
    maxTokens: 1_000
  }) as Pi.Model<"openai-completions">

const compat = (next: () => number) =>
  ({
    supportsMidConvoSystemMessages: next() < 0.5,
    supportsMidConvoToolAdditions: next() < 0.5,
    requiresAssistantAfterToolResult: next() < 0.5,
    requiresToolResultName: next() < 0.5,
    supportsDeveloperRole: next() < 0.5,
    requiresReasoningContentOnAssistantMessages: next() < 0.5,
    requiresThinkingAsText: next() < 0.5,
    supportsOpenAIGrammarTools: false
  }) as any

describe("pi-ai's chat-completions conversion", () => {
  it("converts a history reusing its earlier conversion exactly as it converts it whole", () => {
    let reusedSome = false
    for (let seed = 1; seed <= 300; seed++) {
      const { message, next, pick } = histories(seed)
      const targets = [
        { model: model("fake", ["text"], false), compat: compat(next) },
        { model: model("openai", ["text", "image"], true), compat: compat(next) }
      ]
      const history: Array<Message> = []
      for (let step = 0; step < 60; step++) {
        const change = next()
        if (change < 0.75) history.push(message())
        else if (change < 0.85 && history.length > 0) history[Math.floor(next() * history.length)] = message()
        else if (change < 0.9) history.length = Math.floor(history.length * next())
        else history.push(message(), message(), message())
        const target = pick(targets)
        // A fresh head each request, as the context's system prompt makes one.
        const context = {
          messages: [
            ...(next() < 0.9 ? [{ role: "system", content: "You help.", timestamp: 0 }] : []),
            ...history
          ]
        } as any
        const whole = convertMessages(target.model, context, target.compat)
        // As a request converts it: its transcript resolved first, then again inside the conversion.
        const resolved = resolveTranscript(context, target.compat.supportsMidConvoSystemMessages)
        // Which is what resolving it again gives: the same transcript, resolved afresh from a copy.
        expect(resolveTranscript({ ...resolved, messages: [...resolved.messages] }, false)).toEqual(
          resolveTranscript(resolved, false)
        )
        const reused = convertMessages(target.model, resolved, target.compat, { reuse: true })
        expect(reused, `seed ${seed}, step ${step}`).toEqual(whole)
        const again = convertMessages(target.model, resolved, target.compat, { reuse: true })
        expect(again).toEqual(whole)
        if (again.length > 2 && again.slice(1).some((param, i) => param === reused[i + 1])) reusedSome = true
      }
    }
    // Not only equal: earlier messages' conversions were kept and given again.
    expect(reusedSome).toBe(true)
  })

  it("keeps one conversion a history, moving it to the latest answer", () => {
    const target = model("fake", ["text"], false)
    const settings = compat(() => 0.9)
    const history: Array<Message> = []
    const answer = (text: string): Message => ({
      role: "assistant",
      content: [{ type: "text", text }],
      api: "openai-completions",
      provider: "fake",
      model: "m1",
      usage: {},
      stopReason: "stop",
      timestamp: 1
    })
    let first: unknown
    for (let turn = 0; turn < 50; turn++) {
      history.push({ role: "user", content: `question ${turn}`, timestamp: 1 }, answer(`answer ${turn}`))
      const params = convertMessages(target, { messages: [...history] } as any, settings, { reuse: true })
      expect(params).toHaveLength(history.length)
      expect(params.at(-1)).toEqual({ role: "assistant", content: `answer ${turn}` })
      first ??= params[0]
      // The first message's conversion is the one made on the first request.
      expect(params[0]).toBe(first)
    }
    // A request that changed an early message converts it again, and the rest with it.
    history[0] = { role: "user", content: "changed", timestamp: 1 }
    const params = convertMessages(target, { messages: [...history] } as any, settings, { reuse: true })
    expect(params[0]).toEqual({ role: "user", content: "changed" })
    expect(params[0]).not.toBe(first)
  })
})
