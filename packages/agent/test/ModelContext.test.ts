/**
 * What the model sees of a history, worked out as it grows, against the
 * same worked out from scratch: as a history grows, when an entry is
 * replaced, when it is reloaded in place, and across compaction summaries.
 */
import { describe, expect, it } from "@effect/vitest"
import { contextTokens, estimateTokens, modelContext, toModelMessage } from "../src/internal/modelContext.ts"
import type { StoredMessage } from "../src/Turn.ts"

const fromScratch = (history: ReadonlyArray<StoredMessage>) => {
  const start = Math.max(0, history.findLastIndex((message) => message.role === "compactionSummary"))
  const messages = history.slice(start).map(toModelMessage)
  return { messages, tokens: messages.reduce((sum, message) => sum + estimateTokens(message), 0) }
}

const user = (text: string): StoredMessage => ({ role: "user", content: text, timestamp: 1 })
const summary = (text: string): StoredMessage => ({ role: "compactionSummary", summary: text, timestamp: 2 } as any)

const expectSeen = (history: ReadonlyArray<StoredMessage>) => {
  const expected = fromScratch(history)
  expect(modelContext(history)).toEqual(expected.messages)
  expect(contextTokens(history)).toBe(expected.tokens)
}

describe("modelContext", () => {
  it("follows a history as it grows, is replaced in place, reloaded and compacted", () => {
    const history: Array<StoredMessage> = []
    expectSeen(history)
    for (let i = 0; i < 5; i++) {
      history.push(user(`prompt ${i} ${"x".repeat(i * 10)}`))
      expectSeen(history)
    }
    // An entry replaced (a kept partial answer written over), then one in the middle.
    history[4] = user("replaced last")
    expectSeen(history)
    history[1] = user("replaced in the middle, longer than before")
    expectSeen(history)
    // A compaction summary stands in for all before it; a later one for it.
    history.push(summary("first summary"), user("after the summary"))
    expectSeen(history)
    expect(modelContext(history)[0]).toMatchObject({ role: "user", content: expect.stringContaining("first summary") })
    history.push(summary("second"), user("after the second"))
    expectSeen(history)
    // Reloaded in place with fewer entries: the summaries gone.
    history.splice(0, history.length, user("reloaded a"), user("reloaded b"))
    expectSeen(history)
    expect(modelContext(history)).toHaveLength(2)
    // What the caller is given is its own: changing it changes nothing seen later.
    modelContext(history).push(toModelMessage(user("not in the history")))
    expectSeen(history)
  })

  it("keeps histories apart", () => {
    const one = [user("one")]
    const two = [user("two"), user("three")]
    expectSeen(one)
    expectSeen(two)
    expectSeen(one)
  })
})
