/**
 * A response's events taken in batches: what arrived together is taken
 * together, in order; a take waits for the next event; the end is an empty
 * batch and a failure the iterator's error, each after the events before it.
 */
import { expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Scheduler } from "effect"
import * as Batches from "../src/internal/batches.ts"

/** An async iterable fed by hand: each `push` delivers its events in one go, as a read of the socket does. */
const source = <A>() => {
  const queued: Array<IteratorResult<A> | { readonly error: unknown }> = []
  let waiting: (() => void) | undefined
  const deliver = (...results: Array<IteratorResult<A> | { readonly error: unknown }>) => {
    for (const result of results) queued.push(result)
    waiting?.()
  }
  const iterable: AsyncIterable<A> = {
    [Symbol.asyncIterator]: () => ({
      next: async () => {
        while (queued.length === 0) await new Promise<void>((resolve) => (waiting = resolve))
        const result = queued.shift()!
        if ("error" in result) throw result.error
        return result
      }
    })
  }
  return {
    iterable,
    push: (...events: Array<A>) => deliver(...events.map((value) => ({ value, done: false as const }))),
    end: () => deliver({ value: undefined, done: true as const }),
    fail: (error: unknown) => deliver({ error })
  }
}

it.live("what arrived together is taken together, in order, and the end after it is an empty batch", () =>
  Effect.gen(function*() {
    const events = source<number>()
    const batches = Batches.read(events.iterable)
    // A take waiting when the events come is woken once, and runs (as a turn does) after the node's I/O.
    const first = yield* Effect.fork(Effect.withScheduler(batches.take, Scheduler.timer(0)))
    yield* Effect.sleep("10 millis")
    events.push(1, 2, 3)
    expect(yield* Fiber.join(first)).toEqual([1, 2, 3])

    events.push(4)
    events.push(5)
    events.end()
    yield* Effect.sleep("20 millis")
    expect(yield* batches.take).toEqual([4, 5])
    expect(yield* batches.take).toEqual([])
    expect(yield* batches.take).toEqual([])
  }))

it.live("a failure comes after the events before it, as the iterator's error", () =>
  Effect.gen(function*() {
    const events = source<string>()
    const batches = Batches.read(events.iterable)
    events.push("a")
    events.fail(new Error("socket closed"))
    yield* Effect.sleep("20 millis")
    expect(yield* batches.take).toEqual(["a"])
    expect(yield* Effect.flip(batches.take)).toEqual(new Error("socket closed"))
  }))

it.live("a take interrupted while it waits takes nothing: the next take has what arrives", () =>
  Effect.gen(function*() {
    const events = source<number>()
    const batches = Batches.read(events.iterable)
    const waiting = yield* Effect.fork(batches.take)
    yield* Effect.sleep("10 millis")
    yield* Fiber.interrupt(waiting)
    const taken = yield* Deferred.make<ReadonlyArray<number>>()
    yield* Effect.fork(
      Effect.flatMap(Effect.withScheduler(batches.take, Scheduler.timer(0)), (batch) => Deferred.succeed(taken, batch))
    )
    yield* Effect.sleep("10 millis")
    events.push(7, 8)
    expect(yield* Deferred.await(taken)).toEqual([7, 8])
  }))
