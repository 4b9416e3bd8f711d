/**
 * OAuth for coding agents and the console's sign-in, outside the OpenAPI
 * document (like `/mcp`):
 *
 * - `/.well-known/oauth-protected-resource[/mcp]` (RFC 9728) names this
 *   service as `/mcp`'s authorization server; `/.well-known/oauth-authorization-server`
 *   (RFC 8414) and `/oauth/*` are `AuthorizationServer`'s, given Node's
 *   request and response as they came.
 * - `/oauth/consent/{uid}` asks the signed-in person to allow the client
 *   (sending them to sign in first).
 * - `/sign-in` signs a person in: with the identity provider, an API key, or
 *   a one-time link from the operator; `/sign-out` ends the session. The
 *   session is the `ar_session` cookie: HttpOnly, SameSite=Lax, Secure
 *   outside loopback, set once for each of `sessionCookiePaths` (never for
 *   `/`, so `/clients/*` is not sent it); signing out expires each of them.
 *
 * URLs that carry a secret (a sign-in link, a provider's code) are logged
 * without it.
 */
import { ConsoleSessions, Tenants, Tokens } from "@agent-runtime/accounts"
import { Auth } from "@agent-runtime/domain"
import { AuthorizationServer, Pages, SignIn } from "@agent-runtime/oauth"
import { PersistenceError, SealedSecret } from "@agent-runtime/store"
import { Cookies, HttpApiBuilder, HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Duration, Effect, type Layer, Option } from "effect"
import * as Tracing from "../Tracing.ts"

/** A path on this service to go back to after signing in; anything else goes to the sign-in page. */
const safeNext = (next: string | undefined) =>
  next !== undefined && next.startsWith("/") && !next.startsWith("//") && !next.startsWith("/\\") ? next : "/sign-in"

const isLoopback = (url: string) => ["127.0.0.1", "localhost", "[::1]"].includes(new URL(url).hostname)

const page = (html: string, status = 200) => HttpServerResponse.text(html, { status, headers: Pages.headers })

const seeOther = (location: string) =>
  HttpServerResponse.empty({ status: 303, headers: { location, "cache-control": "no-store" } })

/**
 * The paths the session cookie is set for, one cookie each: the API, the consent page, the sign-in page (it
 * sends a signed-in person on), sign-out and the console's pages. Not `/`: then a browser would also send it
 * to `/clients/*`, whose callers are applications with their own tokens, and which must never receive a
 * person's session; nor to any other path that has no use for it.
 */
const sessionCookiePaths = ["/v1", "/oauth", "/sign-in", "/sign-out", "/console"] as const

/**
 * `response` with the session cookie once for each of `paths`, each its own `Set-Cookie` line. `Cookies`
 * keeps one cookie per key, and `HttpServerResponse.setCookie` keys by name (so a second path would replace
 * the first); these are keyed by path instead, and the platform writes each as a line of its own. The answer
 * stays the platform's (its status and headers logged, measured and traced as any other).
 */
const withSessionCookies = (
  response: HttpServerResponse.HttpServerResponse,
  value: string,
  options: Cookies.Cookie["options"],
  paths: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const byPath: Record<string, Cookies.Cookie> = {}
    for (const path of paths) byPath[path] = yield* Cookies.makeCookie(Auth.sessionCookie, value, { ...options, path })
    return HttpServerResponse.mergeCookies(response, Cookies.fromReadonlyRecord(byPath))
  })

export const layer: Layer.Layer<
  never,
  never,
  | AuthorizationServer.AuthorizationServer
  | SignIn.SignIn
  | ConsoleSessions.ConsoleSessions
  | Tenants.Tenants
  | Tokens.Tokens
  | SealedSecret.Sealer
> = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const server = yield* AuthorizationServer.AuthorizationServer
    const signIn = yield* SignIn.SignIn
    const sessions = yield* ConsoleSessions.ConsoleSessions
    const tenants = yield* Tenants.Tenants
    const tokens = yield* Tokens.Tokens
    const sealer = yield* SealedSecret.Sealer

    const cookieOptions = Effect.map(server.issuer, (issuer) => ({
      httpOnly: true,
      sameSite: "lax" as const,
      // Outside loopback the service is on https; on loopback (development) it is plain http, where not every
      // client sends a Secure cookie back.
      secure: !isLoopback(issuer)
    }))

    /** A started session's cookie, and the way on. */
    const signedIn = (
      tenant: { readonly id: string; readonly login?: string | undefined },
      person: { readonly login: string | null; readonly name: string | null },
      method: ConsoleSessions.Method,
      next: string
    ) =>
      Effect.gen(function*() {
        const started = yield* sessions.start({ tenantId: tenant.id, ...person, method })
        return yield* withSessionCookies(seeOther(next), started.secret, {
          ...(yield* cookieOptions),
          maxAge: Duration.seconds(started.expiresAt - Math.floor(Date.now() / 1000))
        }, sessionCookiePaths)
      })

    const session = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const secret = request.cookies[Auth.sessionCookie]
      return secret === undefined ? Option.none() : yield* sessions.authenticate(secret)
    })

    const raw = Effect.map(HttpServerRequest.HttpServerRequest, (request) => ({
      request: NodeHttpServerRequest.toIncomingMessage(request),
      response: NodeHttpServerRequest.toServerResponse(request)
    }))

    /** The authorization server's own routes: it writes the response itself. */
    const provider = Effect.gen(function*() {
      const { request, response } = yield* raw
      yield* server.handle(request, response)
      return HttpServerResponse.empty()
    })

    // The pages' own forms; the API refuses form bodies, so the text is read and parsed here.
    const form = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const type = request.headers["content-type"]?.split(";")[0]!.trim().toLowerCase()
      if (type !== "application/x-www-form-urlencoded") return new Map<string, string>()
      return new Map(new URLSearchParams(yield* request.text))
    }).pipe(Effect.orElseSucceed(() => new Map<string, string>()))

    /** A form posted from another site (login or consent forgery) is refused. */
    const sameOrigin = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const origin = request.headers.origin
      if (origin === undefined || origin === "null") return origin === undefined
      const host = request.headers.host
      return host !== undefined && (origin === `http://${host}` || origin === `https://${host}`)
    })

    const csrfFor = (sessionId: string, uid: string) => sealer.sign("oauth-consent", `${sessionId}:${uid}`)

    const consentPage = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const person = yield* session
      if (Option.isNone(person)) {
        return seeOther(`/sign-in?next=${encodeURIComponent(new URL(request.url, "http://x").pathname)}`)
      }
      const { request: incoming, response } = yield* raw
      const consent = yield* Effect.either(server.consent(incoming, response))
      if (consent._tag === "Left") return page(Pages.error(consent.left.message), 400)
      const tenant = yield* tenants.get(person.value.tenantId).pipe(Effect.orDie)
      return page(Pages.consent({
        action: `/oauth/consent/${consent.right.uid}`,
        csrf: csrfFor(person.value.id, consent.right.uid),
        clientName: consent.right.clientName,
        destination: consent.right.destination,
        tenant: tenant.name,
        login: person.value.login
      }))
    })

    const consentDecision = Effect.gen(function*() {
      const person = yield* session
      const fields = yield* form
      if (Option.isNone(person) || !(yield* sameOrigin)) return page(Pages.error("sign in again to allow access"), 403)
      const { request: incoming, response } = yield* raw
      const consent = yield* Effect.either(server.consent(incoming, response))
      if (consent._tag === "Left") return page(Pages.error(consent.left.message), 400)
      if (!sealer.verify("oauth-consent", `${person.value.id}:${consent.right.uid}`, fields.get("csrf") ?? "")) {
        return page(Pages.error("this page is out of date: start again from your application"), 403)
      }
      const decided = yield* Effect.either(server.decide(
        incoming,
        response,
        fields.get("decision") === "allow"
          ? { _tag: "Allow", tenantId: person.value.tenantId, login: person.value.login }
          : { _tag: "Deny" }
      ))
      if (decided._tag === "Left") {
        return decided.left._tag === "OAuthError"
          ? page(Pages.error(decided.left.message), 400)
          : yield* Effect.die(decided.left)
      }
      return seeOther(decided.right)
    })

    const signInPage = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const url = new URL(request.url, "http://x")
      const next = safeNext(url.searchParams.get("next") ?? undefined)
      const person = yield* session
      if (Option.isSome(person) && next !== "/sign-in") return seeOther(next)
      if (Option.isSome(person)) {
        const tenant = yield* tenants.get(person.value.tenantId).pipe(Effect.orDie)
        return page(Pages.signedIn({ tenant: tenant.name, login: person.value.login }))
      }
      return page(Pages.signIn({
        next,
        provider: Option.getOrNull(Option.map(signIn.label, (label) => ({
          label,
          href: `/sign-in/start?next=${encodeURIComponent(next)}`
        }))),
        error: url.searchParams.get("error")
      }))
    })

    const redirectUri = Effect.map(server.issuer, (issuer) => `${issuer}/sign-in/callback`)

    const startSignIn = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const next = safeNext(new URL(request.url, "http://x").searchParams.get("next") ?? undefined)
      const started = yield* Effect.either(signIn.start({ redirectUri: yield* redirectUri, next }))
      if (started._tag === "Left") return page(Pages.error(started.left.message), 503)
      return yield* HttpServerResponse.setCookie(
        seeOther(started.right.url),
        SignIn.attemptCookie,
        started.right.cookie,
        {
          ...(yield* cookieOptions),
          path: "/sign-in",
          maxAge: Duration.minutes(10)
        }
      )
    })

    const refused = (message: string, next: string) =>
      seeOther(`/sign-in?error=${encodeURIComponent(message)}&next=${encodeURIComponent(next)}`)

    const finishSignIn = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const finished = yield* Effect.either(signIn.finish({
        callbackUrl: new URL(request.url, "http://x"),
        redirectUri: yield* redirectUri,
        cookie: request.cookies[SignIn.attemptCookie]
      }))
      if (finished._tag === "Left") return refused(finished.left.message, "/sign-in")
      const { next, person } = finished.right
      const tenant = yield* tenants.findByLogin(person.login)
      if (Option.isNone(tenant)) {
        return refused(`no account belongs to ${person.login}: ask the operator to make one with that login`, next)
      }
      return yield* signedIn(tenant.value, person, "oidc", next)
    }).pipe(withSecretUrl)

    const keySignIn = Effect.gen(function*() {
      const fields = yield* form
      const next = safeNext(fields.get("next"))
      if (!(yield* sameOrigin)) return page(Pages.error("sign in from this service's own page"), 403)
      const key = yield* tokens.authenticate(fields.get("key") ?? "")
      if (Option.isNone(key)) return refused("that is not a live API key", next)
      const tenant = yield* tenants.get(key.value.tenantId).pipe(Effect.orDie)
      return yield* signedIn(tenant, { login: tenant.login ?? null, name: null }, "key", next)
    })

    const linkSignIn = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const secret = decodeURIComponent(new URL(request.url, "http://x").pathname.split("/").pop() ?? "")
      const tenantId = yield* sessions.useLink(secret)
      if (Option.isNone(tenantId)) return refused("that sign-in link was used already or has expired", "/sign-in")
      const tenant = yield* tenants.get(tenantId.value).pipe(Effect.orDie)
      return yield* signedIn(tenant, { login: tenant.login ?? null, name: null }, "link", "/sign-in")
    }).pipe(withSecretUrl)

    const signOut = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (!(yield* sameOrigin)) return page(Pages.error("sign out from this service's own page"), 403)
      const secret = request.cookies[Auth.sessionCookie]
      if (secret !== undefined) yield* sessions.end(secret)
      // Each path's cookie, and one set for `/` before the cookie had its paths.
      return yield* withSessionCookies(seeOther("/sign-in"), "", { ...(yield* cookieOptions), maxAge: 0 }, [
        ...sessionCookiePaths,
        "/"
      ])
    })

    const resourceMetadata = Effect.map(server.resourceMetadata, (metadata) =>
      HttpServerResponse.unsafeJson(metadata, {
        headers: { "access-control-allow-origin": "*", "cache-control": "public, max-age=3600" }
      }))

    const answered = <E, R>(effect: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
      PersistenceError.orDie(
        effect as Effect.Effect<HttpServerResponse.HttpServerResponse, E | PersistenceError.PersistenceError, R>
      ).pipe(
        Effect.catchAllCause(() => Effect.succeed(page(Pages.error("something went wrong: try again"), 500)))
      )

    yield* router.get("/.well-known/oauth-protected-resource", resourceMetadata)
    yield* router.get("/.well-known/oauth-protected-resource/mcp", resourceMetadata)
    yield* router.get("/.well-known/oauth-authorization-server", provider)
    yield* router.get("/.well-known/openid-configuration", provider)
    yield* router.all("/oauth/*", provider)
    yield* router.get("/oauth/consent/:uid", answered(consentPage))
    yield* router.post("/oauth/consent/:uid", answered(consentDecision))
    yield* router.get("/sign-in", answered(signInPage))
    yield* router.get("/sign-in/start", answered(startSignIn))
    yield* router.get("/sign-in/callback", answered(finishSignIn))
    yield* router.post("/sign-in/key", answered(keySignIn))
    yield* router.get("/sign-in/link/:secret", answered(linkSignIn))
    yield* router.post("/sign-out", answered(signOut))
  })
)

/** The request's URL carries a secret (a link's, a provider's code): logged without it. */
const withSecretUrl = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.zipLeft(
    HttpMiddleware.withLoggerDisabled(effect),
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
      Effect.annotateLogs(Effect.log("Sent HTTP response"), {
        "http.method": request.method,
        "http.url": Tracing.withoutCredentials(request.url)
      }))
  )
