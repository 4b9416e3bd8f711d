/**
 * The OAuth 2.1 authorization server coding agents sign in with for `/mcp`:
 * `oidc-provider`, on our tables (`internal/adapter.ts`), our signing keys
 * (`oauth_keys`, sealed, rotated as the identity keys are) and our consent
 * page. What it allows: dynamic client registration (RFC 7591), the
 * authorization code flow with PKCE S256 only and exact redirect URIs,
 * access tokens of one hour bound to the resource (RFC 8707: this service's
 * `/mcp`), refresh tokens of 30 days that rotate on every use, a reused one
 * revoking its grant. Its metadata is served as RFC 8414 says.
 *
 * Its routes take Node's request and response as they came (the library is
 * a Koa application); the HTTP edge hands them over and writes nothing.
 */
import { IdentityKeys } from "@agent-runtime/identity"
import type { PersistenceError } from "@agent-runtime/store"
import { SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Data, Duration, Effect, Layer, Schedule } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { KoaContextWithOIDC } from "oidc-provider"
import { errors, Provider } from "oidc-provider"
import { makeAdapterClass } from "./internal/adapter.ts"
import * as OAuthGrants from "./OAuthGrants.ts"
import * as Pages from "./Pages.ts"

/** The one scope: act as the account. */
export const scope = "account"
/** The protected resource's path: the MCP server. */
export const resourcePath = "/mcp"

export const accessTokenLifetime = Duration.hours(1)
export const refreshTokenLifetime = Duration.days(30)

export class OAuthError extends Data.TaggedError("OAuthError")<{ readonly message: string }> {}

/** What the consent page shows and decides on. */
export interface Consent {
  readonly uid: string
  readonly clientId: string
  /** The name the client registered with: unverified. */
  readonly clientName: string
  /** Where the authorization goes: a web app's scheme and host, a native app's whole redirect URI. */
  readonly destination: string
  readonly scopes: ReadonlyArray<string>
}

export interface Service {
  /** This server's issuer (the service's base URL). */
  readonly issuer: Effect.Effect<string>
  /** The resource tokens are bound to: `{issuer}/mcp`. */
  readonly resource: Effect.Effect<string>
  /** RFC 9728's metadata of `/mcp`. */
  readonly resourceMetadata: Effect.Effect<Record<string, unknown>>
  /**
   * Serves one of the server's own routes (`/oauth/*`, its metadata) on Node's request and response, the
   * metadata at RFC 8414's path as at OpenID's.
   */
  readonly handle: (request: IncomingMessage, response: ServerResponse) => Effect.Effect<void>
  /** The authorization waiting on the consent page, from its interaction cookie; fails for none. */
  readonly consent: (request: IncomingMessage, response: ServerResponse) => Effect.Effect<Consent, OAuthError>
  /**
   * Ends the interaction: allowed for the tenant (recording the grant, who allowed it included) or denied.
   * Answers where the browser goes next (back to the authorization endpoint, which sends it to the client).
   */
  readonly decide: (
    request: IncomingMessage,
    response: ServerResponse,
    decision:
      | { readonly _tag: "Allow"; readonly tenantId: string; readonly login: string | null }
      | { readonly _tag: "Deny" }
  ) => Effect.Effect<string, OAuthError | PersistenceError.PersistenceError>
  /** Rotates the server's signing keys, as the identity keys rotate. */
  readonly rotateKeys: IdentityKeys.Service["rotate"]
}

export class AuthorizationServer extends Context.Tag("@agent-runtime/oauth/AuthorizationServer")<
  AuthorizationServer,
  Service
>() {}

export interface Options {
  /** The service's base URL (PUBLIC_URL, else the REST listener), once known. */
  readonly issuer: Effect.Effect<string>
}

const grantableScopes = ["openid", "offline_access", scope]

const seconds = (duration: Duration.Duration) => Math.round(Duration.toSeconds(duration))

/** A native app's redirect (loopback or a custom scheme) is shown whole; a web app's by its origin. */
const destinationOf = (redirectUri: string) => {
  try {
    const url = new URL(redirectUri)
    const loopback = url.hostname === "localhost" || url.hostname === "127.0.0.1" || url.hostname === "[::1]"
    return url.protocol === "https:" && !loopback ? url.origin : redirectUri
  } catch {
    return redirectUri
  }
}

