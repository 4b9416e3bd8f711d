/**
 * web_search's backend through the real stack: the fake search provider
 * speaking Brave's, Exa's and Parallel's APIs over real HTTP through the
 * egress rules, keys sealed in the embedded PostgreSQL and found the way
 * model calls find theirs.
 */
import { Provider } from "@agent-runtime/domain"
import { Egress, Resolver } from "@agent-runtime/egress"
import { Catalog, Keys, KeyScopes, ModelsMigrations, WebSearch } from "@agent-runtime/models"
import type { WebSearch as WebSearchModule } from "@agent-runtime/models"
import { Database, SealedSecret } from "@agent-runtime/store"
import { FakeSearch, TestDatabase } from "@agent-runtime/testing"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Redacted, type Scope, TestClock } from "effect"
import * as Crypto from "node:crypto"

const tenantId = "tn_search"
/** The provider fake's key, set as the tenant's (or the operator's, or the platform's) key. */
const tenantKey = FakeSearch.defaultApiKey
/** The gateway fake's key, set in key scope entries. */
const scopeKey = "scope-key-9876543210fedcba"
const wrongKey = "wrong-key-00001111222233334444"
const keys = [tenantKey, scopeKey, wrongKey]

/** The models tables hang off the accounts package's `tenants`: a stand-in with the columns used here. */

const layerFor = (databaseUrl: string, options: WebSearchModule.Options, allowPrivate: boolean) =>
  WebSearch.layerWith(options).pipe(
    Layer.provideMerge(KeyScopes.layer),
    Layer.provideMerge(Keys.layer),
    Layer.provideMerge(Catalog.layer),
    Layer.provideMerge(Layer.mergeAll(
      Egress.layer({ allowPrivate }).pipe(Layer.provide(Resolver.layer)),
      SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))
    )),
    Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
      migrations: [TestDatabase.tenantsStandIn, WebhookMigrations.migrations, ModelsMigrations.migrations]
    }))
  )

type Services = Layer.Layer.Success<ReturnType<typeof layerFor>>

interface Fakes {
  /** Where the APIs' roots point: accepts `tenantKey`. */
  readonly provider: FakeSearch.FakeSearch
  /** A key scope's gateway: accepts `scopeKey`. */
  readonly gateway: FakeSearch.FakeSearch
}

/** Runs `body` with both fakes, a fresh database holding the tenant, and the search layer on it. */
const scenario = <A, E>(body: (fakes: Fakes) => Effect.Effect<A, E, Services | Scope.Scope>, allowPrivate = true) =>
  Effect.gen(function*() {
    const provider = yield* FakeSearch.start()
    const gateway = yield* FakeSearch.start({ apiKey: scopeKey })
    const databaseUrl = yield* TestDatabase.make
    const roots = { brave: provider.url, exa: provider.url, parallel: provider.url }
    const withTenant = Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`INSERT INTO tenants (id, name) VALUES (${tenantId}, 'search')`
    )
    return yield* Effect.zipRight(withTenant, body({ provider, gateway })).pipe(
      Effect.provide(layerFor(databaseUrl, { roots }, allowPrivate))
    )
  })

const setKey = (provider: string, apiKey: string, source: "tenant" | "admin" = "tenant") =>
  Effect.flatMap(Keys.Keys, (keys) => keys.setTenantKey(tenantId, provider, new Provider.KeyInput({ apiKey }), source))

const setPlatformKey = (provider: string, apiKey: string) =>
  Effect.flatMap(Keys.Keys, (keys) => keys.setPlatformKey(provider, new Provider.KeyInput({ apiKey })))

const setEntry = (
  scope: string,
  provider: string,
  input: ConstructorParameters<typeof Provider.KeyScopeEntryInput>[0]
) =>
  Effect.flatMap(
    KeyScopes.KeyScopes,
    (scopes) => scopes.put(tenantId, scope, provider, new Provider.KeyScopeEntryInput(input))
  )

const search = (request: Omit<WebSearchModule.SearchRequest, "tenantId" | "keyScope"> & { keyScope?: string }) =>
  Effect.flatMap(
    WebSearch.WebSearch,
    (service) => service.search({ ...request, tenantId, keyScope: Option.fromNullable(request.keyScope) })
  )

const available = (keyScope?: string) =>
  Effect.flatMap(WebSearch.WebSearch, (service) => service.available(tenantId, Option.fromNullable(keyScope)))

/** Neither the error's message nor any of its fields carries a key. */
const expectNoKeys = (error: unknown) => {
  const text = `${(error as Error).message} ${JSON.stringify(error)}`
  for (const key of keys) expect(text).not.toContain(key)
}

/** How each API must have been asked, per its public reference. */
const asked: Record<
  FakeSearch.Api,
  (request: FakeSearch.RecordedRequest, query: string, count: number, key: string) => void
