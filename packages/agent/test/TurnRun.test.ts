/**
 * A turn's model target is resolved once for all its calls: the first outcome is kept, a failure too, and a
 * resolve cut short (the turn interrupted while it ran) is run again by the next call.
 */
import { expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { keptOnceDone } from "../src/internal/turnRun.ts"

it.effect("the first outcome is kept for every later call", () =>
  Effect.gen(function*() {
    let runs = 0
    const target = keptOnceDone(Effect.sync(() => ++runs))
    expect([yield* target, yield* target, yield* target]).toEqual([1, 1, 1])
    expect(runs).toBe(1)
  }))

it.effect("a failure is kept: the resolve is not run again", () =>
  Effect.gen(function*() {
    let runs = 0
    const target = keptOnceDone(Effect.suspend(() => Effect.fail(`unknown model ${++runs}`)))
    expect(yield* Effect.exit(target)).toEqual(Exit.fail("unknown model 1"))
    expect(yield* Effect.exit(target)).toEqual(Exit.fail("unknown model 1"))
    expect(runs).toBe(1)
  }))

it.effect("a resolve interrupted while it ran is run again by the next call", () =>
  Effect.gen(function*() {
    let runs = 0
    const started = yield* Deferred.make<void>()
    const never = yield* Deferred.make<number>()
    const target = keptOnceDone(Effect.suspend(() => {
      runs++
      return runs === 1 ? Effect.zipRight(Deferred.succeed(started, void 0), Deferred.await(never)) : Effect.succeed(7)
    }))
    const first = yield* Effect.fork(target)
    yield* Deferred.await(started)
    yield* Fiber.interrupt(first)
    expect(yield* target).toBe(7)
    expect(yield* target).toBe(7)
    expect(runs).toBe(2)
  }))
