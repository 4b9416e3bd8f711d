import { Api, ApiError } from "@agent-runtime/domain"
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Readiness } from "../Readiness.ts"

export const layer = HttpApiBuilder.group(Api.Api, "health", (handlers) =>
  Effect.gen(function*() {
    const readiness = yield* Readiness
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        Effect.flatMap(readiness.get, (state) =>
          state === "ready"
            ? Effect.succeed({ status: "ready" as const })
            : Effect.fail(new ApiError.Unavailable({ error: `node is ${state}`, retryAfter: 1 }))))
  }))