> = {
  brave: (request, query, count, key) => {
    expect(request).toMatchObject({ method: "GET", path: "/res/v1/web/search", query: { q: query, count: `${count}` } })
    expect(request.headers["x-subscription-token"]).toBe(key)
    expect(request.headers.accept).toBe("application/json")
  },
  exa: (request, query, count, key) => {
    expect(request).toMatchObject({ method: "POST", path: "/search" })
    expect(request.body).toEqual({ query, numResults: count, contents: { text: { maxCharacters: 1000 } } })
    expect(request.headers["x-api-key"]).toBe(key)
    expect(request.headers["content-type"]).toBe("application/json")
  },
  parallel: (request, query, count, key) => {
    expect(request).toMatchObject({ method: "POST", path: "/v1beta/search" })
    expect(request.body).toEqual({
      search_queries: [query],
      max_results: count,
      excerpts: { max_chars_per_result: 1000 }
    })
    expect(request.headers["x-api-key"]).toBe(key)
  }
}

const published: Record<FakeSearch.Api, (date: string) => string> = {
  brave: (date) => `${date}T00:00:00`,
  exa: (date) => `${date}T00:00:00.000Z`,
  parallel: (date) => date
}

const apis: ReadonlyArray<FakeSearch.Api> = ["brave", "exa", "parallel"]

describe.each(apis)("%s", (api) => {
  it.scopedLive(
    "answers the mapped results, asked with the key, query and count as the API documents",
    () =>
      scenario(({ gateway, provider }) =>
        Effect.gen(function*() {
          yield* setKey(api, tenantKey)
          const query = "cats & <dogs>"
          const response = yield* search({ query, count: 3 })
          expect(response).toEqual({
            provider: api,
            source: "tenant",
            results: FakeSearch.resultsFor(query, 3).map((result) => ({
              title: result.title,
              url: result.url,
              snippet: result.snippet,
              published: published[api](result.date)
            }))
          })
          const [request, ...others] = provider.requests()
          expect(others).toEqual([])
          asked[api](request!, query, 3, tenantKey)
          expect(gateway.requests()).toEqual([])
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "a refused key is SearchKeyInvalid; 429 and 500 are SearchFailed; none quotes the key",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          yield* setKey(api, wrongKey)
          const refused = yield* Effect.flip(search({ query: "q" }))
          expect(refused).toMatchObject({ _tag: "SearchKeyInvalid", provider: api, status: 401 })
          expectNoKeys(refused)

          yield* setKey(api, tenantKey)
          provider.respondWith({ status: 429, body: JSON.stringify({ error: `slow down, key ${tenantKey}` }) })
          const limited = yield* Effect.flip(search({ query: "q" }))
          expect(limited).toMatchObject({ _tag: "SearchFailed", provider: api, status: 429 })
          expect(limited.message).toContain("slow down, key [redacted]")
          expectNoKeys(limited)

          provider.respondWith({ status: 500 })
          const failed = yield* Effect.flip(search({ query: "q" }))
          expect(failed).toMatchObject({ _tag: "SearchFailed", provider: api, status: 500 })
          expect(failed.message).toContain("internal server error")
          expectNoKeys(failed)
        })
      ),
    { timeout: 30_000 }
  )
})

