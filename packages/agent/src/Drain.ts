/**
 * A node handing its agents on, in two phases. `begin`: running turns stop
 * after their current step (the request stays open for the next owner) and
 * no new work starts here; `idle` waits until no turn runs. `close`: event
 * streams served from here end (watchers get `event: reconnect`), so the
 * cluster can move the shards at once instead of waiting on open streams.
 */
import { Deferred, Effect } from "effect"

export class Drain extends Effect.Service<Drain>()("@agent-runtime/agent/Drain", {
  effect: Effect.gen(function*() {
    let draining = false
    let running = 0
    let isClosed = false
    const closed = yield* Deferred.make<void>()
    const begun = yield* Deferred.make<void>()
    const onClose = new Set<() => void>()
    const onIdle = new Set<() => void>()
    const released = new Set<string>()
    return {
      isDraining: () => draining,
      begin: Effect.suspend(() => {
        draining = true
        return Deferred.succeed(begun, void 0)
      }),
      /** Completes when the drain begins. */
      begun: Deferred.await(begun),
      /** Counts a turn running on this node for as long as `effect` runs. */
      track: <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.acquireUseRelease(
          Effect.sync(() => running++),
          () => effect,
          () =>
            Effect.sync(() => {
              running--
              if (running === 0) { for (const wake of onIdle) wake() }
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
      }),
      close: Effect.suspend(() => {
        isClosed = true
        for (const listener of onClose) listener()
        onClose.clear()
        return Deferred.succeed(closed, void 0)
      }),
      /** Notes an agent let go during the drain, to be announced once this runner has let its shards go. */
      released: (agentId: string) => void released.add(agentId),
      /** The agents let go during the drain. */
      releasedAgents: (): ReadonlyArray<string> => [...released],
      /** Completes when the node closes its streams. */
      closed: Deferred.await(closed),
      /** Whether the node has closed its streams. */
      isClosed: () => isClosed,
      /** A plain callback for the close (at once when already closed); the result unregisters it. */
      onClose: (listener: () => void): () => void => {
        if (isClosed) {
          listener()
          return () => {}
        }
        onClose.add(listener)
        return () => onClose.delete(listener)
      }
    }
  })
}) {}
