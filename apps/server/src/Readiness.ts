/**
 * Whether the node takes traffic: starting until its servers listen, then
 * ready, then draining from the first shutdown signal on.
 */
import { Duration, Effect, Layer, Ref } from "effect"
import { ServerConfig } from "./ServerConfig.ts"

export type State = "starting" | "ready" | "draining"

export class Readiness extends Effect.Service<Readiness>()("@agent-runtime/server/Readiness", {
  effect: Effect.map(Ref.make<State>("starting"), (state) => ({
    get: Ref.get(state),
    set: (next: State) => Ref.set(state, next)
  }))
}) {}

/**
 * Marks the node ready once built. On shutdown it reports draining and keeps
 * serving for `DRAIN_GRACE_SECONDS`, so load balancers polling /readyz stop
 * sending traffic before the listener closes.
 */
export const layerServing = Layer.scopedDiscard(
  Effect.gen(function*() {
    const readiness = yield* Readiness
    const { drainGraceSeconds } = yield* ServerConfig
    yield* readiness.set("ready")
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(
        readiness.set("draining"),
        Effect.sleep(Duration.seconds(drainGraceSeconds))
      )
    )
  })
)
