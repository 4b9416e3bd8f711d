import { describe, expect, it } from "@effect/vitest"
import * as Watchers from "../src/Watchers.ts"

const event = (id: number, requestId: string, type = "message_update"): Watchers.Mark => ({
  _tag: "event",
  id,
  data: { type: "event", requestId, event: { type } }
})
const gap = (from: number, to: number, at: number): Watchers.Mark => ({ _tag: "gap", from, to, at })
const watcher = (name: string, marks: ReadonlyArray<Watchers.Mark>): Watchers.Watcher => ({
  name,
  marks,
  unreachable: 0,
  stalls: 0,
  reconnects: 0,
  cutOff: 0,
  journal: []
})

describe("Watchers.verify: moved turns", () => {
  it("a turn_resumed one watcher saw is missed by another only with a gap over it", () => {
    const seen = watcher("a", [event(1, "r0"), event(100_001, "r1", "turn_resumed"), event(100_002, "r1")])
    const told = watcher("b", [event(1, "r0"), gap(1, 100_001, 50), event(100_002, "r1")])
    const silent = watcher("c", [event(1, "r0"), event(100_002, "r1")])
    expect(Watchers.verify([seen, told], { moved: ["r1"] })).toMatchObject({ missedResumes: [], resumesLost: [] })
    expect(Watchers.verify([seen, silent], { moved: ["r1"] }).missedResumes).toEqual(["c: r1"])
  })

  it("a turn_resumed nobody saw is lost with a buffer when every watcher was told of a gap while it ran", () => {
    const sentAt = new Map([["r1", 100]])
    // One saw the turn begin on its first owner, then was told of a gap; one saw none of it and was told after
    // it was sent.
    const began = watcher("a", [event(1, "r1"), gap(1, 200_000, 150), event(200_001, "r2")])
    const after = watcher("b", [event(1, "r0"), gap(1, 200_000, 160), event(200_001, "r2")])
    expect(Watchers.verify([began, after], { moved: ["r1"], sentAt })).toMatchObject({
      missedResumes: [],
      resumesLost: ["r1"]
    })

    // Told of a gap only before the request was sent, or only before the first of its events it saw: not told.
    const before = watcher("c", [event(1, "r0"), gap(1, 100_000, 50), event(100_001, "r2")])
    const earlier = watcher("d", [gap(0, 100_000, 150), event(100_001, "r1"), event(100_002, "r2")])
    for (const untold of [before, earlier]) {
      expect(Watchers.verify([began, untold], { moved: ["r1"], sentAt })).toMatchObject({
        missedResumes: [
          `${untold.name}: nobody saw turn_resumed of r1, nor was told of a gap while it ran`
        ],
        resumesLost: []
      })
    }
  })
})
