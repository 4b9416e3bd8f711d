/**
 * The security middlewares: API keys, OAuth access tokens, the operator
 * token, browser tokens (on their agent's read routes only), the console's
 * session cookie, and agent tokens. A database fault
 * while checking a key or a tenant is the defect of its cause
 * (`PersistenceError.orDie`), answered as the API answers any.
 */
import { ConsoleSessions, Operator, Tenants, Tokens } from "@agent-runtime/accounts"
import { Agents, BrowserTokens } from "@agent-runtime/agent"
import { ApiError, Auth, type Session, Token } from "@agent-runtime/domain"
import { OAuthGrants } from "@agent-runtime/oauth"
import { PersistenceError } from "@agent-runtime/store"
import { HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Option, Redacted } from "effect"

const missing = new ApiError.Unauthorized({ error: "missing bearer token" })
const invalid = new ApiError.Unauthorized({ error: "invalid or revoked token" })

const browserRoutePattern = /^\/v1\/agents\/([^/]+)\/(events|state|history|inputs)$/

/**
 * The agent and scope of a route a browser token may read (any method; the
 * token is taken on GET only): `/v1/agents/{id}/events`, `state`, `history`,
 * `inputs`. CORS is granted on these routes and no others.
 */
export const browserRoute = (
  url: string
): Option.Option<{ readonly agentId: string; readonly scope: Session.BrowserScope }> => {
  const query = url.indexOf("?")
  const match = browserRoutePattern.exec(query === -1 ? url : url.slice(0, query))
  if (match === null) return Option.none()
  try {
    return Option.some({ agentId: decodeURIComponent(match[1]!), scope: match[2] as Session.BrowserScope })
  } catch {
    return Option.none()
  }
}

/** The principal of an API key: its tenant, or 401 for a key that is not live. */
export const apiKey = (tokens: Tokens.Tokens["Type"], secret: string) =>
  Effect.flatMap(tokens.authenticate(secret), (key) =>
    Option.isNone(key)
      ? Effect.fail(invalid)
      : Effect.succeed(
        { tenantId: key.value.tenantId, via: "token", tokenId: Option.some(key.value.tokenId) } satisfies Auth.Principal
      ))

/** The principal of an OAuth access token: its grant's tenant, or 401 for a token that is not live. */
export const oauthToken = (grants: OAuthGrants.OAuthGrants["Type"], secret: string) =>
  Effect.flatMap(grants.authenticate(secret), (holder) =>
    Option.isNone(holder)
      ? Effect.fail(invalid)
      : Effect.succeed(
        {
          tenantId: holder.value.tenantId,
          via: "oauth",
          tokenId: Option.none(),
          login: holder.value.login ?? undefined
        } satisfies Auth.Principal
      ))

/** An API key or an OAuth access token, told apart by the key's prefix. */
export const bearerToken = (
  tokens: Tokens.Tokens["Type"],
  grants: OAuthGrants.OAuthGrants["Type"],
  secret: string
) => secret.startsWith(Token.apiKeyPrefix) ? apiKey(tokens, secret) : oauthToken(grants, secret)

/** An API key checked by the statement that reads what it asks for: one round trip instead of two. */
export const apiKeyCaller = (tokens: Tokens.Tokens["Type"], secret: string): Agents.Caller => ({
  tenant: tokens.tenantQuery(secret),
  refused: invalid
})

const browserOnly = new ApiError.Forbidden({
  error: "a browser token reads only GET /v1/agents/{id}/events, state, history and inputs of its own agent"
})

const consoleHeaderMissing = new ApiError.Forbidden({
  error: `a console session's requests that change something must send the ${Auth.consoleHeader}: 1 header`
})

/** What a console session may send without the console's header: reads. */
const safeMethods = new Set(["GET", "HEAD", "OPTIONS"])

export const layer: Layer.Layer<
  Auth.Authentication,
  never,
  | Operator.Operator
  | Tokens.Tokens
  | Tenants.Tenants
  | BrowserTokens.BrowserTokens
  | ConsoleSessions.ConsoleSessions
  | OAuthGrants.OAuthGrants
