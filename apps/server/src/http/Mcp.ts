/**
 * `/mcp`: the account's MCP server (`HostedMcp`) for a caller with a bearer
 * API key; without a live one, 401 with `WWW-Authenticate`, as the REST API
 * answers.
 */
import { Tokens } from "@agent-runtime/accounts"
import type { ApiError } from "@agent-runtime/domain"
import { HostedMcp } from "@agent-runtime/mcp"
import { PersistenceError } from "@agent-runtime/store"
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer } from "effect"
import { apiKey } from "./Authentication.ts"

const unauthorized = (error: string) =>
  HttpServerResponse.unsafeJson({ error, code: "UNAUTHORIZED" }, {
    status: 401,
    headers: { "www-authenticate": `Bearer realm="agent-runtime", error="invalid_token"` }
  })

export const layer: Layer.Layer<never, never, HostedMcp.HostedMcp | Tokens.Tokens> = HttpApiBuilder.Router.use((
  router
) =>
  Effect.gen(function*() {
    const mcp = yield* HostedMcp.HostedMcp
    const tokens = yield* Tokens.Tokens
    const handler = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const token = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? "")?.[1]
      if (token === undefined) return unauthorized("missing bearer token")
      const known = yield* Effect.either(PersistenceError.orDie(apiKey(tokens, token)))
      if (known._tag === "Left") return unauthorized((known.left as ApiError.Unauthorized).error)
      const web = yield* Effect.orDie(HttpServerRequest.toWeb(request))
      return HttpServerResponse.fromWeb(yield* mcp.handle(web, token))
    })
    yield* router.post("/mcp", handler)
    yield* router.get("/mcp", handler)
    yield* router.del("/mcp", handler)
  })
)
