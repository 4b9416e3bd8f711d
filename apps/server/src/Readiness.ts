/**
 * Whether the node takes traffic: starting until its servers listen, then
 * ready, then draining from the first shutdown signal on.
 */
import { Effect, Layer, Ref } from "effect"

export type State = "starting" | "ready" | "draining"

export class Readiness extends Effect.Service<Readiness>()("@agent-runtime/server/Readiness", {
  effect: Effect.map(Ref.make<State>("starting"), (state) => ({
    get: Ref.get(state),
    set: (next: State) => Ref.set(state, next)
  }))
}) {}

/** Marks the node ready once built, and draining as soon as shutdown begins. */
export const layerServing = Layer.scopedDiscard(
  Effect.gen(function*() {
    const readiness = yield* Readiness
    yield* readiness.set("ready")
    yield* Effect.addFinalizer(() => readiness.set("draining"))
  })
)
