/**
 * Checks on an agent's history that every fault test makes: whatever moved or crashed, each assistant
 * message's tool calls are answered by the messages right after it, in call order.
 */
import { expect } from "vitest"

interface Entry {
  readonly message: { readonly role: string; readonly content?: unknown; readonly toolCallId?: string }
}

/** Asserts every tool call in `entries` is answered right after its message, in order; how many there were. */
export const expectToolCallsAnswered = (entries: ReadonlyArray<Entry>, label: string): number => {
  let calls = 0
  entries.forEach((entry, i) => {
    if (entry.message.role !== "assistant") return
    const made = (entry.message.content as Array<{ type: string; id?: string }>).filter((part) =>
      part.type === "toolCall"
    )
    calls += made.length
    const results = entries.slice(i + 1, i + 1 + made.length).map((next) => next.message)
    expect(results.map((result) => result.role), label).toEqual(made.map(() => "toolResult"))
    expect(results.map((result) => result.toolCallId), label).toEqual(made.map((part) => part.id))
  })
  return calls
}
