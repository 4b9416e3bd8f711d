/**
 * `/mcp`: the account's MCP server (`HostedMcp`) for a caller with a bearer
 * API key or an OAuth access token issued for this resource (its audience
 * `{issuer}/mcp`; a token bound to another resource is refused). Without
 * one, 401 with `WWW-Authenticate` naming the resource's metadata (RFC 9728),
 * where MCP clients start signing in.
 */
import { Tokens } from "@agent-runtime/accounts"
import { Token } from "@agent-runtime/domain"
import { HostedMcp } from "@agent-runtime/mcp"
import { AuthorizationServer, OAuthGrants } from "@agent-runtime/oauth"
import { PersistenceError } from "@agent-runtime/store"
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer, Option } from "effect"

export const layer: Layer.Layer<
  never,
  never,
  HostedMcp.HostedMcp | Tokens.Tokens | OAuthGrants.OAuthGrants | AuthorizationServer.AuthorizationServer
> = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const mcp = yield* HostedMcp.HostedMcp
    const tokens = yield* Tokens.Tokens
    const grants = yield* OAuthGrants.OAuthGrants
    const server = yield* AuthorizationServer.AuthorizationServer

    const unauthorized = (error: string, tokenSent: boolean) =>
      Effect.map(server.issuer, (issuer) =>
        HttpServerResponse.unsafeJson({ error, code: "UNAUTHORIZED" }, {
          status: 401,
          headers: {
            "www-authenticate": `Bearer realm="agent-runtime", ` +
              `resource_metadata="${issuer}/.well-known/oauth-protected-resource/mcp", ` +
              `scope="${AuthorizationServer.scope}"` +
              (tokenSent ? `, error="invalid_token", error_description="${error}"` : "")
          }
        }))

    /** Whether the token is a live API key, or a live access token for this resource. */
    const accepted = (token: string) =>
      Effect.gen(function*() {
        if (token.startsWith(Token.apiKeyPrefix)) return Option.isSome(yield* tokens.authenticate(token))
        const holder = yield* grants.authenticate(token)
        return Option.isSome(holder) && holder.value.audience === (yield* server.resource)
      }).pipe(PersistenceError.orDie)

    const handler = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const token = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? "")?.[1]
      if (token === undefined) return yield* unauthorized("missing bearer token", false)
      if (!(yield* accepted(token))) return yield* unauthorized("invalid, expired or revoked token", true)
      const web = yield* Effect.orDie(HttpServerRequest.toWeb(request))
      return HttpServerResponse.fromWeb(yield* mcp.handle(web, token))
    })
    yield* router.post("/mcp", handler)
    // No stream to open: the server sends nothing unasked (see docs/mcp.md), so as the transport specifies.
    yield* router.get(
      "/mcp",
      Effect.succeed(
        HttpServerResponse.unsafeJson({
          error: "this MCP server opens no stream: POST requests",
          code: "METHOD_NOT_ALLOWED"
        }, {
          status: 405,
          headers: { allow: "POST, DELETE" }
        })
      )
    )
    yield* router.del("/mcp", handler)
  })
)
