/**
 * A response's events as they arrive, taken in batches: each take answers
 * every event that arrived since the last one. A provider's answer often
 * comes in one read of the socket, and taking its events one at a time
 * woke the turn's fiber once for each.
 */
import { Effect } from "effect"

export interface Batches<A> {
  /**
   * The events that arrived since the last take, waiting for one if there are none; an empty batch once the
   * events ended, and the iterator's error once it failed.
   */
  readonly take: Effect.Effect<ReadonlyArray<A>, unknown>
}

/** Starts reading `events` at once, and keeps what arrives for `take`. */
export const read = <A>(events: AsyncIterable<A>): Batches<A> => {
  let arrived: Array<A> = []
  let ended: { readonly failed: boolean; readonly error?: unknown } | undefined
  let wake: (() => void) | undefined
  const tell = () => {
    const waiting = wake
    wake = undefined
    waiting?.()
  }
  void (async () => {
    try {
      for await (const event of events) {
        arrived.push(event)
        tell()
      }
      ended = { failed: false }
    } catch (error) {
      ended = { failed: true, error }
    }
    tell()
  })()
  const taken = (): Effect.Effect<ReadonlyArray<A>, unknown> => {
    if (arrived.length > 0) {
      const batch = arrived
      arrived = []
      return Effect.succeed(batch)
    }
    return ended!.failed ? Effect.fail(ended!.error) : Effect.succeed([])
  }
  return {
    take: Effect.suspend(() =>
      arrived.length > 0 || ended !== undefined ? taken() : Effect.async<ReadonlyArray<A>, unknown>((resume) => {
        // Taken when the fiber runs again, not now: what arrives meanwhile comes in the same batch.
        wake = () => resume(Effect.suspend(taken))
        return Effect.sync(() => {
          wake = undefined
        })
      })
    )
  }
}
