/**
 * Who is calling. The security middlewares are declared here, with the API;
 * the server implements them.
 */
import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import type { Option } from "effect"
import { Context, Schema } from "effect"
import * as ApiError from "./ApiError.ts"
import type { Via } from "./Me.ts"

/**
 * The operator names the tenant it acts for with this header on tenant
 * routes; an API key always acts for its own tenant.
 */
export const tenantHeader = "x-agent-runtime-tenant"

export interface Principal {
  readonly tenantId: string
  readonly via: Via
  /** The API key used, when the caller used one. */
  readonly tokenId: Option.Option<string>
}

/** The tenant a request acts for, provided by `Authentication`. */
export class CurrentPrincipal extends Context.Tag("@agent-runtime/domain/CurrentPrincipal")<
  CurrentPrincipal,
  Principal
>() {}

const bearer = HttpApiSecurity.bearer.pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    `An API key (art_...), or the operator token with the \`${tenantHeader}\` header naming the tenant.`
  )
)

/** Tenant routes: an API key, or the operator token acting for a named tenant. */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: Schema.Union(ApiError.Unauthorized.Wire, ApiError.InvalidRequest.Wire, ApiError.NotFound.Wire),
  provides: CurrentPrincipal,
  security: { bearer }
}) {}

export interface AgentPrincipal {
  readonly tenantId: string
  readonly agentId: string
}

/** The agent an agent token names, provided by `AgentAuthentication` on `/clients/{id}` routes. */
export class CurrentAgent extends Context.Tag("@agent-runtime/domain/CurrentAgent")<CurrentAgent, AgentPrincipal>() {}

/**
 * `/clients/{id}` routes: only that agent's own token, and never from a
 * browser (a request with an Origin header is refused).
 */
export class AgentAuthentication extends HttpApiMiddleware.Tag<AgentAuthentication>()("AgentAuthentication", {
  failure: Schema.Union(ApiError.Unauthorized.Wire, ApiError.Forbidden.Wire),
  provides: CurrentAgent,
  security: {
    agent: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "The agent's own token (aat_...), from POST /v1/agents.")
    )
  }
}) {}

/** Operator routes: only the operator token. */
export class OperatorAuthentication extends HttpApiMiddleware.Tag<OperatorAuthentication>()("OperatorAuthentication", {
  failure: Schema.Union(ApiError.Unauthorized.Wire, ApiError.Forbidden.Wire),
  security: {
    operator: HttpApiSecurity.bearer.pipe(HttpApiSecurity.annotate(OpenApi.Description, "The operator token."))
  }
}) {}
