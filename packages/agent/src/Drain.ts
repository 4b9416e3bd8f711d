/**
 * A node handing its agents on, in two phases. `begin`: running turns stop
 * after their current step (the request stays open for the next owner) and
 * no new work starts here; `idle` waits until no turn runs. `close`: event
 * streams served from here end (watchers get `event: reconnect`), so the
 * cluster can move the shards at once instead of waiting on open streams.
 */
import { Context, Deferred, Effect, Layer } from "effect"

export class Drain extends Context.Tag("@agent-runtime/agent/Drain")<Drain, {
  /** Whether the drain has begun: running turns stop after their step, and no new work starts here. */
  readonly isDraining: () => boolean
  /** Begins the drain. */
  readonly begin: Effect.Effect<void>
  /** Completes when the drain begins. */
  readonly begun: Effect.Effect<void>
  /** Counts a turn running on this node for as long as `effect` runs. */
  readonly track: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** How many turns run on this node now. */
  readonly running: () => number
  /** Completes once no turn runs on this node. */
  readonly idle: Effect.Effect<void>
  /** Closes the node's event streams (watchers reconnect elsewhere). */
  readonly close: Effect.Effect<void>
  /** Notes an agent let go during the drain, to be announced once this runner has let its shards go. */
  readonly released: (agentId: string) => void
  /** The agents let go during the drain. */
  readonly releasedAgents: () => ReadonlyArray<string>
  /** Completes when the node closes its streams. */
  readonly closed: Effect.Effect<void>
  /** Whether the node has closed its streams. */
  readonly isClosed: () => boolean
  /** A plain callback for the close (at once when already closed); the result unregisters it. */
  readonly onClose: (listener: () => void) => () => void
}>() {}

export const make = Effect.gen(function*() {
  let draining = false
  let running = 0
  let isClosed = false
  const closed = yield* Deferred.make<void>()
  const begun = yield* Deferred.make<void>()
  const onClose = new Set<() => void>()
  const onIdle = new Set<() => void>()
  const released = new Set<string>()
  return Drain.of({
    isDraining: () => draining,
    begin: Effect.suspend(() => {
      draining = true
      return Deferred.succeed(begun, void 0)
    }),
    begun: Deferred.await(begun),
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
    released: (agentId: string) => void released.add(agentId),
    releasedAgents: (): ReadonlyArray<string> => [...released],
    closed: Deferred.await(closed),
    isClosed: () => isClosed,
    onClose: (listener: () => void): () => void => {
      if (isClosed) {
        listener()
        return () => {}
      }
      onClose.add(listener)
      return () => onClose.delete(listener)
    }
  })
})

export const layer: Layer.Layer<Drain> = Layer.effect(Drain, make)
