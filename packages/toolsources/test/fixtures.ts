/**
 * What the tool source tests share: identity tokens on a fresh test
 * database (keys sealed there, as in production), egress with the test
 * resolver, a way to build the service in a test's scope, and a JWKS route
 * like the runtime's `/.well-known/jwks.json` for servers to verify against.
 */
import { Egress, Resolver } from "@agent-runtime/egress"
import { IdentityMigrations, IdentityTokens } from "@agent-runtime/identity"
import { Database, SealedSecret } from "@agent-runtime/store"
import { TestDatabase } from "@agent-runtime/testing"
import { Context, Duration, Effect, Layer, Redacted, type Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { ToolSources } from "../src/index.ts"

export const issuer = "https://runtime.test"

export const caller: ToolSources.Caller = { tenantId: "tn_1", agentId: "client_1", origin: "prompt" }

/** Identity tokens with their keys on a fresh database of the run's PostgreSQL. */
export const IdentityLive = Layer.unwrapEffect(
  Effect.map(TestDatabase.make, (url) =>
    IdentityTokens.layer({ issuer }).pipe(
      Layer.provide(SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))),
      Layer.provide(Database.layerClient(Redacted.make(url), { migrations: [IdentityMigrations.migrations] }))
    ))
)

/**
 * The service with `options`, built in the test's scope (closing it closes
 * the sessions). Test servers are on loopback over http, so egress allows
 * private addresses unless told otherwise; no name is ever resolved.
 */
export const makeSources = (options: ToolSources.Options = {}, egress = { allowPrivate: true }) =>
  Layer.build(
    ToolSources.layer(options).pipe(
      Layer.provide(Egress.layer({ allowPrivate: egress.allowPrivate }).pipe(Layer.provide(Resolver.layerTest({}))))
    )
  ).pipe(Effect.map(Context.get(ToolSources.ToolSources)))

/** Serves the identity key set over loopback HTTP, as the runtime does; answers its URL. */
export const serveJwks: Effect.Effect<string, never, IdentityTokens.IdentityTokens | Scope.Scope> = Effect.gen(
  function*() {
    const tokens = yield* IdentityTokens.IdentityTokens
    const server = Http.createServer((_, response) => {
      void Effect.runPromise(tokens.jwks).then((jwks) => {
        response.writeHead(200, { "content-type": "application/json" })
        response.end(JSON.stringify(jwks))
      })
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    )
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`
  }
)

/** Runs `effect` until its answer passes `until`, every 50 ms for at most `timeout`; answers the last one. */
export const eventually = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  until: (value: A) => boolean,
  timeout: Duration.DurationInput = Duration.seconds(10)
) =>
  Effect.gen(function*() {
    const deadline = Date.now() + Duration.toMillis(timeout)
    while (true) {
      const value = yield* effect
      if (until(value) || Date.now() > deadline) return value
      yield* Effect.sleep(Duration.millis(50))
    }
  })

/** A loopback port nothing listens on. */
export const closedPort = Effect.async<number>((resume) => {
  const server = Http.createServer()
  server.listen(0, "127.0.0.1", () => {
    const { port } = server.address() as AddressInfo
    server.close(() => resume(Effect.succeed(port)))
  })
})
