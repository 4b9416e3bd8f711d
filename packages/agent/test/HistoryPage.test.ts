import * as HistoryPage from "@agent-runtime/agent/HistoryPage"
import { describe, expect, it } from "@effect/vitest"

/** Turns as sizes of their messages: [[10, 10], [10]] is a two-message turn, then a one-message turn. */
const rowsOf = (turns: ReadonlyArray<ReadonlyArray<number>>) =>
  turns.flatMap((turn) => turn.map((bytes, i) => ({ bytes, turnStart: i === 0 })))

describe("HistoryPage.start", () => {
  it("an empty history is one empty page", () => {
    expect(HistoryPage.start([])).toEqual({ start: 0, split: false })
  })

  it("takes everything when it fits", () => {
    expect(HistoryPage.start(rowsOf([[1, 1], [1]]), { limit: 10 })).toEqual({ start: 0, split: false })
  })

  it("never ends a page inside a turn: past the limit, it goes on to the turn's start", () => {
    // Turns of 3, 3, 3 messages; a limit of 4 reaches into the middle turn, so the page takes it whole.
    const rows = rowsOf([[1, 1, 1], [1, 1, 1], [1, 1, 1]])
    expect(HistoryPage.start(rows, { limit: 4 })).toEqual({ start: 3, split: false })
    expect(HistoryPage.start(rows, { limit: 3 })).toEqual({ start: 6, split: false })
  })

  it("stops before the byte budget at a turn boundary", () => {
    const rows = rowsOf([[60], [30], [30]])
    expect(HistoryPage.start(rows, { limit: 10, maxBytes: 100 })).toEqual({ start: 1, split: false })
  })

  it("a turn larger than the budget alone is split, and the page says so", () => {
    const rows = rowsOf([[10], [50, 50, 50]])
    expect(HistoryPage.start(rows, { limit: 10, maxBytes: 100 })).toEqual({ start: 2, split: true })
  })

  it("always takes the last message, however large", () => {
    expect(HistoryPage.start(rowsOf([[10], [500]]), { maxBytes: 100 })).toEqual({ start: 1, split: false })
  })
})