> = Layer.effect(
  Auth.Authentication,
  Effect.gen(function*() {
    const operator = yield* Operator.Operator
    const tokens = yield* Tokens.Tokens
    const tenants = yield* Tenants.Tenants
    const browserTokens = yield* BrowserTokens.BrowserTokens
    const sessions = yield* ConsoleSessions.ConsoleSessions
    const grants = yield* OAuthGrants.OAuthGrants

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

    /** A browser token: genuine and unexpired (else 401), on a route its grant covers (else 403). */
    const asBrowser = (secret: string) =>
      Effect.gen(function*() {
        const grant = browserTokens.verify(secret)
        if (Option.isNone(grant)) return yield* new ApiError.Unauthorized({ error: "invalid or expired browser token" })
        const request = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
        if (Option.isNone(request) || request.value.method !== "GET") return yield* browserOnly
        const route = browserRoute(request.value.url)
        if (Option.isNone(route)) return yield* browserOnly
        if (route.value.agentId !== grant.value.agentId) {
          return yield* new ApiError.Forbidden({ error: "this browser token is for another agent" })
        }
        if (!grant.value.scopes.includes(route.value.scope)) {
          return yield* new ApiError.Forbidden({ error: `this browser token has no ${route.value.scope} scope` })
        }
        return {
          tenantId: grant.value.tenantId,
          via: "token",
          tokenId: Option.none(),
          browser: grant.value
        } satisfies Auth.Principal
      })

    /** The console's session: live (else 401), and a change only with the console's header (else 403). */
    const asConsole = (secret: string) =>
      Effect.gen(function*() {
        const session = yield* sessions.authenticate(secret)
        if (Option.isNone(session)) {
          return yield* new ApiError.Unauthorized({ error: "the console session has ended: sign in again" })
        }
        const request = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
        if (
          Option.isNone(request) ||
          (!safeMethods.has(request.value.method) && request.value.headers[Auth.consoleHeader] !== "1")
        ) return yield* consoleHeaderMissing
        return {
          tenantId: session.value.tenantId,
          via: "console",
          tokenId: Option.none(),
          login: session.value.login ?? undefined,
          name: session.value.name ?? undefined
        } satisfies Auth.Principal
      })

    const cookieOf = Effect.map(
      Effect.serviceOption(HttpServerRequest.HttpServerRequest),
      (request) => Option.flatMapNullable(request, (request) => request.cookies[Auth.sessionCookie])
    )

    return Auth.Authentication.of({
      // Tried first; a bearer token, when sent, is what the request is taken by (see `Auth.Authentication`).
      console: (cookie) =>
        Effect.gen(function*() {
          const request = yield* Effect.serviceOption(HttpServerRequest.HttpServerRequest)
          const bearerSent = Option.exists(request, (request) => request.headers.authorization !== undefined)
          const secret = Redacted.value(cookie)
          if (secret === "" || bearerSent) return yield* missing
          return yield* asConsole(secret)
        }).pipe(PersistenceError.orDie),
      bearer: (token) =>
        Effect.gen(function*() {
          const secret = Redacted.value(token)
          if (secret === "") {
            // No bearer token: a session cookie's own answer (ended, or a change without the header), if sent.
            const cookie = yield* cookieOf
            return yield* Option.isSome(cookie) && cookie.value !== "" ? asConsole(cookie.value) : missing
          }
          if (BrowserTokens.isToken(secret)) return yield* asBrowser(secret)
          if (operator.verify(secret)) return yield* asOperator
          return yield* bearerToken(tokens, grants, secret)
        }).pipe(PersistenceError.orDie)
    })
  })
)

export const layerAgent: Layer.Layer<Auth.AgentAuthentication, never, Agents.Agents> = Layer.effect(
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

/** The operator token, else 403 for a live API key and 401 for anything else: what an operator route asks. */
export const operatorOnly = (operator: Operator.Operator["Type"], tokens: Tokens.Tokens["Type"], secret: string) =>
  Effect.gen(function*() {
    if (secret === "") return yield* missing
    if (operator.verify(secret)) return
    // A live API key is a known caller without the right; anything else is no caller at all.
    const key = yield* tokens.authenticate(secret)
    return yield* Option.isSome(key)
      ? new ApiError.Forbidden({ error: "operator routes need the operator token" })
      : invalid
  }).pipe(PersistenceError.orDie)

export const layerOperator: Layer.Layer<Auth.OperatorAuthentication, never, Operator.Operator | Tokens.Tokens> = Layer
  .effect(
    Auth.OperatorAuthentication,
    Effect.gen(function*() {
      const operator = yield* Operator.Operator
      const tokens = yield* Tokens.Tokens
      return Auth.OperatorAuthentication.of({
        operator: (token) => operatorOnly(operator, tokens, Redacted.value(token))
      })
    })
  )
