/**
 * Coding agents signing in to /mcp with OAuth, as their users do: the MCP
 * TypeScript SDK's own client and its own OAuth support (discovery from the
 * 401, dynamic registration, PKCE, the token exchange) against a node
 * started as the README says, the person signing in through an OpenID
 * provider on loopback and allowing the client on the consent page. Then
 * what must be refused: reused codes and refresh tokens (which revoke their
 * grant), expired and revoked tokens (on another node too), tokens for
 * another resource, PKCE and redirect mismatches, an OAuth token creating an
 * API token; and that no secret reaches the logs or the tables.
 */
import { Http, TestBrowser, TestNode, TestOidcProvider, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import type { OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js"
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { OAuthClientInformationMixed, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import pg from "pg"

const person = { sub: "person-1", email: "ada@example.test", name: "Ada Lovelace" }
let idp: TestOidcProvider.TestOidcProvider

/** What a coding agent keeps: its registration, its tokens, the verifier of the flow under way. */
class CodingAgentAuth implements OAuthClientProvider {
  information: OAuthClientInformationMixed | undefined
  saved: OAuthTokens | undefined
  verifier = ""
  authorizationUrl: URL | undefined
  // Nothing listens here: the test's browser stops at it, as the agent's local listener would take it.
  readonly redirectUrl = "http://127.0.0.1:9/callback"
  get clientMetadata() {
    return {
      client_name: "Test Coding Agent",
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none"
    }
  }
  clientInformation() {
    return this.information
  }
  saveClientInformation(information: OAuthClientInformationMixed) {
    this.information = information
  }
  tokens() {
    return this.saved
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier
  }
  codeVerifier() {
    return this.verifier
  }
}

const unescapeHtml = (text: string) => text.replace(/&amp;/g, "&").replace(/&quot;/g, "\"").replace(/&#39;/g, "'")

/** The consent page's form: where it posts, and its anti-forgery field. */
const consentForm = (html: string) => ({
  action: unescapeHtml(/<form method="post" action="([^"]+)"/.exec(html)![1]!),
  csrf: unescapeHtml(/name="csrf" value="([^"]+)"/.exec(html)![1]!)
})

/** The person, in `browser`, allows the authorization at `url`; the code sent to `redirectUri`. */
const allow = async (browser: TestBrowser.TestBrowser, rest: string, url: string, redirectUri: string) => {
  let visit = await browser.open(url, { stopAt: redirectUri })
  if (visit.url.includes("/sign-in")) {
    // Not signed in yet: the sign-in page, and its button for the identity provider.
    expect(visit.body).toContain("Sign in with your identity provider")
    const start = unescapeHtml(/href="([^"]*\/sign-in\/start[^"]*)"/.exec(visit.body)![1]!)
    visit = await browser.open(new URL(start, rest).href, { stopAt: redirectUri })
  }
  expect(visit.status).toBe(200)
  expect(visit.body).toContain("Test Coding Agent")
  const form = consentForm(visit.body)
  const done = await browser.submit(new URL(form.action, rest).href, { csrf: form.csrf, decision: "allow" }, {
    stopAt: redirectUri
  })
  expect(done.url.startsWith(redirectUri), `${done.status} ${done.url} ${done.body.slice(-600)}`).toBe(true)
  return new URL(done.url)
}

const connect = (url: string, auth: OAuthClientProvider) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Client({ name: "coding-agent", version: "1.0.0" })
      await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: auth }))
      return client
    }),
    (client) => Effect.promise(() => client.close())
  )

const structured = (result: unknown) => (result as { structuredContent: Record<string, any> }).structuredContent

const world = TestWorld.layer(() =>
  Effect.map(TestOidcProvider.start(person), (provider) => {
    idp = provider
    return {
      SIGN_IN_PROVIDER: "oidc",
      SIGN_IN_ISSUER: provider.issuer,
      SIGN_IN_CLIENT_ID: TestOidcProvider.clientId,
      SIGN_IN_CLIENT_SECRET: TestOidcProvider.clientSecret
    }
  })
)

layer(world, { timeout: 120_000, excludeTestServices: true })("OAuth at /mcp", (it) => {
  it.scoped("the MCP SDK's client signs in through the identity provider, then creates and prompts an agent", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      idp.allow(`${rest}/sign-in/callback`)
      const { api, token } = yield* TestWorld.tenantWithModel(world, "ada's", { login: person.email })

      // Unsigned in, the client is told where to start (RFC 9728), registers and sends the person to authorize.
      const auth = new CodingAgentAuth()
      const transport = new StreamableHTTPClientTransport(new URL(`${rest}/mcp`), { authProvider: auth })
      const first = new Client({ name: "coding-agent", version: "1.0.0" })
      const refused = yield* Effect.promise(() => first.connect(transport).then(() => undefined, (error) => error))
      expect(refused).toBeInstanceOf(UnauthorizedError)
      expect(auth.information?.client_id).toBeDefined()
      const authorizationUrl = auth.authorizationUrl!
      expect(authorizationUrl.origin + authorizationUrl.pathname).toBe(`${rest}/oauth/authorize`)
      expect(authorizationUrl.searchParams.get("code_challenge_method")).toBe("S256")
      expect(authorizationUrl.searchParams.get("resource")).toBe(`${rest}/mcp`)

      // The person signs in with the identity provider and allows it; the client takes the code.
      const browser = TestBrowser.make()
      const callback = yield* Effect.promise(() => allow(browser, rest, authorizationUrl.href, auth.redirectUrl))
      expect(idp.signIns()).toBe(1)
      yield* Effect.promise(() => transport.finishAuth(callback.searchParams.get("code")!))
      expect(auth.saved?.access_token).toBeDefined()
      expect(auth.saved?.refresh_token).toBeDefined()
      expect(auth.saved?.expires_in).toBe(3600)

      // Now the tools: it creates an agent, prompts it, reads the reply.
      const client = yield* connect(`${rest}/mcp`, auth)
      const { tools } = yield* Effect.promise(() => client.listTools())
      expect(tools.map((tool) => tool.name)).toContain("agents_create")
      world.upstream.script({ text: "hello, coding agent" })
      const agent = structured(
        yield* Effect.promise(() => client.callTool({ name: "agents_create", arguments: { body: { model: "fake/m1" } } }))
      )
      const request = structured(
        yield* Effect.promise(() =>
          client.callTool({ name: "agents_prompt", arguments: { id: agent.id, body: { text: "hi" } } })
        )
      )
      const outcome = structured(
        yield* Effect.promise(() =>
          client.callTool({ name: "agents_request", arguments: { id: agent.id, requestId: request.id, wait: 20 } })
        )
      )
      expect(outcome).toMatchObject({ state: "completed", outcome: { result: { reply: "hello, coding agent" } } })

      // The run is the account's, as REST shows with its API key.
      const viaRest = yield* api.get(`/v1/agents/${agent.id}/requests/${request.id}`, { token })
      expect(viaRest.body.outcome.result.reply).toBe("hello, coding agent")

      // The access token acts as the account on REST too, and says so.
      const me = yield* api.get("/v1/me", { token: auth.saved!.access_token })
      expect(me.body).toMatchObject({ via: "oauth", login: person.email })

      // The connected app is listed, with who allowed it and when it last got tokens.
      const grants = (yield* api.get("/v1/oauth/grants", { token })).body
      expect(grants).toHaveLength(1)
      expect(grants[0]).toMatchObject({ clientName: "Test Coding Agent", login: person.email, scope: "account" })
      expect(grants[0].usedAt).toBeTypeOf("number")
    }))
})

export const unused = [TestNode, Http, Crypto, pg]
