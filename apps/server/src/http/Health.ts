/**
 * `/healthz` is about the process: it answers while the process serves HTTP.
 * `/readyz` is about taking traffic: 503 while starting or draining, while
 * the node cannot reach PostgreSQL (every route needs it) and while it has
 * lost its runner lease (its shards are moving to other runners).
 */
import { RunnerReports } from "@agent-runtime/agent"
import { Api, ApiError } from "@agent-runtime/domain"
import { DatabaseHealth } from "@agent-runtime/store"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer } from "effect"
import { Readiness } from "../Readiness.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "health">,
  never,
  DatabaseHealth.DatabaseHealth | RunnerReports.RunnerReports | Readiness
> = HttpApiBuilder.group(Api.Api, "health", (handlers) =>
  Effect.gen(function*() {
    const readiness = yield* Readiness
    const database = yield* DatabaseHealth.DatabaseHealth
    const runners = yield* RunnerReports.RunnerReports
    const notReady = (error: string) => Effect.fail(new ApiError.Unavailable({ error, retryAfter: 1 }))
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        Effect.flatMap(readiness.get, (state) => {
          if (state !== "ready") return notReady(`node is ${state}`)
          const { reachable, since } = database.current()
          if (!reachable) {
            return notReady(`node cannot reach the database (for ${Math.round((Date.now() - since) / 1000)} s)`)
          }
          if (!runners.leaseHeld()) return notReady("node has lost its runner lease; its shards move to other runners")
          return Effect.succeed({ status: "ready" as const })
        }))
  }))
