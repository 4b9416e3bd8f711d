/**
 * Identity tokens: what the runtime sends a tool server (in the header
 * `x-agent-runtime-identity`) to say which agent calls and for whom. A token
 * is an EdDSA (Ed25519) JWT signed with the cluster's current identity key
 * (`IdentityKeys`); tool servers verify it against the public keys served at
 * `/.well-known/jwks.json`. Verification is the consumers' (see
 * docs/identity.md); this service only signs and publishes.
 *
 * The issuer is fixed by configuration and the same at every address the
 * service is reached at; it is never derived from a request.
 */
import { Identity } from "@agent-runtime/domain"
import type { PersistenceError, SealedSecret } from "@agent-runtime/store"
import type { SqlClient } from "@effect/sql"
import type { ConfigError } from "effect"
import { Clock, Config, Context, Duration, Effect, Layer } from "effect"
import { SignJWT } from "jose"
import * as Crypto from "node:crypto"
import * as IdentityError from "./IdentityError.ts"
import * as IdentityKeys from "./IdentityKeys.ts"

/** What a token says; each member is one claim. */
export interface Claims {
  /** `aud`: the tool server the token is for (its URL or name); verifiers check it is theirs. */
  readonly audience: string
  /** `sub`: who the agent acts for (the agent's subject); the agent's id when it has none. */
  readonly subject?: string | undefined
  /** `act`: who acts in this turn (the prompt's actor), when known. */
  readonly actor?: string | undefined
  /** `ctx`: the agent's context, when it has one. */
  readonly context?: Record<string, unknown> | undefined
  /** `tenant`: the tenant owning the agent. */
  readonly tenantId: string
  /** `agent`: the agent calling. */
  readonly agentId: string
  /** `origin`: what started the call (a prompt, a schedule, a webhook, ...). */
  readonly origin: string
  /** `definition`: the definition the agent was made from, when any. */
  readonly definition?: string | undefined
}

/**
 * The claims as a token carries them, less `iss`, `aud` and its times: what an application connection's calls
 * carry unsigned beside the token (the connection is the application's own).
 */
export const payloadOf = (claims: Claims) => ({
  sub: claims.subject ?? claims.agentId,
  tenant: claims.tenantId,
  agent: claims.agentId,
  origin: claims.origin,
  ...(claims.actor === undefined ? {} : { act: claims.actor }),
  ...(claims.context === undefined ? {} : { ctx: claims.context }),
  ...(claims.definition === undefined ? {} : { definition: claims.definition })
})

export interface Service {
  /** The `iss` of every token. */
  readonly issuer: string
  /**
   * A signed token for `claims`: header `{alg: "EdDSA", kid, typ: "JWT"}`;
   * claims `iss`, `aud`, `sub`, `act` and `ctx` (when given), `tenant`,
   * `agent`, `origin`, `definition` (when given), `iat`, `exp` (`iat` plus
   * the token lifetime) and a random `jti`. Fails when no key can sign
   * (keys unreadable, none active).
   */
  readonly sign: (claims: Claims) => Effect.Effect<string, IdentityError.IdentityError>
  /** The public keys not retired (the signing one, one waiting to sign, retiring ones), as served. */
  readonly jwks: Effect.Effect<Identity.Jwks, PersistenceError.PersistenceError>
  /**
   * Adds a signing key, published at once and signing after the activation
   * delay; earlier keys stay published for the overlap after it. Answers the
   * new key's id and when it signs (Unix seconds).
   */
  readonly rotate: Effect.Effect<Identity.KeyRotated, PersistenceError.PersistenceError>
}

export class IdentityTokens extends Context.Tag("@agent-runtime/identity/IdentityTokens")<IdentityTokens, Service>() {}

export interface Options extends IdentityKeys.Options {
  /** `iss`. Default `https://agent-runtime.invalid`. */
  readonly issuer?: string
  /** From `iat` to `exp`. Default 120 seconds. */
  readonly tokenLifetime?: Duration.DurationInput
}

