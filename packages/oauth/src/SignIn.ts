/**
 * Signing people in with the identity provider the operator configured
 * (`openid-client`): an OpenID Connect provider (Google as a preset, any
 * issuer by its discovery document) or GitHub's OAuth apps. The flow's
 * state (state, nonce, PKCE verifier, where to go next) travels in a short
 * cookie sealed with the service's key, so the callback may land on any
 * node. What comes back is who the person is: their login (a verified email
 * address, else the provider's username) and display name.
 */
import { SealedSecret } from "@agent-runtime/store"
import { Config, Context, Data, Effect, Layer, Option, Redacted, Schema } from "effect"
import * as Client from "openid-client"

export class SignInError extends Data.TaggedError("SignInError")<{ readonly message: string }> {}

export const Preset = Schema.Literal("oidc", "google", "github")
export type Preset = typeof Preset.Type

export interface ProviderConfig {
  readonly preset: Preset
  /**
   * The OpenID issuer (the `google` preset names its own); for `github`, the web root of a GitHub Enterprise
   * Server (github.com by default).
   */
  readonly issuer: Option.Option<string>
  readonly clientId: string
  readonly clientSecret: Redacted.Redacted<string>
}

export interface Person {
  readonly login: string
  readonly name: string | null
}

/** The sealed cookie carrying a sign-in between the redirect and the callback. */
export const attemptCookie = "ar_sign_in"
const attemptContext = "console-sign-in"
/** How long a person may take at the provider. */
const attemptSeconds = 600

const Attempt = Schema.parseJson(Schema.Struct({
  state: Schema.String,
  nonce: Schema.String,
  verifier: Schema.String,
  next: Schema.String,
  expiresAt: Schema.Number
}))

export interface Service {
  /** The provider's name for the sign-in button, when one is configured. */
  readonly label: Option.Option<string>
  /** Where to send the browser, and the cookie to set beside it. */
  readonly start: (input: { readonly redirectUri: string; readonly next: string }) => Effect.Effect<
    { readonly url: string; readonly cookie: string },
    SignInError
  >
  /** The callback: the person, once the provider vouched for them; and where they were going. */
  readonly finish: (input: {
    readonly callbackUrl: URL
    readonly redirectUri: string
    readonly cookie: string | undefined
  }) => Effect.Effect<{ readonly person: Person; readonly next: string }, SignInError>
}

export class SignIn extends Context.Tag("@agent-runtime/oauth/SignIn")<SignIn, Service>() {}

const labels: Record<Preset, string> = { oidc: "your identity provider", google: "Google", github: "GitHub" }

const isLoopback = (url: URL) => ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)

/** GitHub's API for the user: api.github.com for github.com, `/api/v3` under an Enterprise Server's root. */
const githubApi = (configuration: Client.Configuration) => {
  const root = configuration.serverMetadata().issuer
  return new URL(root === "https://github.com" ? "https://api.github.com/user" : `${root}/api/v3/user`)
}

const failed = (message: string) => (cause: unknown) =>
  new SignInError({
    message: cause instanceof Error && cause.message !== "" ? `${message}: ${cause.message}` : message
  })

