/**
 * The backend of the web_search builtin: one query answered by one of the
 * search-kind providers (Brave, Exa, Parallel), mapped to one result shape.
 *
 * A provider's key is found the way a model call finds its own: the agent's
 * key scope entry for the provider (its baseUrl replacing the API root, its
 * sealed headers sent), else the tenant's key or the operator's for it, else
 * the platform's. Every request goes out through the egress rules, and no
 * key reaches a log, an answer or an error.
 */
import { Egress } from "@agent-runtime/egress"
import type { PersistenceError } from "@agent-runtime/store"
import {
  Array as Arr,
  Config,
  type ConfigError,
  Context,
  Duration,
  Effect,
  Layer,
  Option,
  Redacted,
  Schema
} from "effect"
import type { KeySource } from "./Credentials.ts"
import * as Search from "./internal/search.ts"
import { Keys, toolProviders } from "./Keys.ts"
import { KeyScopes } from "./KeyScopes.ts"

export interface SearchRequest {
  readonly tenantId: string
  /** The agent's key scope: its entry for the provider comes before the tenant's keys. */
  readonly keyScope: Option.Option<string>
  readonly query: string
  /** Results wanted, 1 to 20 (a number outside is brought within); 5 when left out. */
  readonly count?: number | undefined
  /** One of `providers`; when left out, the first of them with a key. */
  readonly provider?: string | undefined
}

export interface SearchResult {
  readonly title: string
  readonly url: string
  /** Plain text, at most 1,000 characters. */
  readonly snippet: string
  /** The page's date as the provider gives it (an ISO date or date-time, or Brave's "2 days ago"). */
  readonly published?: string
}

export interface SearchResponse {
  readonly provider: string
  /** Whose key paid: a platform key's searches are billed to prepaid credit. */
  readonly source: KeySource
  readonly results: ReadonlyArray<SearchResult>
}

/** No search provider has a key for the tenant or its key scope (or the one asked for has none). */
export class SearchKeyMissing extends Schema.TaggedError<SearchKeyMissing>()("SearchKeyMissing", {
  provider: Schema.optional(Schema.String)
}) {
  override get message() {
    return this.provider === undefined
      ? "web search needs a key: set a brave or exa key (PUT /v1/keys/brave or PUT /v1/keys/exa)"
      : `no key for search provider ${this.provider}: set one with PUT /v1/keys/${this.provider}`
  }
}

/** The request names a provider that is not a search provider. */
export class UnknownSearchProvider extends Schema.TaggedError<UnknownSearchProvider>()("UnknownSearchProvider", {
  provider: Schema.String
}) {
  override get message() {
    return `${this.provider} is not a search provider (${providers.join(", ")})`
  }
}

/** The provider refused the key (401/403). */
export class SearchKeyInvalid extends Schema.TaggedError<SearchKeyInvalid>()("SearchKeyInvalid", {
  provider: Schema.String,
  status: Schema.Number
}) {
  override get message() {
    return `search provider ${this.provider} refused the key (${this.status})`
  }
}

/** The provider could not be reached, did not answer in time, or answered an error (429, 5xx, 4xx). */
export class SearchFailed extends Schema.TaggedError<SearchFailed>()("SearchFailed", {
  provider: Schema.String,
  /** The provider's status; absent when it never answered. */
  status: Schema.optional(Schema.Number),
  detail: Schema.String
}) {
  override get message() {
    return `search provider ${this.provider} failed${
      this.status === undefined ? "" : ` (${this.status})`
    }: ${this.detail}`
  }
}

/** The provider answered success with a body that is not its documented shape, or one over 2 MiB. */
export class SearchResponseInvalid extends Schema.TaggedError<SearchResponseInvalid>()("SearchResponseInvalid", {
  provider: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `search provider ${this.provider} sent an answer that could not be read: ${this.detail}`
  }
}

export type WebSearchError =
  | SearchKeyMissing
  | UnknownSearchProvider
  | SearchKeyInvalid
  | SearchFailed
  | SearchResponseInvalid

export interface Service {
  /**
   * Searches with the provider asked for, or the first with a key; results are at most `count`.
   * PersistenceError when the keys could not be read.
   */
  readonly search: (
    request: SearchRequest
  ) => Effect.Effect<SearchResponse, WebSearchError | PersistenceError.PersistenceError>
  /** The search providers with a key for this tenant and key scope, in the order `search` tries them. */
  readonly available: (
    tenantId: string,
    keyScope: Option.Option<string>
  ) => Effect.Effect<ReadonlyArray<string>, PersistenceError.PersistenceError>
}

export class WebSearch extends Context.Tag("@agent-runtime/models/WebSearch")<WebSearch, Service>() {}

/** The search providers, in the order a request that names none tries them. */
export const providers: ReadonlyArray<string> = toolProviders
  .filter((tool) => tool.kind === "search" && tool.id in Search.apis)
  .map((tool) => tool.id)

export interface Options {
  /** API roots replacing the public ones, by provider (a proxy; a fake in tests). A key scope's baseUrl still wins. */
  readonly roots?: Readonly<Record<string, string>>
}

const requestTimeout = Duration.seconds(15)
const maxResponseBytes = 2 * 1024 * 1024

const countOf = (count: number | undefined) =>
  count === undefined || !Number.isFinite(count) ? 5 : Math.min(20, Math.max(1, Math.round(count)))

/** Where one search goes, with which key and headers, and whose key it is. */
interface Target {
  readonly provider: string
  readonly api: Search.Api
  readonly root: string
  /** Absent for a gateway at the key scope entry's baseUrl that holds the key: no key header is sent. */
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  readonly headers: Record<string, string>
  readonly source: KeySource
}