export const defaults = {
  ...IdentityKeys.defaults,
  issuer: "https://agent-runtime.invalid",
  tokenLifetime: Duration.seconds(120)
} as const

export const make = (
  options: Options = {}
): Effect.Effect<Service, never, IdentityKeys.IdentityKeys> =>
  Effect.gen(function*() {
    const keys = yield* IdentityKeys.IdentityKeys
    const issuer = options.issuer ?? defaults.issuer
    const lifetimeSeconds = Math.max(
      1,
      Math.ceil(Duration.toSeconds(options.tokenLifetime ?? defaults.tokenLifetime))
    )

    const sign = Effect.fn("IdentityTokens.sign")(function*(claims: Claims) {
      const key = yield* keys.signingKey
      const issuedAt = Math.floor((yield* Clock.currentTimeMillis) / 1000)
      return yield* Effect.tryPromise(() =>
        new SignJWT(payloadOf(claims))
          .setProtectedHeader({ alg: "EdDSA", kid: key.kid, typ: "JWT" })
          .setIssuer(issuer)
          .setAudience(claims.audience)
          .setIssuedAt(issuedAt)
          .setExpirationTime(issuedAt + lifetimeSeconds)
          .setJti(Crypto.randomBytes(16).toString("base64url"))
          .sign(key.privateKey)
      ).pipe(IdentityError.refail("signing_failed", "identity token cannot be signed"))
    })

    const jwks = keys.published.pipe(
      Effect.map((published) => new Identity.Jwks({ keys: published })),
      Effect.withSpan("IdentityTokens.jwks")
    )

    const rotate = keys.rotate.pipe(
      Effect.map((added) =>
        new Identity.KeyRotated({ kid: added.kid, activatesAt: Math.floor(added.activatesAt / 1000) })
      ),
      Effect.withSpan("IdentityTokens.rotate")
    )

    return IdentityTokens.of({ issuer, sign, jwks, rotate })
  })

/** The service and its keys from `options`; makes the first key if the table has none. */
export const layer = (
  options: Options = {}
): Layer.Layer<IdentityTokens, PersistenceError.PersistenceError, SqlClient.SqlClient | SealedSecret.Sealer> =>
  Layer.effect(IdentityTokens, make(options)).pipe(Layer.provide(IdentityKeys.layer(options)))

const seconds = (name: string, fallback: number, minimum: number) =>
  Config.number(name).pipe(
    Config.validate({ message: `Expected a number of seconds, at least ${minimum}`, validation: (n) => n >= minimum }),
    Config.withDefault(fallback),
    Config.map(Duration.seconds)
  )

/** The settings `layerConfig` reads. */
export const config: Config.Config<Options> = Config.all({
  issuer: Config.string("IDENTITY_ISSUER").pipe(
    Config.validate({ message: "Expected a non-empty issuer", validation: (issuer) => issuer.trim() !== "" }),
    Config.withDefault(defaults.issuer)
  ),
  tokenLifetime: seconds("IDENTITY_TOKEN_SECONDS", 120, 1),
  activationDelay: seconds("IDENTITY_ROTATION_ACTIVATION_SECONDS", 300, 0),
  overlap: seconds("IDENTITY_KEY_OVERLAP_SECONDS", 24 * 60 * 60, 0)
})

/**
 * `layer` from `IDENTITY_ISSUER`, `IDENTITY_TOKEN_SECONDS` (default 120),
 * `IDENTITY_ROTATION_ACTIVATION_SECONDS` (300) and
 * `IDENTITY_KEY_OVERLAP_SECONDS` (86400).
 */
export const layerConfig: Layer.Layer<
  IdentityTokens,
  PersistenceError.PersistenceError | ConfigError.ConfigError,
  SqlClient.SqlClient | SealedSecret.Sealer
> = Layer.unwrapEffect(Effect.map(config, layer))