export const make = (options: Options) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const sealer = yield* SealedSecret.Sealer
    const grants = yield* OAuthGrants.OAuthGrants
    const keys = yield* IdentityKeys.make({ table: "oauth_keys" })
    const runtime = yield* Effect.runtime<never>()
    const Adapter = makeAdapterClass(sql, sealer, runtime)
    // Every node signs its cookies alike, so an interaction begun on one node ends on another.
    const cookieKey = sealer.sign("oauth-cookies", "v1")

    const issuer = options.issuer
    const resource = Effect.map(issuer, (base) => base + resourcePath)

    const configure = (base: string, jwks: ReadonlyArray<Record<string, unknown>>) => {
      const ours = base + resourcePath
      const provider = new Provider(base, {
        adapter: Adapter,
        clients: [],
        findAccount: (_ctx, id) => Promise.resolve({ accountId: id, claims: () => Promise.resolve({ sub: id }) }),
        jwks: { keys: jwks as any },
        cookies: {
          // Named apart from other OAuth servers on the same host (cookies are shared across its ports).
          names: { session: "ar_oauth_session", interaction: "ar_oauth_interaction", resume: "ar_oauth_resume" },
          keys: [cookieKey],
          long: { httpOnly: true, sameSite: "lax", signed: true },
          short: { httpOnly: true, sameSite: "lax", signed: true }
        },
        // `account` is the resource's scope (see `getResourceServerInfo`), listed here too so clients may
        // register with it (registration checks a client's scope against this list).
        scopes: grantableScopes,
        responseTypes: ["code"],
        clientAuthMethods: ["none", "client_secret_basic", "client_secret_post"],
        clientDefaults: {
          grant_types: ["authorization_code", "refresh_token"],
          response_types: ["code"],
          token_endpoint_auth_method: "client_secret_basic",
          id_token_signed_response_alg: "EdDSA"
        },
        enabledJWA: { idTokenSigningAlgValues: ["EdDSA"] },
        pkce: { required: () => true },
        rotateRefreshToken: true,
        issueRefreshToken: (_ctx, client) => Promise.resolve(client.grantTypeAllowed("refresh_token")),
        // Every authorization asks the person, even for a client they allowed before: the only grant taken is
        // the one the consent page just made.
        loadExistingGrant: (ctx) => {
          const grantId = ctx.oidc.result?.consent?.grantId
          return typeof grantId === "string" ? ctx.oidc.provider.Grant.find(grantId) : Promise.resolve(undefined)
        },
        ttl: {
          AccessToken: seconds(accessTokenLifetime),
          AuthorizationCode: 60,
          RefreshToken: seconds(refreshTokenLifetime),
          Grant: seconds(Duration.days(365)),
          Interaction: 3600,
          Session: seconds(Duration.days(1)),
          IdToken: 3600
        },
        features: {
          devInteractions: { enabled: false },
          registration: { enabled: true },
          revocation: { enabled: true },
          userinfo: { enabled: false },
          resourceIndicators: {
            enabled: true,
            defaultResource: () => Promise.resolve(ours),
            useGrantedResource: () => Promise.resolve(true),
            getResourceServerInfo: (_ctx, indicator) => {
              if (indicator !== ours) throw new errors.InvalidTarget(`this server issues tokens for ${ours} only`)
              return Promise.resolve({
                scope,
                audience: ours,
                accessTokenTTL: seconds(accessTokenLifetime),
                accessTokenFormat: "opaque"
              })
            }
          }
        },
        routes: {
          authorization: "/oauth/authorize",
          token: "/oauth/token",
          registration: "/oauth/register",
          revocation: "/oauth/revoke",
          jwks: "/oauth/jwks",
          end_session: "/oauth/logout",
          introspection: "/oauth/introspect",
          pushed_authorization_request: "/oauth/par",
          userinfo: "/oauth/userinfo"
        },
        interactions: { url: (_ctx, interaction) => `/oauth/consent/${interaction.uid}` },
        renderError: (ctx: KoaContextWithOIDC, out) => {
          ctx.type = "html"
          ctx.body = Pages.error(out.error_description ?? out.error ?? "the request cannot be served")
          return Promise.resolve()
        }
      })
      if (base.startsWith("https:")) provider.proxy = true
      return provider
    }

    // One provider per issuer and key set: a rotation (seen within the keys' cache) makes a new one.
    let current: { readonly key: string; readonly provider: Provider } | undefined
    const provider = Effect.gen(function*() {
      const base = yield* issuer
      // The key that signs now goes first: the library signs with the first key of an algorithm.
      const signing = yield* Effect.orDie(keys.signingKey)
      const jwks = (yield* Effect.orDie(keys.privateJwks)).toSorted((a, b) =>
        Number(b.kid === signing.kid) - Number(a.kid === signing.kid)
      )
      const key = base + " " + jwks.map((jwk) => jwk.kid).join(",")
      if (current?.key !== key) current = { key, provider: configure(base, jwks as any) }
      return current.provider
    })

    const promise = <A>(f: () => Promise<A>) =>
      Effect.tryPromise({
        try: f,
        catch: (cause) =>
          new OAuthError({
            message: cause instanceof errors.OIDCProviderError
              ? cause.error_description ?? cause.message
              : "the authorization cannot be read"
          })
      })

    const handle: Service["handle"] = (request, response) =>
      Effect.gen(function*() {
        const served = yield* provider
        if (request.url?.startsWith("/.well-known/oauth-authorization-server")) {
          request.url = "/.well-known/openid-configuration"
        }
        const callback = served.callback()
        yield* Effect.async<void>((resume) => {
          const done = () => resume(Effect.void)
          response.once("finish", done)
          response.once("close", done)
          void callback(request, response)
        })
      })

    const consent: Service["consent"] = (request, response) =>
      Effect.gen(function*() {
        const served = yield* provider
        const details = yield* promise(() => served.interactionDetails(request, response))
        const clientId = String(details.params.client_id)
        const client = yield* promise(() => served.Client.find(clientId))
        if (client === undefined) return yield* new OAuthError({ message: "the application is not registered" })
        const requested = String(details.params.scope ?? "").split(" ").filter((s) => s !== "")
        return {
          uid: details.uid,
          clientId,
          clientName: client.clientName ?? clientId,
          destination: destinationOf(String(details.params.redirect_uri)),
          scopes: requested.length === 0 ? [scope] : requested
        }
      })

    const decide: Service["decide"] = (request, response, decision) =>
      Effect.gen(function*() {
        const served = yield* provider
        const details = yield* promise(() => served.interactionDetails(request, response))
        if (decision._tag === "Deny") {
          return yield* promise(() =>
            served.interactionResult(request, response, {
              error: "access_denied",
              error_description: "the person declined"
            }, { mergeWithLastSubmission: false })
          )
        }
        const clientId = String(details.params.client_id)
        const client = yield* promise(() => served.Client.find(clientId))
        if (client === undefined) return yield* new OAuthError({ message: "the application is not registered" })
        // Decided at the first prompt (signing in, when the server had no session), so it grants what was asked.
        const grant = new served.Grant({ accountId: decision.tenantId, clientId })
        const asked = String(details.params.scope ?? "").split(" ")
        const oidc = asked.filter((name) => grantableScopes.includes(name))
        if (oidc.length > 0) grant.addOIDCScope(oidc.join(" "))
        grant.addResourceScope(yield* resource, scope)
        const grantId = yield* promise(() => grant.save())
        yield* grants.record({
          id: grantId,
          tenantId: decision.tenantId,
          clientId,
          clientName: client.clientName ?? clientId,
          login: decision.login,
          scope
        })
        return yield* promise(() =>
          served.interactionResult(request, response, {
            login: { accountId: decision.tenantId },
            consent: { grantId }
          }, { mergeWithLastSubmission: false })
        )
      })

    // Expired codes, tokens and interactions are removed after a day, by whichever node gets there.
    yield* sql`DELETE FROM oauth_records WHERE expires_at < now() - interval '1 day'`.pipe(
      Effect.catchAll((cause) => Effect.logWarning("expired OAuth records not removed", cause)),
      Effect.repeat(Schedule.spaced(Duration.minutes(10))),
      Effect.forkScoped
    )

    const resourceMetadata = Effect.map(issuer, (base) => ({
      resource: base + resourcePath,
      authorization_servers: [base],
      scopes_supported: [scope],
      bearer_methods_supported: ["header"],
      resource_name: "Agent Runtime",
      resource_documentation: `${base}/docs`
    }))

    return AuthorizationServer.of({
      issuer,
      resource,
      resourceMetadata,
      handle,
      consent,
      decide,
      rotateKeys: keys.rotate
    })
  })

export const layer = (options: Options): Layer.Layer<
  AuthorizationServer,
  PersistenceError.PersistenceError,
  SqlClient.SqlClient | SealedSecret.Sealer | OAuthGrants.OAuthGrants
> => Layer.scoped(AuthorizationServer, make(options))
