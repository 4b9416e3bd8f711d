import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Tools from "../src/Tools.ts"

describe("Tools", () => {
  it("exposure defaults to both up to 10 tools and to code mode above", () => {
    expect(Tools.defaultExposure(1)).toBe("both")
    expect(Tools.defaultExposure(10)).toBe("both")
    expect(Tools.defaultExposure(11)).toBe("codemode")
    expect(Tools.isDirect("both")).toBe(true)
    expect(Tools.isDirect("direct")).toBe(true)
    expect(Tools.isDirect("codemode")).toBe(false)
  })

  it.live("parallel calls run together; a sequential call runs alone, between those before and after it", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const calls = [
        { id: "p1", mode: "parallel" },
        { id: "p2", mode: "parallel" },
        { id: "s1", mode: "sequential" },
        { id: "p3", mode: "parallel" },
        { id: "p4", mode: "parallel" },
        { id: "s2", mode: "sequential" }
      ] as const
      const results = yield* Tools.executeAll(
        calls,
        (call) => call.mode,
        (call) =>
          Effect.gen(function*() {
            log.push(`start ${call.id}`)
            // Later calls finish sooner, so completion order differs from call order.
            yield* Effect.sleep(call.id === "p1" || call.id === "p3" ? "40 millis" : "10 millis")
            log.push(`end ${call.id}`)
            return call.id.toUpperCase()
          })
      )
      expect(results).toEqual(["P1", "P2", "S1", "P3", "P4", "S2"])
      expect(log).toEqual([
        "start p1",
        "start p2",
        "end p2",
        "end p1",
        "start s1",
        "end s1",
        "start p3",
        "start p4",
        "end p4",
        "end p3",
        "start s2",
        "end s2"
      ])
    }))
})
