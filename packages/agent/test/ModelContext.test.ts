/**
 * What the model sees of a history, worked out as it grows, against the
 * same worked out from scratch: as a history grows, when an entry is
 * replaced, when it is reloaded in place, and across compaction summaries.
 * Entries change through `setEntry` and `replaceEntries`; a last entry
 * changed some other way is seen all the same.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  contextTokens,
  estimateTokens,
  modelContext,
  replaceEntries,
  setEntry,
  toModelMessage
} from "../src/internal/modelContext.ts"
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
      setEntry(history, i, user(`prompt ${i} ${"x".repeat(i * 10)}`))
      expectSeen(history)
    }
    // An entry replaced (a kept partial answer written over), then one in the middle.
    setEntry(history, 4, user("replaced last"))
    expectSeen(history)
    setEntry(history, 1, user("replaced in the middle, longer than before"))
    expectSeen(history)
    // A compaction summary stands in for all before it; a later one for it.
    setEntry(history, 5, summary("first summary"))
    setEntry(history, 6, user("after the summary"))
    expectSeen(history)
    expect(modelContext(history)[0]).toMatchObject({ role: "user", content: expect.stringContaining("first summary") })
    setEntry(history, 7, summary("second"))
    setEntry(history, 8, user("after the second"))
    expectSeen(history)
    // The second summary written over: the first stands in again.
    setEntry(history, 7, user("no longer a summary"))
    expectSeen(history)
    expect(modelContext(history)[0]).toMatchObject({ content: expect.stringContaining("first summary") })
    // Reloaded in place with fewer entries: the summaries gone.
    replaceEntries(history, [user("reloaded a"), user("reloaded b")])
    expectSeen(history)
    expect(modelContext(history)).toHaveLength(2)
    // What the caller is given is its own: changing it changes nothing seen later.
    modelContext(history).push(toModelMessage(user("not in the history")))
    expectSeen(history)
  })

  it("sees a last entry changed without telling it, or entries taken off the end", () => {
    const history: Array<StoredMessage> = [user("a"), user("b"), user("c")]
    expectSeen(history)
    history[2] = user("changed directly")
    expectSeen(history)
    history.length = 1
    expectSeen(history)
    history.push(user("grown again"), user("and again"))
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
