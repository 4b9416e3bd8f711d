/**
 * The registry of the agents whose instance runs on this node: an instance
 * takes prompts while its scope is open, and one restarted under the same
 * address keeps its registration when the one before it closes.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import * as LocalAgents from "../src/LocalAgents.ts"

const request = { request: { id: "req_1" } } as unknown as Parameters<LocalAgents.Take>[0]

describe("LocalAgents", () => {
  it.effect("an instance takes its prompts while open; a restart's registration outlives the one before", () =>
    Effect.gen(function*() {
      const local = yield* LocalAgents.make
      const taken: Array<string> = []
      const instance = (name: string, takes = true): LocalAgents.Take => () =>
        takes ? Effect.sync(() => taken.push(name) > 0) : Effect.succeed(false)

      expect(yield* local.prompt("agent_a", request)).toBe(false)

      const first = yield* Scope.make()
      yield* Scope.extend(local.register("agent_a", instance("first")), first)
      expect(yield* local.prompt("agent_a", request)).toBe(true)

      // Restarted under the same address before the first closed: the first's close leaves the second's.
      const second = yield* Scope.make()
      yield* Scope.extend(local.register("agent_a", instance("second")), second)
      yield* Scope.close(first, Exit.void)
      expect(yield* local.prompt("agent_a", request)).toBe(true)
      expect(taken).toEqual(["first", "second"])

      // An instance may send a prompt through the cluster instead; closed, it takes none.
      const declining = yield* Scope.make()
      yield* Scope.extend(local.register("agent_b", instance("declining", false)), declining)
      expect(yield* local.prompt("agent_b", request)).toBe(false)
      yield* Scope.close(second, Exit.void)
      expect(yield* local.prompt("agent_a", request)).toBe(false)
    }))
})
