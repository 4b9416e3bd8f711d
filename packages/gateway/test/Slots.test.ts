import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as GatewayConfig from "../src/GatewayConfig.ts"
import { GatewayError } from "../src/GatewayError.ts"
import * as Slots from "../src/Slots.ts"

const slotsWith = (queueTimeoutMs: number) =>
  Effect.provide(Slots.Slots, Slots.layer.pipe(Layer.provide(GatewayConfig.layerTest({ queueTimeoutMs }))))

const granted = (value: ReturnType<Slots.Service["acquire"]>) => Effect.promise(async () => await value)

describe("Slots", () => {
  it.effect("grants at once under the limit, queues first in first out above it, per tenant", () =>
    Effect.gen(function*() {
      const slots = yield* slotsWith(10_000)
      const a1 = slots.acquire("a", 2)
      const a2 = slots.acquire("a", 2)
      expect(typeof a1).toBe("function")
      expect(typeof a2).toBe("function")
      const order: Array<string> = []
      const a3 = (slots.acquire("a", 2) as Promise<() => void>).then((release) => (order.push("a3"), release))
      const a4 = (slots.acquire("a", 2) as Promise<() => void>).then((release) => (order.push("a4"), release))
      // Another tenant is not held up by a's queue.
      expect(typeof slots.acquire("b", 2)).toBe("function")
      expect(slots.stats("a")).toEqual({ active: 2, waiting: 2 })
      ;(a1 as () => void)()
      ;(yield* granted(a3))()
      ;(a2 as () => void)()
      ;(yield* granted(a4))()
      expect(order).toEqual(["a3", "a4"])
      expect(slots.stats("a")).toEqual({ active: 0, waiting: 0 })
    }))

  it.effect("a caller waiting past the timeout is refused with 429 and Retry-After; releasing twice frees one slot", () =>
    Effect.gen(function*() {
      const slots = yield* slotsWith(50)
      const held = slots.acquire("t", 1) as () => void
      const error = yield* Effect.flip(
        Effect.tryPromise({ try: () => slots.acquire("t", 1) as Promise<unknown>, catch: (e) => e })
      )
      expect(error).toBeInstanceOf(GatewayError)
      expect(error).toMatchObject({ status: 429, code: "RATE_LIMITED", retryAfter: 1 })
      held()
      held()
      expect(slots.stats("t")).toEqual({ active: 0, waiting: 0 })
    }))
})
