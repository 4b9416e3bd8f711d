/**
 * Coding agents signing in to /mcp with OAuth, as their users do: the MCP
 * TypeScript SDK's own client and its own OAuth support (discovery from the
 * 401, dynamic registration, PKCE, the token exchange) against a node
 * started as the README says, the person signing in through an OpenID
 * provider on loopback and allowing the client on the consent page. Then
 * what must be refused: reused codes and refresh tokens (which revoke their
 * grant), expired and revoked tokens (on another node too), tokens for
 * another resource, PKCE and redirect mismatches, an OAuth token creating an
 * API token; that no secret reaches the logs or the tables; and that the
 * console session's cookie is sent only to the paths that read it, never to
 * `/clients/*`.
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

/** A `Set-Cookie` line's `Path`. */
const cookiePath = (line: string) => /; Path=([^;]*)/.exec(line)?.[1] ?? ""

const unescapeHtml = (text: string) => text.replace(/&amp;/g, "&").replace(/&quot;/g, '"').replace(/&#39;/g, "'")

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

// Shared with the second node, which must open what the first sealed (the server's signing keys).
const sealingKey = Crypto.randomBytes(32).toString("base64")

const world = TestWorld.layer(() =>
  Effect.map(TestOidcProvider.start(person), (provider) => {
    idp = provider
    return {
      SEALING_KEY: sealingKey,
      SIGN_IN_PROVIDER: "oidc",
      SIGN_IN_ISSUER: provider.issuer,
      SIGN_IN_CLIENT_ID: TestOidcProvider.clientId,
      SIGN_IN_CLIENT_SECRET: TestOidcProvider.clientSecret
    }
  })
)

const redirectUri = "http://127.0.0.1:9/callback"

const pkce = () => {
  const verifier = Crypto.randomBytes(32).toString("base64url")
  return { verifier, challenge: Crypto.createHash("sha256").update(verifier).digest("base64url") }
}

const form = (fields: Record<string, string>) => ({
  body: new URLSearchParams(fields).toString(),
  headers: { "content-type": "application/x-www-form-urlencoded" }
})

/** A coding agent speaking the protocol itself: registration, authorization, token requests. */
const agentClient = (rest: string, browser: TestBrowser.TestBrowser) => {
  const api = Http.client(rest)
  const register = (metadata: Record<string, unknown> = {}) =>
    Effect.map(
      api.post("/oauth/register", {
        json: {
          client_name: "Test Coding Agent",
          redirect_uris: [redirectUri],
          grant_types: ["authorization_code", "refresh_token"],
          response_types: ["code"],
          token_endpoint_auth_method: "none",
          ...metadata
        }
      }),
      (response) => {
        expect(response.status, response.text).toBe(201)
        return response.body as { client_id: string; client_secret?: string }
      }
    )
  const authorizeUrl = (clientId: string, challenge: string, extra: Record<string, string> = {}) =>
    `${rest}/oauth/authorize?` + new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: redirectUri,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: "account",
      resource: `${rest}/mcp`,
      state: "state-1",
      ...extra
    })
  /** The code the person's allowing sends to the agent. */
  const code = (clientId: string, challenge: string) =>
    Effect.promise(() => allow(browser, rest, authorizeUrl(clientId, challenge), redirectUri)).pipe(
      Effect.map((callback) => callback.searchParams.get("code")!)
    )
  const token = (fields: Record<string, string>) => api.post("/oauth/token", form(fields))
  /** Registered, allowed and exchanged: the first tokens. */
  const tokens = Effect.gen(function*() {
    const { client_id } = yield* register()
    const { challenge, verifier } = pkce()
    const granted = yield* code(client_id, challenge)
    const answer = yield* token({
      grant_type: "authorization_code",
      code: granted,
      code_verifier: verifier,
      redirect_uri: redirectUri,
      client_id
    })
    expect(answer.status, answer.text).toBe(200)
    const issued = answer.body as { access_token: string; refresh_token: string; [field: string]: unknown }
    return { ...issued, clientId: client_id, code: granted, verifier }
  })
  return { register, authorizeUrl, code, token, tokens }
}

/** A browser signed in to the tenant with a one-time link from the operator. */
const signedInBrowser = (world: TestWorld.World, tenantId: string) =>
  Effect.gen(function*() {
    const api = Http.client(world.node.rest)
    const link = yield* api.post("/v1/admin/sign-in-links", {
      token: world.node.operatorToken,
      json: { tenant: tenantId }
    })
    expect(link.status).toBe(201)
    const browser = TestBrowser.make()
    const visit = yield* Effect.promise(() => browser.open(link.body.url))
    expect(visit.body).toContain("Signed in")
    return { browser, link: link.body.url as string }
  })

