/**
 * A node handing its agents on: once a drain begins, running turns stop
 * after their current step (the request stays open for the next owner),
 * no new work starts here, and watchers are told to reconnect. `idle`
 * waits until no turn runs on this node, so shards move only after that.
 */
import { Effect, Scope } from "effect"

export class Drain extends Effect.Service<Drain>()("@agent-runtime/agent/Drain", {
  sync: () => {
    let draining = false
    let running = 0
    const onBegin = new Set<() => void>()
    const onIdle = new Set<() => void>()
    const settle = () => {
      if (running > 0) return
      for (const wake of onIdle) wake()
    }
    return {
      isDraining: () => draining,
      begin: Effect.sync(() => {
        if (draining) return
        draining = true
        for (const listener of onBegin) listener()
      }),
      /** Registers a callback for the start of a drain (at once when one began); removed with the scope. */
      listen: (listener: () => void): Effect.Effect<void, never, Scope.Scope> =>
        Effect.acquireRelease(
          Effect.sync(() => {
            onBegin.add(listener)
            if (draining) listener()
          }),
          () => Effect.sync(() => onBegin.delete(listener))
        ),
      /** Counts a turn running on this node for as long as `effect` runs. */
      track: <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.acquireUseRelease(
          Effect.sync(() => running++),
          () => effect,
          () =>
            Effect.sync(() => {
              running--
              settle()
            })
        ),
      running: () => running,
      idle: Effect.async<void>((resume) => {
        if (running === 0) return resume(Effect.void)
        const wake = () => {
          onIdle.delete(wake)
          resume(Effect.void)
        }
        onIdle.add(wake)
        return Effect.sync(() => onIdle.delete(wake))
      })
    }
  }
}) {}