describe("keys", () => {
  it.scopedLive(
    "a key scope entry comes first, at its baseUrl with its headers; the tenant key otherwise",
    () =>
      scenario(({ gateway, provider }) =>
        Effect.gen(function*() {
          yield* setKey("brave", tenantKey)
          yield* setEntry("team", "brave", { apiKey: scopeKey, baseUrl: gateway.url, headers: { "x-team": "blue" } })

          const scoped = yield* search({ query: "scoped", keyScope: "team" })
          expect(scoped).toMatchObject({ provider: "brave", source: "scope" })
          expect(scoped.results).toHaveLength(5)
          const [request] = gateway.requests()
          asked.brave(request!, "scoped", 5, scopeKey)
          expect(request!.headers["x-team"]).toBe("blue")
          expect(provider.requests()).toEqual([])

          const own = yield* search({ query: "own" })
          expect(own).toMatchObject({ provider: "brave", source: "tenant" })
          // A scope without an entry for the provider falls back to the tenant's key, as for models.
          const elsewhere = yield* search({ query: "elsewhere", keyScope: "other" })
          expect(elsewhere).toMatchObject({ provider: "brave", source: "tenant" })
          expect(provider.requests().map((request) => request.headers["x-subscription-token"])).toEqual([
            tenantKey,
            tenantKey
          ])
          expect(gateway.requests()).toHaveLength(1)
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "a gateway entry without a key sends no key header",
    () =>
      scenario(() =>
        Effect.gen(function*() {
          const open = yield* FakeSearch.start({ apiKey: null })
          yield* setEntry("gw", "exa", { baseUrl: open.url, headers: { "x-gateway-token": "gw-secret-123456" } })
          const response = yield* search({ query: "via gateway", keyScope: "gw" })
          expect(response).toMatchObject({ provider: "exa", source: "scope" })
          const [request] = open.requests()
          expect(request!.headers["x-api-key"]).toBeUndefined()
          expect(request!.headers["x-gateway-token"]).toBe("gw-secret-123456")
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "the platform's key when the tenant has none; the operator's key for the tenant before it",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          yield* setPlatformKey("exa", tenantKey)
          expect(yield* search({ query: "q" })).toMatchObject({ provider: "exa", source: "platform" })
          yield* setKey("exa", tenantKey, "admin")
          expect(yield* search({ query: "q" })).toMatchObject({ provider: "exa", source: "admin" })
          expect(provider.requests().map((request) => request.headers["x-api-key"])).toEqual([tenantKey, tenantKey])
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "providers are tried in order brave, exa, parallel; available lists those with a key",
    () =>
      scenario(({ gateway }) =>
        Effect.gen(function*() {
          expect(yield* available()).toEqual([])
          yield* setKey("parallel", tenantKey)
          expect(yield* search({ query: "q" })).toMatchObject({ provider: "parallel" })
          yield* setKey("exa", tenantKey)
          expect(yield* search({ query: "q" })).toMatchObject({ provider: "exa" })
          expect(yield* available()).toEqual(["exa", "parallel"])
          yield* setEntry("team", "brave", { apiKey: scopeKey, baseUrl: gateway.url })
          expect(yield* available("team")).toEqual(["brave", "exa", "parallel"])
          expect(yield* available()).toEqual(["exa", "parallel"])
          expect(yield* search({ query: "q", keyScope: "team" })).toMatchObject({ provider: "brave", source: "scope" })
          expect(yield* search({ query: "q", keyScope: "team", provider: "parallel" })).toMatchObject({
            provider: "parallel",
            source: "tenant"
          })
        })
      ),
    { timeout: 30_000 }
  )
})

describe("requests and failures", () => {
  it.scopedLive(
    "no key is SearchKeyMissing before any request; a provider that is not a search provider is refused",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          const missing = yield* Effect.flip(search({ query: "q" }))
          expect(missing).toMatchObject({ _tag: "SearchKeyMissing" })
          expect(missing.message).toContain("set a brave or exa key")
          yield* setKey("brave", tenantKey)
          const named = yield* Effect.flip(search({ query: "q", provider: "exa" }))
          expect(named).toMatchObject({ _tag: "SearchKeyMissing", provider: "exa" })
          const unknown = yield* Effect.flip(search({ query: "q", provider: "openai" }))
          expect(unknown).toMatchObject({ _tag: "UnknownSearchProvider", provider: "openai" })
          expect(provider.requests()).toEqual([])
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "count is 5 by default and kept within 1 to 20",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          yield* setKey("brave", tenantKey)
          expect((yield* search({ query: "q" })).results).toHaveLength(5)
          expect((yield* search({ query: "q", count: 50 })).results).toHaveLength(20)
          expect((yield* search({ query: "q", count: 0 })).results).toHaveLength(1)
          expect(provider.requests().map((request) => request.query.count)).toEqual(["5", "20", "1"])
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "an answer not in the API's shape, or over 2 MiB, is SearchResponseInvalid",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          yield* setKey("exa", tenantKey)
          provider.respondWith({ status: 200, body: "<html>maintenance</html>" })
          expect(yield* Effect.flip(search({ query: "q" }))).toMatchObject({
            _tag: "SearchResponseInvalid",
            provider: "exa"
          })
          provider.respondWith({ status: 200, body: JSON.stringify({ results: 5 }) })
          expect(yield* Effect.flip(search({ query: "q" }))).toMatchObject({ _tag: "SearchResponseInvalid" })
          provider.respondWith({
            status: 200,
            body: JSON.stringify({ results: [{ url: "https://example.test", text: "x".repeat(2 * 1024 * 1024) }] })
          })
          const large = yield* Effect.flip(search({ query: "q" }))
          expect(large).toMatchObject({ _tag: "SearchResponseInvalid" })
          expect(large.message).toContain("2 MiB")
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "an API root the egress rules refuse fails before any request",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          yield* setKey("brave", tenantKey)
          const refused = yield* Effect.flip(search({ query: "q" }))
          expect(refused).toMatchObject({ _tag: "SearchFailed", provider: "brave" })
          expect(refused.message).toContain("not_https")
          expect(provider.requests()).toEqual([])
        }), false),
    { timeout: 30_000 }
  )

  it.scoped(
    "a provider that does not answer in 15 seconds fails the search",
    () =>
      scenario(({ provider }) =>
        Effect.gen(function*() {
          yield* setKey("brave", tenantKey)
          provider.respondWith({ status: 200, delayMs: 60_000 })
          const fiber = yield* Effect.fork(Effect.flip(search({ query: "q" })))
          // Real time passes until the request is in; then the test clock moves past the limit.
          yield* Effect.promise(async () => {
            while (provider.requests().length === 0) await new Promise((resolve) => setTimeout(resolve, 10))
          })
          yield* TestClock.adjust("15 seconds")
          const timedOut = yield* Fiber.join(fiber)
          expect(timedOut).toMatchObject({ _tag: "SearchFailed", provider: "brave" })
          expect(timedOut.message).toContain("no answer within 15 s")
        })
      ),
    { timeout: 30_000 }
  )
})
