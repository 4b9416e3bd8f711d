/**
 * The security middlewares: API keys and the operator token.
 */
import { Operator, Tenants, Tokens } from "@agent-runtime/accounts"
import { Agents } from "@agent-runtime/agent"
import { ApiError, Auth } from "@agent-runtime/domain"
import { HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Option, Redacted } from "effect"

const missing = new ApiError.Unauthorized({ error: "missing bearer token" })
const invalid = new ApiError.Unauthorized({ error: "invalid or revoked token" })

export const layer = Layer.effect(
  Auth.Authentication,
  Effect.gen(function*() {
    const operator = yield* Operator.Operator
    const tokens = yield* Tokens.Tokens
    const tenants = yield* Tenants.Tenants

    const asOperator = Effect.gen(function*() {
      const request = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
      const tenantId = Option.flatMapNullable(request, (request) => request.headers[Auth.tenantHeader])
      if (Option.isNone(tenantId)) {
        return yield* new ApiError.InvalidRequest({
          error: `the operator token acts for the tenant named in the ${Auth.tenantHeader} header`
        })
      }
      const tenant = yield* tenants.find(tenantId.value)
      if (Option.isNone(tenant)) return yield* new ApiError.NotFound({ error: `no tenant ${tenantId.value}` })
      return { tenantId: tenant.value.id, via: "operator", tokenId: Option.none() } satisfies Auth.Principal
    })

    return Auth.Authentication.of({
      bearer: (token) =>
        Effect.gen(function*() {
          const secret = Redacted.value(token)
          if (secret === "") return yield* missing
          if (operator.verify(secret)) return yield* asOperator
          const key = yield* tokens.authenticate(secret)
          if (Option.isNone(key)) return yield* invalid
          return { tenantId: key.value.tenantId, via: "token", tokenId: Option.some(key.value.tokenId) }
        })
    })
  })
)

export const layerAgent = Layer.effect(
  Auth.AgentAuthentication,
  Effect.gen(function*() {
    const agents = yield* Agents.Agents
    return Auth.AgentAuthentication.of({
      agent: (token) =>
        Effect.gen(function*() {
          const request = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
          if (Option.isSome(request) && request.value.headers.origin !== undefined) {
            return yield* new ApiError.Forbidden({
              error: "/clients routes refuse requests from browsers (Origin header)"
            })
          }
          const secret = Redacted.value(token)
          if (secret === "") return yield* missing
          // The route's agent: /clients/{id}/...
          const agentId = Option.match(request, {
            onNone: () => "",
            onSome: (request) => new URL(request.url, "http://x").pathname.split("/")[2] ?? ""
          })
          const agent = yield* agents.authenticateToken(secret, decodeURIComponent(agentId))
          if (Option.isNone(agent)) return yield* invalid
          return agent.value
        })
    })
  })
)

export const layerOperator = Layer.effect(
  Auth.OperatorAuthentication,
  Effect.gen(function*() {
    const operator = yield* Operator.Operator
    const tokens = yield* Tokens.Tokens
    return Auth.OperatorAuthentication.of({
      operator: (token) =>
        Effect.gen(function*() {
          const secret = Redacted.value(token)
          if (secret === "") return yield* missing
          if (operator.verify(secret)) return
          // A live API key is a known caller without the right; anything else is no caller at all.
          const key = yield* tokens.authenticate(secret)
          return yield* Option.isSome(key)
            ? new ApiError.Forbidden({ error: "operator routes need the operator token" })
            : invalid
        })
    })
  })
)
