/**
 * What a tenant sees of the model layer: the models it may name, the
 * providers with their key status, and its default model.
 */
import { ApiError, Model, Provider } from "@agent-runtime/domain"
import type { PersistenceError } from "@agent-runtime/store"
import { Config, type ConfigError, Context, Effect, Layer, Option } from "effect"
import { Catalog, type CatalogModel } from "./Catalog.ts"
import { toCatalogModel } from "./Credentials.ts"
import { CustomProviders } from "./CustomProviders.ts"
import { Keys, toolProviders } from "./Keys.ts"
import { KeyScopes } from "./KeyScopes.ts"

const toModel = (model: CatalogModel, available: boolean) =>
  new Model.Model({
    id: `${model.provider}/${model.id}`,
    provider: model.provider,
    modelId: model.id,
    name: model.name,
    api: model.api,
    reasoning: model.reasoning,
    input: model.input,
    contextWindow: model.contextWindow,
    maxTokens: model.maxTokens,
    cost: new Model.ModelCost(model.cost),
    available
  })

export interface Service {
  /** The models the tenant may name: the catalog's (available when their provider has a key) and its own. */
  readonly models: (tenantId: string) => Effect.Effect<ReadonlyArray<Model.Model>, PersistenceError.PersistenceError>
  /** The built-in, tool and custom providers, with the key each uses for the tenant. */
  readonly providers: (
    tenantId: string
  ) => Effect.Effect<ReadonlyArray<Provider.Provider>, PersistenceError.PersistenceError>
  readonly provider: (
    tenantId: string,
    id: string
  ) => Effect.Effect<Provider.Provider, ApiError.NotFound | PersistenceError.PersistenceError>
  /**
   * The first of DEFAULT_MODELS whose provider the tenant has a key for (a key scope's entries count for an
   * agent with that scope), else the first of them.
   */
  readonly defaultModel: (
    tenantId: string,
    keyScope?: Option.Option<string>
  ) => Effect.Effect<string, PersistenceError.PersistenceError>
}

export class Listing extends Context.Tag("@agent-runtime/models/Listing")<Listing, Service>() {}

export const make = Effect.gen(function*() {
  const catalog = yield* Catalog
  const keys = yield* Keys
  const custom = yield* CustomProviders
  const scopes = yield* KeyScopes
  const defaults = yield* Config.array(Config.string(), "DEFAULT_MODELS").pipe(
    Config.withDefault(["anthropic/claude-sonnet-4-5", "openai/gpt-5.1", "google/gemini-2.5-pro"])
  )

  const models = (tenantId: string) =>
    Effect.gen(function*() {
      const statuses = yield* keys.statusMap(tenantId)
      const own = yield* custom.list(tenantId, "")
      return [
        ...catalog.providers.flatMap((provider) =>
          provider.models.map((model) => toModel(model, statuses.has(provider.id)))
        ),
        ...own.flatMap((stored) => stored.provider.models.map((model) => toModel(toCatalogModel(stored, model), true)))
      ]
    })

  const providers = (tenantId: string) =>
    Effect.gen(function*() {
      const statuses = yield* keys.statusMap(tenantId)
      const own = yield* custom.list(tenantId, "")
      return [
        ...catalog.providers.map((provider) =>
          new Provider.Provider({
            id: provider.id,
            kind: "model",
            models: provider.models.length,
            apiKey: true,
            key: statuses.get(provider.id) ?? null
          })
        ),
        ...toolProviders.map(({ id, kind }) =>
          new Provider.Provider({ id, kind, models: 0, apiKey: true, key: statuses.get(id) ?? null })
        ),
        ...own.map(custom.toProvider)
      ]
    })

  const provider = (tenantId: string, id: string) =>
    Effect.flatMap(
      providers(tenantId),
      (all) =>
        Option.match(Option.fromNullable(all.find((provider) => provider.id === id)), {
          onNone: () => Effect.fail(new ApiError.NotFound({ error: `no provider ${id}` })),
          onSome: Effect.succeed
        })
    )

  const defaultModel = (tenantId: string, keyScope: Option.Option<string> = Option.none()) =>
    Effect.gen(function*() {
      const statuses = yield* keys.statusMap(tenantId)
      // A scope with no entries (NotFound) adds none; a database fault is the caller's to see.
      const scoped = Option.isNone(keyScope)
        ? new Set<string>()
        : new Set(
          yield* scopes.get(tenantId, keyScope.value).pipe(
            Effect.map((scope) => scope.providers.map((entry) => entry.provider)),
            Effect.catchTag("NotFound", () => Effect.succeed([]))
          )
        )
      const usable = (id: string) => {
        const provider = id.split("/")[0]!
        return statuses.has(provider) || scoped.has(provider)
      }
      return defaults.find(usable) ?? defaults[0] ?? ""
    })

  return Listing.of({ models, providers, provider, defaultModel })
})

/** The listing, its default models from DEFAULT_MODELS. */
export const layer: Layer.Layer<
  Listing,
  ConfigError.ConfigError,
  Catalog | CustomProviders | Keys | KeyScopes
> = Layer.effect(Listing, make)
