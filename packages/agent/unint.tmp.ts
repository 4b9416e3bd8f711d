import { Effect, Scope, Exit, Fiber } from "effect"
const prog = Effect.gen(function*() {
  const scope = yield* Scope.make()
  const forever = Effect.never.pipe(Effect.onInterrupt(() => Effect.log("interrupted")))
  yield* Effect.uninterruptible(Effect.forkIn(forever, scope))
  const closed = yield* Scope.close(scope, Exit.void).pipe(Effect.timeout("1 second"), Effect.option)
  yield* Effect.log("closed within 1s:", closed._tag === "Some")
})
Effect.runPromise(prog)
