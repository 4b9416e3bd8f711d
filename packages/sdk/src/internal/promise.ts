/**
 * Effects run as promises for the Promise API: on fetch, and rejecting with
 * the SDK error itself (not Effect's FiberFailure wrapper), so `instanceof
 * ApiError` and `error.status` work in a `catch`.
 */
import type { HttpClient } from "@effect/platform"
import { Cause, Effect, Exit } from "effect"
import * as Http from "./http.ts"

export const run = async <A, E>(
  effect: Effect.Effect<A, E, HttpClient.HttpClient>,
  options: { readonly fetch?: typeof globalThis.fetch | undefined; readonly signal?: AbortSignal | undefined } = {}
): Promise<A> => {
  const exit = await Effect.runPromiseExit(
    Effect.provide(effect, Http.fetchLayer(options.fetch)),
    options.signal === undefined ? {} : { signal: options.signal }
  )
  if (Exit.isSuccess(exit)) return exit.value
  if (Cause.isInterruptedOnly(exit.cause)) {
    throw options.signal?.reason ?? new Error("the request was aborted")
  }
  throw Cause.squash(exit.cause)
}
