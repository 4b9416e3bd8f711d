/**
 * Who is calling. The security middlewares are declared here, with the API;
 * the server implements them.
 */
import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import type { Option } from "effect"
import { Context, Schema } from "effect"
import * as ApiError from "./ApiError.ts"
import type { Via } from "./Me.ts"
import type { BrowserScope } from "./Session.ts"

/** The console session's cookie. */
export const sessionCookie = "ar_session"

/** Console sessions' mutations must carry this header, with value `1`: a cross-site form cannot send it. */
export const consoleHeader = "x-agent-runtime-console"

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
  /** Who signed in, for a console session or an OAuth grant: as they signed in, and their display name. */
  readonly login?: string | undefined
  readonly name?: string | undefined
  /**
   * Present when the caller is a browser token: what it may see of its one
   * agent. `Authentication` has already limited it to that agent's read
   * routes within its scopes; the handlers narrow what they answer.
   */
  readonly browser?: BrowserGrant | undefined
}

/** What a browser token lets its holder see (see POST /v1/agents/{id}/browser-tokens). */
export interface BrowserGrant {
  readonly agentId: string
  readonly scopes: ReadonlyArray<BrowserScope>
  /** The event types shown; `"default"` is every type but the runtime's own (`Events.RuntimeEventType`). */
  readonly events: "default" | ReadonlyArray<string>
  readonly redact: ReadonlyArray<"usage.cost">
  /** Who the token was made for, as its issuer named them. */
  readonly subject: Option.Option<string>
}

/** The tenant a request acts for, provided by `Authentication`. */
export class CurrentPrincipal extends Context.Tag("@agent-runtime/domain/CurrentPrincipal")<
  CurrentPrincipal,
  Principal
>() {}

const bearer = HttpApiSecurity.bearer.pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    `An API key (art_...), an OAuth access token, or the operator token with the \`${tenantHeader}\` header ` +
      "naming the tenant. " +
      "A browser token (abt_..., from POST /v1/agents/{id}/browser-tokens) is taken only on GET of its agent's " +
      "events, state, history and inputs, within its scopes (403 elsewhere)."
  )
)

const console = HttpApiSecurity.apiKey({ in: "cookie", key: sessionCookie }).pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    `The console's session. Requests other than GET, HEAD and OPTIONS must also send \`${consoleHeader}: 1\`.`
  )
)

/**
 * Tenant routes: an API key, an OAuth access token, or the operator token
 * acting for a named tenant; a browser token on its agent's read routes only
 * (403 elsewhere); the console's session cookie.
 */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: Schema.Union(
    ApiError.Unauthorized.Wire,
    ApiError.Forbidden.Wire,
    ApiError.InvalidRequest.Wire,
    ApiError.NotFound.Wire
  ),
  provides: CurrentPrincipal,
  // The console's cookie is tried first and gives way to a bearer token when one is sent, so the bearer
  // scheme's answer is the one a request without a live session gets.
  security: { console, bearer }
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
