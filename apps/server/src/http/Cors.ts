/**
 * CORS for the routes a browser token reads, and for no others: GET of
 * `/v1/agents/{id}/events`, `state`, `history` and `inputs` from any origin.
 * Their preflight (OPTIONS) is answered 204 here, before routing, and their
 * answers (errors too) carry `Access-Control-Allow-Origin: *`. Credentials
 * travel as a bearer header, never as cookies, so `*` is enough. Every other
 * route's preflight goes on to the router and is refused (404, no CORS
 * headers), so a page cannot call it.
 */
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"
import { browserRoute } from "./Authentication.ts"

/** How long a browser may keep a preflight's answer (browsers cap it lower: Chrome at 2 hours). */
const maxAgeSeconds = 7200

const preflight = HttpServerResponse.empty({
  status: 204,
  headers: {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET",
    "access-control-allow-headers": "authorization, last-event-id, content-type",
    "access-control-max-age": String(maxAgeSeconds)
  }
})

const withAnswerHeaders = HttpApp.appendPreResponseHandler((_, response) =>
  Effect.succeed(HttpServerResponse.setHeaders(response, {
    "access-control-allow-origin": "*",
    // 503 and 429 say when to come back.
    "access-control-expose-headers": "retry-after"
  }))
)

/**
 * Around the whole app, outside the API's own middleware: the answer is
 * written before it would come back here, so the headers go on in a
 * pre-response handler, which also sees the API's error answers.
 */
export const middleware = <E, R>(
  app: HttpApp.Default<E, R>
): HttpApp.Default<E, R | HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    if (request.method !== "OPTIONS" && request.method !== "GET") return app
    if (Option.isNone(browserRoute(request.url))) return app
    return request.method === "OPTIONS"
      ? Effect.succeed(preflight)
      : Effect.zipRight(withAnswerHeaders, app)
  })
