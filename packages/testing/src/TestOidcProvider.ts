/**
 * An OpenID Connect provider on 127.0.0.1 for tests: `oidc-provider`, with
 * one confidential client (the runtime's sign-in) and one person, who is
 * signed in and consents at once when the browser reaches its interaction
 * (nobody types a password in a test). The runtime's callback is named once
 * its node listens (`allow`), as an operator registers it after deploying.
 */
import { Effect, type Scope } from "effect"
import * as Http from "node:http"
import { Provider } from "oidc-provider"
import * as Loopback from "./internal/loopback.ts"

export const clientId = "agent-runtime-console"
export const clientSecret = "test-oidc-client-secret-0123456789abcdef"

export interface Person {
  readonly sub: string
  readonly email: string
  readonly name: string
}

export interface TestOidcProvider {
  readonly issuer: string
  /** Registers the runtime's sign-in callback: the only redirect URI its client may use. */
  readonly allow: (redirectUri: string) => void
  /** How many people it signed in. */
  readonly signIns: () => number
}

export const start = (person: Person): Effect.Effect<TestOidcProvider, never, Scope.Scope> =>
  Effect.gen(function*() {
    const server = Http.createServer()
    const issuer = yield* Loopback.listen(server)
    let provider: Provider | undefined
    let signIns = 0

    const allow = (redirectUri: string) => {
      provider = new Provider(issuer, {
        clients: [{
          client_id: clientId,
          client_secret: clientSecret,
          redirect_uris: [redirectUri],
          grant_types: ["authorization_code"],
          response_types: ["code"]
        }],
        claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"] },
        findAccount: (_ctx, sub) =>
          Promise.resolve({
            accountId: sub,
            claims: () => Promise.resolve({ sub, email: person.email, email_verified: true, name: person.name })
          }),
        features: { devInteractions: { enabled: false } },
        ttl: { AccessToken: 600, AuthorizationCode: 60, Grant: 600, IdToken: 600, Interaction: 600, Session: 600 },
        interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` }
      })
    }

    server.on("request", async (request: Http.IncomingMessage, response: Http.ServerResponse) => {
      if (provider === undefined) {
        response.writeHead(503).end()
        return
      }
      if (!request.url?.startsWith("/interaction/")) return provider.callback()(request, response)
      try {
        const details = await provider.interactionDetails(request, response)
        if (details.prompt.name === "login") {
          signIns++
          await provider.interactionFinished(request, response, { login: { accountId: person.sub } }, {
            mergeWithLastSubmission: false
          })
          return
        }
        const grant = new provider.Grant({ accountId: person.sub, clientId: String(details.params.client_id) })
        const missing = (details.prompt.details as { missingOIDCScope?: Array<string> }).missingOIDCScope ?? []
        grant.addOIDCScope(missing.join(" "))
        const grantId = await grant.save()
        await provider.interactionFinished(request, response, { consent: { grantId } }, {
          mergeWithLastSubmission: true
        })
      } catch (error) {
        response.writeHead(400).end(String(error))
      }
    })

    return { issuer, allow, signIns: () => signIns }
  })