export const make = (config: Option.Option<ProviderConfig>) =>
  Effect.gen(function*() {
    const sealer = yield* SealedSecret.Sealer

    const configuration = Option.map(config, (config) => {
      let cached: Promise<Client.Configuration> | undefined
      return () => {
        cached ??= (async () => {
          const secret = Redacted.value(config.clientSecret)
          if (config.preset === "github") {
            const root = Option.getOrElse(config.issuer, () => "https://github.com").replace(/\/$/, "")
            const github = new Client.Configuration(
              {
                issuer: root,
                authorization_endpoint: `${root}/login/oauth/authorize`,
                token_endpoint: `${root}/login/oauth/access_token`
              },
              config.clientId,
              secret
            )
            if (isLoopback(new URL(root))) Client.allowInsecureRequests(github)
            return github
          }
          const issuer = new URL(Option.getOrElse(config.issuer, () => "https://accounts.google.com"))
          return Client.discovery(
            issuer,
            config.clientId,
            secret,
            undefined,
            isLoopback(issuer) ? { execute: [Client.allowInsecureRequests] } : undefined
          )
        })().catch((cause) => {
          cached = undefined
          throw cause
        })
        return cached
      }
    })

    const start: Service["start"] = ({ next, redirectUri }) =>
      Effect.gen(function*() {
        if (Option.isNone(configuration) || Option.isNone(config)) {
          return yield* new SignInError({ message: "no identity provider is configured" })
        }
        const discovered = yield* Effect.tryPromise({
          try: configuration.value,
          catch: failed("the identity provider cannot be reached")
        })
        const verifier = Client.randomPKCECodeVerifier()
        const attempt = {
          state: Client.randomState(),
          nonce: Client.randomNonce(),
          verifier,
          next,
          expiresAt: Math.floor(Date.now() / 1000) + attemptSeconds
        }
        const challenge = yield* Effect.promise(() => Client.calculatePKCECodeChallenge(verifier))
        const url = Client.buildAuthorizationUrl(discovered, {
          redirect_uri: redirectUri,
          scope: config.value.preset === "github" ? "read:user user:email" : "openid email profile",
          code_challenge: challenge,
          code_challenge_method: "S256",
          state: attempt.state,
          ...(config.value.preset === "github" ? {} : { nonce: attempt.nonce })
        })
        return { url: url.href, cookie: sealer.seal(JSON.stringify(attempt), attemptContext) }
      })

    const person = (
      preset: Preset,
      discovered: Client.Configuration,
      tokens: Awaited<ReturnType<typeof Client.authorizationCodeGrant>>
    ) =>
      Effect.gen(function*() {
        if (preset === "github") {
          const response = yield* Effect.tryPromise({
            try: () =>
              Client.fetchProtectedResource(
                discovered,
                tokens.access_token,
                githubApi(discovered),
                "GET"
              ),
            catch: failed("GitHub did not say who you are")
          })
          const user = (yield* Effect.tryPromise({ try: () => response.json(), catch: failed("GitHub's answer") })) as {
            login?: string
            name?: string | null
          }
          if (typeof user.login !== "string") return yield* new SignInError({ message: "GitHub named no login" })
          return { login: user.login, name: user.name ?? null }
        }
        const idClaims = tokens.claims()
        if (idClaims === undefined) return yield* new SignInError({ message: "the identity provider sent no ID token" })
        // Providers that keep the ID token short say the rest at their userinfo endpoint.
        const claims: Record<string, unknown> & { sub: string } =
          idClaims.email === undefined && idClaims.preferred_username === undefined &&
            discovered.serverMetadata().userinfo_endpoint !== undefined
            ? {
              ...idClaims,
              ...(yield* Effect.tryPromise({
                try: () => Client.fetchUserInfo(discovered, tokens.access_token, idClaims.sub),
                catch: failed("the identity provider did not say who you are")
              }))
            }
            : idClaims
        const email = typeof claims.email === "string" && claims.email_verified !== false ? claims.email : undefined
        const username = typeof claims.preferred_username === "string" ? claims.preferred_username : undefined
        return {
          login: email ?? username ?? claims.sub,
          name: typeof claims.name === "string" ? claims.name : null
        }
      })

    const finish: Service["finish"] = ({ callbackUrl, cookie, redirectUri }) =>
      Effect.gen(function*() {
        if (Option.isNone(configuration) || Option.isNone(config)) {
          return yield* new SignInError({ message: "no identity provider is configured" })
        }
        if (cookie === undefined) return yield* new SignInError({ message: "the sign-in was not started here" })
        const opened = yield* sealer.open(cookie, attemptContext).pipe(
          Effect.flatMap((plain) => Schema.decode(Attempt)(Redacted.value(plain))),
          Effect.mapError(() => new SignInError({ message: "the sign-in was not started here" }))
        )
        if (opened.expiresAt < Date.now() / 1000) {
          return yield* new SignInError({ message: "the sign-in took too long" })
        }
        const discovered = yield* Effect.tryPromise({
          try: configuration.value,
          catch: failed("the identity provider cannot be reached")
        })
        // The provider answers on the URL it was given, whatever address this node was reached at.
        const current = new URL(redirectUri)
        current.search = callbackUrl.search
        const tokens = yield* Effect.tryPromise({
          try: () =>
            Client.authorizationCodeGrant(discovered, current, {
              pkceCodeVerifier: opened.verifier,
              expectedState: opened.state,
              ...(config.value.preset === "github" ? {} : { expectedNonce: opened.nonce })
            }),
          catch: failed("the identity provider refused the sign-in")
        })
        return { person: yield* person(config.value.preset, discovered, tokens), next: opened.next }
      })

    return SignIn.of({
      label: Option.map(config, (config) => labels[config.preset]),
      start,
      finish
    })
  })

/**
 * From the environment: `SIGN_IN_PROVIDER` (`oidc`, `google` or `github`; none by default),
 * `SIGN_IN_CLIENT_ID`, `SIGN_IN_CLIENT_SECRET`, and `SIGN_IN_ISSUER` (required for `oidc`; for `github`, a
 * GitHub Enterprise Server's root).
 */
export const layerConfig: Layer.Layer<SignIn, never, SealedSecret.Sealer> = Layer.effect(
  SignIn,
  Effect.gen(function*() {
    const preset = yield* Config.option(Config.literal("oidc", "google", "github")("SIGN_IN_PROVIDER"))
    const config = yield* Option.match(preset, {
      onNone: () => Effect.succeed(Option.none<ProviderConfig>()),
      onSome: (preset) =>
        Effect.map(
          Config.all({
            issuer: preset === "oidc"
              ? Config.map(Config.url("SIGN_IN_ISSUER"), (url) => Option.some(url.href))
              : Config.option(Config.map(Config.url("SIGN_IN_ISSUER"), (url) => url.href)),
            clientId: Config.string("SIGN_IN_CLIENT_ID"),
            clientSecret: Config.redacted("SIGN_IN_CLIENT_SECRET")
          }),
          (values) => Option.some<ProviderConfig>({ preset, ...values })
        )
    })
    return yield* make(config)
  }).pipe(Effect.orDie)
)