const database = (url: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => client.end())
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
        yield* Effect.promise(() =>
          client.callTool({ name: "agents_create", arguments: { body: { model: "fake/m1" } } })
        )
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

layer(world, { timeout: 180_000, excludeTestServices: true })("OAuth refusals", (it) => {
  it.scoped("the metadata documents say what clients need; the server's keys rotate", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      const api = Http.client(rest)
      const resource = yield* api.get("/.well-known/oauth-protected-resource/mcp")
      expect(resource.body).toMatchObject({
        resource: `${rest}/mcp`,
        authorization_servers: [rest],
        scopes_supported: ["account"]
      })
      const metadata = (yield* api.get("/.well-known/oauth-authorization-server")).body
      expect(metadata).toMatchObject({
        issuer: rest,
        authorization_endpoint: `${rest}/oauth/authorize`,
        token_endpoint: `${rest}/oauth/token`,
        registration_endpoint: `${rest}/oauth/register`,
        code_challenge_methods_supported: ["S256"],
        response_types_supported: ["code"]
      })
      expect(metadata.grant_types_supported).toEqual(expect.arrayContaining(["authorization_code", "refresh_token"]))
      const unsigned = yield* api.post("/mcp", { json: {} })
      expect(unsigned.status).toBe(401)
      expect(unsigned.headers.get("www-authenticate")).toContain(
        `resource_metadata="${rest}/.well-known/oauth-protected-resource/mcp"`
      )
      expect(unsigned.headers.get("www-authenticate")).not.toContain("invalid_token")
      const { token } = yield* TestWorld.tenantWithModel(world, "streamless")
      expect((yield* api.get("/mcp", { token, headers: { accept: "text/event-stream" } })).status).toBe(405)

      // Rotation: the new key is published at once, next to the one that signs.
      const before = (yield* api.get("/oauth/jwks")).body.keys
      const rotated = yield* api.post("/v1/admin/oauth-keys/rotate", { token: world.node.operatorToken })
      expect(rotated.status).toBe(200)
      const after = (yield* api.get("/oauth/jwks")).body.keys.map((key: { kid: string }) => key.kid)
      expect(after).toEqual(
        expect.arrayContaining([...before.map((key: { kid: string }) => key.kid), rotated.body.kid])
      )
      // Not the identity keys: no key signs for both.
      const identity = (yield* api.get("/.well-known/jwks.json")).body.keys.map((key: { kid: string }) => key.kid)
      expect(after.some((kid: string) => identity.includes(kid))).toBe(false)
      // A key only the operator rotates.
      expect((yield* api.post("/v1/admin/oauth-keys/rotate", { token })).status).toBe(403)
    }))

  it.scoped("refresh tokens rotate, and a reused one revokes its grant; a code works once", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      const { api, tenantId, token: apiKey } = yield* TestWorld.tenantWithModel(world, "grace's", {
        login: "grace@example.test"
      })
      const { browser } = yield* signedInBrowser(world, tenantId)
      const agent = agentClient(rest, browser)

      const first = yield* agent.tokens
      expect(first).toMatchObject({ token_type: "Bearer", expires_in: 3600, scope: "account" })
      expect((yield* api.get("/v1/me", { token: first.access_token })).body).toMatchObject({ via: "oauth" })

      // Each refresh gives a new refresh token; the new access token works.
      const refreshed = yield* agent.token({
        grant_type: "refresh_token",
        refresh_token: first.refresh_token,
        client_id: first.clientId
      })
      expect(refreshed.status, refreshed.text).toBe(200)
      expect(refreshed.body.refresh_token).not.toBe(first.refresh_token)
      expect((yield* api.get("/v1/me", { token: refreshed.body.access_token })).status).toBe(200)

      // A client retrying the same refresh (its answer lost), or refreshes racing: each answered, within 10 s.
      const retries = yield* Effect.all(
        [1, 2, 3].map(() =>
          agent.token({ grant_type: "refresh_token", refresh_token: first.refresh_token, client_id: first.clientId })
        ),
        { concurrency: "unbounded" }
      )
      for (const retry of retries) {
        expect(retry.status, retry.text).toBe(200)
        expect((yield* api.get("/v1/me", { token: retry.body.access_token })).status).toBe(200)
      }

      // The old one again later: refused, and the whole grant with it.
      const db = yield* database(world.databaseUrl)
      yield* Effect.promise(() =>
        db.query(`UPDATE oauth_records SET consumed_at = consumed_at - interval '11 seconds' WHERE id_hash = $1`, [
          Crypto.createHash("sha256").update(first.refresh_token).digest()
        ])
      )
      const reused = yield* agent.token({
        grant_type: "refresh_token",
        refresh_token: first.refresh_token,
        client_id: first.clientId
      })
      expect(reused.status).toBe(400)
      expect(reused.body.error).toBe("invalid_grant")
      const after = yield* agent.token({
        grant_type: "refresh_token",
        refresh_token: refreshed.body.refresh_token,
        client_id: first.clientId
      })
      expect(after.body.error).toBe("invalid_grant")
      const stopped = yield* api.get("/v1/me", { token: refreshed.body.access_token })
      expect(stopped.status).toBe(401)
      expect(stopped.body.code).toBe("UNAUTHORIZED")
      expect((yield* api.get("/v1/oauth/grants", { token: apiKey })).body).toEqual([])

      // A code used twice: refused the second time, and what the first gave stops.
      const once = yield* agent.tokens
      const twice = yield* agent.token({
        grant_type: "authorization_code",
        code: once.code,
        code_verifier: once.verifier,
        redirect_uri: redirectUri,
        client_id: once.clientId
      })
      expect(twice.status).toBe(400)
      expect(twice.body.error).toBe("invalid_grant")
      expect((yield* api.get("/v1/me", { token: once.access_token })).status).toBe(401)
    }))

  it.scoped("tokens expire: an access token after an hour, a refresh token after 30 days", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, tenantId } = yield* TestWorld.tenantWithModel(world, "expiring", { login: "exp@example.test" })
      const { browser } = yield* signedInBrowser(world, tenantId)
      const agent = agentClient(world.node.rest, browser)
      const issued = yield* agent.tokens
      const db = yield* database(world.databaseUrl)
      const hash = (token: string) => Crypto.createHash("sha256").update(token).digest()
      const lifetime = (token: string) =>
        Effect.promise(() =>
          db.query(
            `SELECT extract(epoch from expires_at - now())::float8 AS left FROM oauth_records WHERE id_hash = $1`,
            [hash(token)]
          )
        ).pipe(Effect.map((result) => result.rows[0].left as number))
      expect(Math.abs((yield* lifetime(issued.access_token)) - 3600)).toBeLessThan(60)
      expect(Math.abs((yield* lifetime(issued.refresh_token)) - 30 * 86400)).toBeLessThan(60)

      // The clock moved past the access token's hour (its row is what the node checks).
      const expire = (token: string) =>
        Effect.promise(() =>
          db.query(`UPDATE oauth_records SET expires_at = now() - interval '1 second' WHERE id_hash = $1`, [
            hash(token)
          ])
        )
      yield* expire(issued.access_token)
      expect((yield* api.get("/v1/me", { token: issued.access_token })).status).toBe(401)
      const mcp = yield* api.post("/mcp", { token: issued.access_token, json: {} })
      expect(mcp.status).toBe(401)
      expect(mcp.headers.get("www-authenticate")).toContain(`error="invalid_token"`)
      const renewed = yield* agent.token({
        grant_type: "refresh_token",
        refresh_token: issued.refresh_token,
        client_id: issued.clientId
      })
      expect(renewed.status).toBe(200)
      expect((yield* api.get("/v1/me", { token: renewed.body.access_token })).status).toBe(200)
      // And past the refresh token's 30 days.
      yield* expire(renewed.body.refresh_token)
      const late = yield* agent.token({
        grant_type: "refresh_token",
        refresh_token: renewed.body.refresh_token,
        client_id: issued.clientId
      })
      expect(late.status).toBe(400)
      expect(late.body.error).toBe("invalid_grant")
    }))

  it.scoped("PKCE, redirect URIs and resources must match; an OAuth token makes no API token", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      const { api, tenantId } = yield* TestWorld.tenantWithModel(world, "strict", { login: "strict@example.test" })
      const { browser } = yield* signedInBrowser(world, tenantId)
      const agent = agentClient(rest, browser)
      const { client_id } = yield* agent.register()
      const { challenge, verifier } = pkce()
      const errorOf = (visit: TestBrowser.Visit) => new URL(visit.url).searchParams.get("error")

      // No challenge, or the plain method: refused, told to the client's redirect URI.
      const noChallenge = new URL(agent.authorizeUrl(client_id, challenge))
      noChallenge.searchParams.delete("code_challenge")
      noChallenge.searchParams.delete("code_challenge_method")
      const withoutPkce = yield* Effect.promise(() => browser.open(noChallenge.href, { stopAt: redirectUri }))
      expect(errorOf(withoutPkce)).toBe("invalid_request")
      const plain = yield* Effect.promise(() =>
        browser.open(agent.authorizeUrl(client_id, verifier, { code_challenge_method: "plain" }), {
          stopAt: redirectUri
        })
      )
      expect(errorOf(plain)).toBe("invalid_request")

      // A redirect URI not registered exactly: an error page, nothing sent anywhere.
      const elsewhere = yield* Effect.promise(() =>
        browser.open(agent.authorizeUrl(client_id, challenge, { redirect_uri: `${redirectUri}/other` }), {
          stopAt: redirectUri
        })
      )
      expect(elsewhere.status).toBe(400)
      expect(elsewhere.url.startsWith(rest)).toBe(true)
      expect(elsewhere.body).toContain("redirect_uri")

      // A resource that is not this service's /mcp.
      const foreign = yield* Effect.promise(() =>
        browser.open(agent.authorizeUrl(client_id, challenge, { resource: "https://elsewhere.example/mcp" }), {
          stopAt: redirectUri
        })
      )
      expect(errorOf(foreign)).toBe("invalid_target")

      // A code with the wrong verifier, or redeemed for another redirect URI.
      const code = yield* agent.code(client_id, challenge)
      const wrongVerifier = yield* agent.token({
        grant_type: "authorization_code",
        code,
        code_verifier: pkce().verifier,
        redirect_uri: redirectUri,
        client_id
      })
      expect(wrongVerifier.status).toBe(400)
      expect(wrongVerifier.body.error).toBe("invalid_grant")
      const second = pkce()
      const otherCode = yield* agent.code(client_id, second.challenge)
      const otherRedirect = yield* agent.token({
        grant_type: "authorization_code",
        code: otherCode,
        code_verifier: second.verifier,
        redirect_uri: `${redirectUri}/other`,
        client_id
      })
      expect(otherRedirect.status).toBe(400)
      expect(otherRedirect.body.error).toBe("invalid_grant")

      // The person may say no: the client is told.
      const denyPage = yield* Effect.promise(() =>
        browser.open(agent.authorizeUrl(client_id, challenge), { stopAt: redirectUri })
      )
      const denyForm = consentForm(denyPage.body)
      const denied = yield* Effect.promise(() =>
        browser.submit(new URL(denyForm.action, rest).href, { csrf: denyForm.csrf, decision: "deny" }, {
          stopAt: redirectUri
        })
      )
      expect(errorOf(denied)).toBe("access_denied")
      // A consent posted with another session's token, or from another site: refused.
      const forgedPage = yield* Effect.promise(() =>
        browser.open(agent.authorizeUrl(client_id, challenge), { stopAt: redirectUri })
      )
      const forgedForm = consentForm(forgedPage.body)
      const wrongToken = yield* Effect.promise(() =>
        browser.submit(new URL(forgedForm.action, rest).href, { csrf: "x".repeat(43), decision: "allow" })
      )
      expect(wrongToken.status).toBe(403)
      const crossSite = yield* Effect.promise(() =>
        browser.submit(new URL(forgedForm.action, rest).href, { csrf: forgedForm.csrf, decision: "allow" }, {
          origin: "https://evil.example"
        })
      )
      expect(crossSite.status).toBe(403)

      // An OAuth token acts as the account, but makes no API token.
      const issued = yield* agent.tokens
      const minted = yield* api.post("/v1/tokens", { token: issued.access_token, json: { name: "escape" } })
      expect(minted.status).toBe(403)
      expect(minted.body.code).toBe("FORBIDDEN")
      expect((yield* api.get("/v1/tokens", { token: issued.access_token })).status).toBe(200)
    }))

  it.scoped("a revoked grant stops on another node at once; a token is bound to its node's resource", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, tenantId, token: apiKey } = yield* TestWorld.tenantWithModel(world, "two nodes", {
        login: "two@example.test"
      })
      const other = yield* TestNode.start({ databaseUrl: world.databaseUrl, env: { SEALING_KEY: sealingKey } })
      const otherApi = Http.client(other.rest)
      const { browser } = yield* signedInBrowser(world, tenantId)
      const issued = yield* agentClient(world.node.rest, browser).tokens

      // The REST API answers it on every node; /mcp only where it is the token's audience.
      expect((yield* otherApi.get("/v1/me", { token: issued.access_token })).status).toBe(200)
      const mcpHere = yield* api.post("/mcp", {
        token: issued.access_token,
        json: { jsonrpc: "2.0", id: 1, method: "tools/list" },
        headers: { accept: "application/json, text/event-stream" }
      })
      expect(mcpHere.status).toBe(200)
      const mcpThere = yield* otherApi.post("/mcp", {
        token: issued.access_token,
        json: { jsonrpc: "2.0", id: 1, method: "tools/list" },
        headers: { accept: "application/json, text/event-stream" }
      })
      expect(mcpThere.status).toBe(401)
      expect(mcpThere.headers.get("www-authenticate")).toContain(
        `resource_metadata="${other.rest}/.well-known/oauth-protected-resource/mcp"`
      )

      // Revoked on the first node: the second refuses it on the next request, and its refresh token too.
      const [grant] = (yield* api.get("/v1/oauth/grants", { token: apiKey })).body
      expect((yield* api.delete(`/v1/oauth/grants/${grant.id}`, { token: apiKey })).status).toBe(200)
      expect((yield* otherApi.get("/v1/me", { token: issued.access_token })).status).toBe(401)
      const refreshed = yield* Http.client(other.rest).post(
        "/oauth/token",
        form({
          grant_type: "refresh_token",
          refresh_token: issued.refresh_token,
          client_id: issued.clientId
        })
      )
      expect(refreshed.status).toBe(400)
      // Revoking it again, or another tenant's grant: 404.
      expect((yield* api.delete(`/v1/oauth/grants/${grant.id}`, { token: apiKey })).status).toBe(404)
    }))

  it.scoped("no token, code, secret or link reaches the logs or the tables", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      const { tenantId } = yield* TestWorld.tenantWithModel(world, "secretive", { login: "secret@example.test" })
      const { browser, link } = yield* signedInBrowser(world, tenantId)
      const agent = agentClient(rest, browser)
      const issued = yield* agent.tokens
      const refreshed = yield* agent.token({
        grant_type: "refresh_token",
        refresh_token: issued.refresh_token,
        client_id: issued.clientId
      })
      // A confidential client too: its secret is sealed at rest.
      const confidential = yield* agent.register({ token_endpoint_auth_method: "client_secret_post" })
      expect(confidential.client_secret).toBeDefined()
      const { challenge, verifier } = pkce()
      const code = yield* agent.code(confidential.client_id, challenge)
      const exchanged = yield* agent.token({
        grant_type: "authorization_code",
        code,
        code_verifier: verifier,
        redirect_uri: redirectUri,
        client_id: confidential.client_id,
        client_secret: confidential.client_secret!
      })
      expect(exchanged.status, exchanged.text).toBe(200)
      // The link works once.
      const again = yield* Effect.promise(() => TestBrowser.make().open(link))
      expect(again.body).toContain("used already or has expired")

      const secrets = [
        issued.access_token,
        issued.refresh_token,
        issued.code,
        refreshed.body.access_token,
        refreshed.body.refresh_token,
        confidential.client_secret!,
        exchanged.body.access_token,
        new URL(link).pathname.split("/").pop()!,
        browser.cookies("127.0.0.1").get("ar_session")!
      ]
      const output = world.node.output()
      const db = yield* database(world.databaseUrl)
      const tables = yield* Effect.promise(() =>
        db.query(
          `SELECT (SELECT string_agg(payload::text, ' ') FROM oauth_records) AS records,
            (SELECT string_agg(secret_hash::text, ' ') FROM console_sessions) AS sessions`
        )
      )
      const stored = JSON.stringify(tables.rows[0])
      for (const secret of secrets) {
        expect(secret.length).toBeGreaterThan(20)
        expect(output.includes(secret), "a secret in the node's logs").toBe(false)
        expect(stored.includes(secret), "a secret in the tables").toBe(false)
      }
    }))

  it.scoped("a console session acts as the account; its changes need the console's header; its cookie goes only where it is read", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      const { token: apiKey } = yield* TestWorld.tenantWithModel(world, "console", { login: "con@example.test" })
      const browser = TestBrowser.make()
      // Signing in with an API key on the sign-in page; a form posted from another site is refused.
      const forged = yield* Effect.promise(() =>
        browser.submit(`${rest}/sign-in/key`, { key: apiKey, next: "/sign-in" }, { origin: "https://evil.example" })
      )
      expect(forged.status).toBe(403)
      expect(browser.cookies("127.0.0.1").has("ar_session")).toBe(false)
      const wrong = yield* Effect.promise(() => browser.submit(`${rest}/sign-in/key`, { key: "art_nope", next: "/x" }))
      expect(wrong.body).toContain("not a live API key")
      const signing = yield* Effect.promise(() =>
        browser.submit(`${rest}/sign-in/key`, { key: apiKey, next: "/sign-in" }, { stopAt: `${rest}/sign-in` })
      )
      expect(signing.status).toBe(303)

      // The cookie, once for each path that reads it (HttpOnly, SameSite=Lax, 7 days; not Secure on loopback),
      // and none for `/`.
      const set = signing.headers.getSetCookie()
      expect(set.map(cookiePath).sort()).toEqual(["/console", "/oauth", "/sign-in", "/sign-out", "/v1"])
      const secret = browser.cookies("127.0.0.1").get("ar_session")!
      expect(secret.length).toBeGreaterThan(20)
      for (const line of set) {
        const [, maxAge] = /^ar_session=[^;]+; Max-Age=(\d+); Path=\/[a-z-0-9]+; HttpOnly; SameSite=Lax$/.exec(line)!
        expect(line).toContain(`ar_session=${secret};`)
        expect(Math.abs(Number(maxAge) - 7 * 86400)).toBeLessThan(60)
      }
      // As a browser decides (RFC 6265 path-match): sent to those paths and below, never to `/clients/*`.
      const sentTo = (path: string) => set.some((line) => TestBrowser.pathMatches(cookiePath(line), path))
      for (const path of ["/v1/me", "/oauth/consent/x", "/sign-in", "/sign-in/key", "/sign-out", "/console/agents"]) {
        expect(sentTo(path), path).toBe(true)
        expect(browser.cookies("127.0.0.1", path).get("ar_session"), path).toBe(secret)
      }
      for (const path of ["/clients/c_1/files/a", "/clients", "/", "/mcp", "/v10/me", "/consoles"]) {
        expect(sentTo(path), path).toBe(false)
        expect(browser.cookies("127.0.0.1", path).has("ar_session"), path).toBe(false)
      }
      // The sign-in page is sent it, and the API through the browser.
      expect((yield* Effect.promise(() => browser.open(`${rest}/sign-in`))).body).toContain("Signed in")
      const viaBrowser = yield* Effect.promise(() => browser.open(`${rest}/v1/me`))
      expect(viaBrowser.status).toBe(200)
      expect(JSON.parse(viaBrowser.body)).toMatchObject({ via: "console", login: "con@example.test" })
      const cookie = `ar_session=${secret}`

      const api = Http.client(rest)
      const me = yield* api.get("/v1/me", { headers: { cookie } })
      expect(me.status).toBe(200)
      expect(me.body).toMatchObject({ via: "console", login: "con@example.test" })
      const bare = yield* api.post("/v1/tokens", { headers: { cookie }, json: { name: "from the console" } })
      expect(bare.status).toBe(403)
      expect(bare.body.code).toBe("FORBIDDEN")
      const made = yield* api.post("/v1/tokens", {
        headers: { cookie, "x-agent-runtime-console": "1" },
        json: { name: "from the console" }
      })
      expect(made.status).toBe(201)

      // Signing out ends it on the API too, and expires the cookie on each path (and one set for `/` before).
      const out = yield* Effect.promise(() => browser.submit(`${rest}/sign-out`, {}, { stopAt: `${rest}/sign-in` }))
      expect(out.status).toBe(303)
      const expired = out.headers.getSetCookie()
      expect(expired.map(cookiePath).sort()).toEqual(["/", "/console", "/oauth", "/sign-in", "/sign-out", "/v1"])
      for (const line of expired) {
        expect(line).toMatch(/^ar_session=; Max-Age=0; Path=\/[a-z-0-9]*; HttpOnly; SameSite=Lax$/)
      }
      expect(browser.cookies("127.0.0.1").has("ar_session")).toBe(false)
      const outPage = yield* Effect.promise(() => browser.open(`${rest}/sign-in`))
      expect(outPage.body).toContain("Sign in to Agent Runtime")
      const ended = yield* api.get("/v1/me", { headers: { cookie } })
      expect(ended.status).toBe(401)
      expect(ended.body.code).toBe("UNAUTHORIZED")
    }))
})
