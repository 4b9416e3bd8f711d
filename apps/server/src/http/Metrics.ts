/**
 * `GET /v1/admin/metrics`: the node's metrics in Prometheus' text format (see Metrics), for the operator
 * token only, as every `/v1/admin` route; anyone else gets the API's 401 or 403 `{error, code}`. Served
 * beside the API, like `/docs`, rather than as one of its endpoints: its answer is not JSON, and the OpenAPI
 * document describes the tenants' API.
 */
import { Operator, Tokens } from "@agent-runtime/accounts"
import { DatabaseHealth } from "@agent-runtime/store"
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Metrics from "../Metrics.ts"
import { operatorOnly } from "./Authentication.ts"
import * as Errors from "./Errors.ts"

/** Where the metrics are served. */
export const path = "/v1/admin/metrics"

/** The text format's version 0.0.4, which every Prometheus reads. */
const contentType = "text/plain; version=0.0.4; charset=utf-8"

export const layer: Layer.Layer<
  never,
  never,
  Metrics.Metrics | Operator.Operator | Tokens.Tokens | DatabaseHealth.DatabaseHealth
> = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const metrics = yield* Metrics.Metrics
    const operator = yield* Operator.Operator
    const tokens = yield* Tokens.Tokens
    const health = yield* DatabaseHealth.DatabaseHealth
    yield* router.get(
      path,
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        // The bearer scheme as the API reads it: whatever follows its 7 characters.
        yield* operatorOnly(operator, tokens, (request.headers.authorization ?? "").slice(7))
        return HttpServerResponse.text(yield* metrics.scrape, { contentType })
      }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.map(Errors.failureOf(health, "GET", cause), (error) => {
            const { body, headers, status } = Errors.answerOf(error)
            return HttpServerResponse.unsafeJson(body, headers === undefined ? { status } : { status, headers })
          })
        )
      )
    )
  })
)
