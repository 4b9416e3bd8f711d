/**
 * `/.well-known/jwks.json`: the public keys that verify identity tokens,
 * without authentication. Verifiers may cache the answer for five minutes: a
 * new key is published longer than that before it signs (the rotation's
 * activation delay), so a cached copy always holds the signing key.
 */
import { Api, Identity } from "@agent-runtime/domain"
import { IdentityTokens } from "@agent-runtime/identity"
import { HttpApiBuilder, type HttpApiGroup, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer } from "effect"

/** How long verifiers may reuse the key set. */
export const cacheControl = "public, max-age=300"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "wellKnown">,
  never,
  IdentityTokens.IdentityTokens
> = HttpApiBuilder.group(Api.Api, "wellKnown", (handlers) =>
  Effect.gen(function*() {
    const identity = yield* IdentityTokens.IdentityTokens
    return handlers.handle("jwks", () =>
      identity.jwks.pipe(
        Effect.flatMap((jwks) =>
          HttpServerResponse.schemaJson(Identity.Jwks)(jwks, { headers: { "cache-control": cacheControl } })
        ),
        Effect.orDie
      ))
  }))