export const make = (options: Options = {}) =>
  Effect.gen(function*() {
    const egress = yield* Egress.Egress
    const keys = yield* Keys
    const scopes = yield* KeyScopes

    /** The provider's key for the tenant and key scope, in the order `Credentials.resolve` uses for models. */
    const resolve = (tenantId: string, keyScope: Option.Option<string>, provider: string) =>
      Effect.gen(function*() {
        const api = Search.apis[provider]!
        const root = options.roots?.[provider] ?? api.root
        if (Option.isSome(keyScope)) {
          const entry = yield* scopes.find(tenantId, keyScope.value, provider)
          if (Option.isSome(entry)) {
            return Option.some<Target>({
              provider,
              api,
              root: Option.getOrElse(entry.value.baseUrl, () => root),
              apiKey: entry.value.apiKey,
              headers: entry.value.headers,
              source: "scope"
            })
          }
        }
        const key = yield* keys.find(tenantId, provider)
        return Option.map(key, (key): Target => ({
          provider,
          api,
          root,
          apiKey: Option.some(key.apiKey),
          headers: {},
          source: key.source
        }))
      })

    const target = (
      request: SearchRequest
    ): Effect.Effect<Target, SearchKeyMissing | UnknownSearchProvider | PersistenceError.PersistenceError> =>
      Effect.gen(function*() {
        const { provider } = request
        if (provider !== undefined) {
          if (!providers.includes(provider)) return yield* new UnknownSearchProvider({ provider })
          const found = yield* resolve(request.tenantId, request.keyScope, provider)
          if (Option.isNone(found)) return yield* new SearchKeyMissing({ provider })
          return found.value
        }
        for (const provider of providers) {
          const found = yield* resolve(request.tenantId, request.keyScope, provider)
          if (Option.isSome(found)) return found.value
        }
        return yield* new SearchKeyMissing()
      })

    /** One request to the provider and its answer read, within the time and size limits. */
    const call = (target: Target, query: string, count: number) =>
      Effect.gen(function*() {
        const { api, provider } = target
        const secrets = [...Option.toArray(Option.map(target.apiKey, Redacted.value)), ...Object.values(target.headers)]
        const failed = (detail: string, status?: number) =>
          new SearchFailed({ provider, detail, ...(status === undefined ? {} : { status }) })
        const request = api.request(target.root, query, count)
        // The entry's own headers first: the protocol's and the key header are not theirs to change.
        const headers = {
          ...target.headers,
          ...request.headers,
          ...Option.match(target.apiKey, {
            onNone: () => ({}),
            onSome: (key) => ({ [api.keyHeader]: Redacted.value(key) })
          })
        }
        const response = yield* egress.fetch(request.url, {
          method: request.method,
          headers,
          ...(request.body === undefined ? {} : { body: request.body })
        }).pipe(Effect.mapError((error) => failed(error.message)))
        const text = yield* Search.readText(response, maxResponseBytes).pipe(
          Effect.mapError(() => failed("the connection broke while reading the answer", response.status))
        )
        if (response.status === 401 || response.status === 403) {
          return yield* new SearchKeyInvalid({ provider, status: response.status })
        }
        if (!response.ok) {
          return yield* failed(Search.errorDetail(Option.getOrElse(text, () => ""), secrets), response.status)
        }
        if (Option.isNone(text)) {
          return yield* new SearchResponseInvalid({ provider, detail: "the answer is larger than 2 MiB" })
        }
        return yield* api.results(text.value).pipe(
          Effect.mapError((error) =>
            new SearchResponseInvalid({ provider, detail: Search.errorDetail(error.message, secrets) })
          )
        )
      }).pipe(
        Effect.timeoutFail({
          duration: requestTimeout,
          onTimeout: () => new SearchFailed({ provider: target.provider, detail: "no answer within 15 s" })
        })
      )

    const search = Effect.fn("WebSearch.search")(function*(request: SearchRequest) {
      const count = countOf(request.count)
      const found = yield* target(request)
      const results = yield* call(found, request.query, count)
      return {
        provider: found.provider,
        source: found.source,
        results: results.slice(0, count)
      } satisfies SearchResponse
    })

    const available = Effect.fn("WebSearch.available")(function*(tenantId: string, keyScope: Option.Option<string>) {
      const found = yield* Effect.forEach(providers, (provider) => resolve(tenantId, keyScope, provider))
      return Arr.getSomes(found).map((target) => target.provider)
    })

    return WebSearch.of({ search, available })
  })

/** `layer` with API roots of the caller's choosing. */
export const layerWith = (options: Options): Layer.Layer<WebSearch, never, Egress.Egress | Keys | KeyScopes> =>
  Layer.effect(WebSearch, make(options))

export const layer: Layer.Layer<WebSearch, never, Egress.Egress | Keys | KeyScopes> = layerWith({})

/**
 * `layer` with API roots from the environment: WEB_SEARCH_BRAVE_URL, WEB_SEARCH_EXA_URL and
 * WEB_SEARCH_PARALLEL_URL each replace that provider's public root (a proxy the operator runs).
 */
export const layerConfig: Layer.Layer<WebSearch, ConfigError.ConfigError, Egress.Egress | Keys | KeyScopes> = Layer
  .unwrapEffect(
    Effect.map(
      Config.all(Object.fromEntries(
        Object.keys(Search.apis).map((provider) => [
          provider,
          Config.option(Config.url(`WEB_SEARCH_${provider.toUpperCase()}_URL`))
        ])
      )),
      (found) =>
        layerWith({
          roots: Object.fromEntries(
            Object.entries(found).flatMap(([provider, url]) =>
              Option.isSome(url) ? [[provider, url.value.href.replace(/\/$/, "")]] : []
            )
          )
        })
    )
  )
