/**
 * The registry of the agents whose instance runs on this node: an instance
 * takes prompts while its scope is open, and one restarted under the same
 * address keeps its registration when the one before it closes.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import * as LocalAgents from "../src/LocalAgents.ts"

const request = { request: { id: "req_1" } } as unknown as Parameters<LocalAgents.Take>[0]

describe("LocalAgents", () => {
  it.effect("an instance takes its prompts while open; a restart's registration outlives the one before", () =>
    Effect.gen(function*() {
      const local = yield* LocalAgents.make
      const taken: Array<string> = []
      const instance = (name: string, takes = true): LocalAgents.Take => () =>
        takes ? Option.some(Effect.sync(() => taken.push(name))) : Option.none()

      expect(Option.isNone(local.prompt("agent_a", request))).toBe(true)

      const first = yield* Scope.make()
      yield* Scope.extend(local.register("agent_a", instance("first")), first)
      yield* Option.getOrThrow(local.prompt("agent_a", request))

      // Restarted under the same address before the first closed: the first's close leaves the second's.
      const second = yield* Scope.make()
      yield* Scope.extend(local.register("agent_a", instance("second")), second)
      yield* Scope.close(first, Exit.void)
      yield* Option.getOrThrow(local.prompt("agent_a", request))
      expect(taken).toEqual(["first", "second"])

      // An instance may send a prompt through the cluster instead; closed, it takes none.
      const declining = yield* Scope.make()
      yield* Scope.extend(local.register("agent_b", instance("declining", false)), declining)
      expect(Option.isNone(local.prompt("agent_b", request))).toBe(true)
      yield* Scope.close(second, Exit.void)
      expect(Option.isNone(local.prompt("agent_a", request))).toBe(true)
    }))
})
