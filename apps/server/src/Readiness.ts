/**
 * Whether the node takes traffic: starting until its servers listen, then
 * ready, then draining from the first shutdown signal on.
 */
import { Drain } from "@agent-runtime/agent"
import { Context, Duration, Effect, Layer, Ref, Runtime } from "effect"
import { ServerConfig } from "./ServerConfig.ts"
import * as Sockets from "./Sockets.ts"

export type State = "starting" | "ready" | "draining"

export class Readiness extends Context.Tag("@agent-runtime/server/Readiness")<Readiness, {
  /** The node's state now, for /readyz. */
  readonly get: Effect.Effect<State>
  /** Moves the node on: `layerServing` sets ready once the node is built, and draining at shutdown. */
  readonly set: (next: State) => Effect.Effect<void>
}>() {}

export const make = Effect.map(Ref.make<State>("starting"), (state) =>
  Readiness.of({
    get: Ref.get(state),
    set: (next) => Ref.set(state, next)
  }))

/** Starting, until `layerServing` says otherwise. */
export const layer: Layer.Layer<Readiness> = Layer.effect(Readiness, make)

/**
 * Marks the node ready once built. On shutdown (SIGTERM, or an operator's
 * drain) it reports draining on /readyz, keeps serving for
 * `DRAIN_GRACE_SECONDS` so load balancers stop sending traffic, and hands
 * its agents on: running turns finish their current step (at most
 * `DRAIN_TIMEOUT_SECONDS`) and stop there with their requests open, then
 * event streams are closed with `event: reconnect`. Only then do the
 * servers and the cluster runner stop (within `STOP_TIMEOUT_SECONDS`, or
 * the process exits anyway), and the next owners continue the turns.
 */
export const layerServing: Layer.Layer<never, never, Readiness | Drain.Drain | ServerConfig> = Layer.scopedDiscard(
  Effect.gen(function*() {
    const readiness = yield* Readiness
    const drain = yield* Drain.Drain
    const { drainGraceSeconds, drainTimeoutSeconds, stopTimeoutSeconds } = yield* ServerConfig
    yield* readiness.set("ready")
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* readiness.set("draining")
        yield* drain.begin
        const turns = drain.running()
        yield* Effect.logInfo("draining").pipe(Effect.annotateLogs("turnsRunning", turns))
        const [, waited] = yield* Effect.all([
          Effect.sleep(Duration.seconds(drainGraceSeconds)),
          drain.idle.pipe(Effect.timeout(Duration.seconds(drainTimeoutSeconds)), Effect.either, Effect.timed)
        ], { concurrency: "unbounded" })
        yield* drain.close
        const [took, finished] = waited
        yield* Effect.logInfo(
          finished._tag === "Right"
            ? "drained: running turns stopped after their step and move to other runners"
            : "drain timed out: turns still running are cut and resumed by their next owners"
        ).pipe(Effect.annotateLogs({ turns, stillRunning: drain.running(), ms: Math.round(Duration.toMillis(took)) }))
        // The servers, the runner and the database close next. Should that hang (a connection that does not end),
        // the node exits anyway once the stop timeout passes: its turns are handed on already, and what it still
        // holds is taken over as after a crash. (An unref'd timer: it must not itself keep the process alive.)
        const runtime = yield* Effect.runtime<never>()
        const stopping = setTimeout(() => {
          Runtime.runSync(runtime)(
            Effect.logWarning("the node did not stop within its stop timeout; exiting").pipe(
              Effect.annotateLogs({
                stopTimeoutSeconds,
                waitingOn: process.getActiveResourcesInfo().filter((kind) => kind !== "Timeout"),
                sockets: Sockets.open()
              })
            )
          )
          process.exit(0)
        }, stopTimeoutSeconds * 1000)
        stopping.unref()
      })
    )
  })
)
