/**
 * The model gateway's listener on GATEWAY_PORT. Its protocol endpoints land
 * with the gateway; until then it answers health and the error body.
 */
import { HttpRouter, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"

export const app = HttpRouter.empty.pipe(
  HttpRouter.get("/healthz", HttpServerResponse.json({ status: "ok" })),
  HttpRouter.all(
    "*",
    Effect.succeed(
      HttpServerResponse.unsafeJson({ error: "the gateway serves no routes yet", code: "NOT_FOUND" }, { status: 404 })
    )
  )
)
