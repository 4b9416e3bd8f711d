/**
 * The model catalog: the protocol library's built-in providers and models,
 * overridden by an optional catalog file of ours (prices go stale), plus
 * the tenant's own custom models (see `CustomProviders`).
 */
import { Config, type ConfigError, Context, Effect, Layer, Option, Schema } from "effect"
import * as Fs from "node:fs/promises"
import * as Pi from "./internal/pi.ts"

export type CatalogModel = Pi.Model<Pi.Api>

export interface CatalogProvider {
  readonly id: string
  readonly name: string
  readonly models: ReadonlyArray<CatalogModel>
}

const Cost = Schema.Struct({
  input: Schema.Number,
  output: Schema.Number,
  cacheRead: Schema.Number,
  cacheWrite: Schema.Number
})

/**
 * An entry of the catalog file, keyed by `provider/model-id`. Fields given
 * replace the built-in ones; a model not in the built-in catalog needs at
 * least `api`, `baseUrl`, `contextWindow` and `maxTokens`.
 */
const Override = Schema.Struct({
  name: Schema.optional(Schema.String),
  api: Schema.optional(Schema.String),
  baseUrl: Schema.optional(Schema.String),
  reasoning: Schema.optional(Schema.Boolean),
  input: Schema.optional(Schema.Array(Schema.Literal("text", "image"))),
  contextWindow: Schema.optional(Schema.Number),
  maxTokens: Schema.optional(Schema.Number),
  cost: Schema.optional(Cost)
})

export const CatalogFile = Schema.Struct({
  models: Schema.Record({ key: Schema.String, value: Override })
})

export class CatalogError extends Schema.TaggedError<CatalogError>()("CatalogError", { message: Schema.String }) {}

const splitId = (id: string) => {
  const slash = id.indexOf("/")
  return slash <= 0 ? Option.none() : Option.some([id.slice(0, slash), id.slice(slash + 1)] as const)
}

export interface Service {
  /** Every provider, built in or from the catalog file, in id order. */
  readonly providers: ReadonlyArray<CatalogProvider>
  readonly provider: (id: string) => Option.Option<CatalogProvider>
  /** The model a `provider/model-id` names, if the catalog has it. */
  readonly find: (id: string) => Option.Option<CatalogModel>
}

export class Catalog extends Context.Tag("@agent-runtime/models/Catalog")<Catalog, Service>() {}

/** The built-in catalog with `file`'s entries over it; CatalogError for an entry it cannot take. */
export const make = (file: typeof CatalogFile.Type | undefined): Effect.Effect<Service, CatalogError> =>
  Effect.gen(function*() {
    const providers = new Map<string, { id: string; name: string; models: Map<string, CatalogModel> }>()
    for (const provider of Pi.builtins()) {
      providers.set(provider.id, {
        id: provider.id,
        name: provider.name,
        models: new Map(provider.models.map((model) => [model.id, model]))
      })
    }
    for (const [id, override] of Object.entries(file?.models ?? {})) {
      const [providerId, modelId] = yield* Option.match(splitId(id), {
        onNone: () => Effect.fail(new CatalogError({ message: `catalog file: "${id}" is not provider/model-id` })),
        onSome: Effect.succeed
      })
      const provider = providers.get(providerId) ??
        { id: providerId, name: providerId, models: new Map<string, CatalogModel>() }
      providers.set(providerId, provider)
      const base = provider.models.get(modelId)
      const merged = { ...base, ...override, id: modelId, provider: providerId } as Partial<CatalogModel>
      if (
        merged.api === undefined || merged.baseUrl === undefined || merged.contextWindow === undefined ||
        merged.maxTokens === undefined || !Pi.supportsApi(merged.api)
      ) {
        return yield* new CatalogError({
          message: `catalog file: "${id}" is new and needs a supported api, baseUrl, contextWindow and maxTokens`
        })
      }
      provider.models.set(modelId, {
        name: modelId,
        reasoning: false,
        input: ["text"],
        cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
        ...merged
      } as CatalogModel)
    }
    const list: ReadonlyArray<CatalogProvider> = [...providers.values()]
      .map((provider) => ({ id: provider.id, name: provider.name, models: [...provider.models.values()] }))
      .sort((a, b) => a.id.localeCompare(b.id))
    return Catalog.of({
      providers: list,
      provider: (id: string) => Option.fromNullable(list.find((provider) => provider.id === id)),
      find: (id: string) =>
        Option.flatMap(
          splitId(id),
          ([providerId, modelId]) => Option.fromNullable(providers.get(providerId)?.models.get(modelId))
        )
    })
  })

/** The catalog file MODEL_CATALOG_FILE names, if it names one. */
const configuredFile = Effect.gen(function*() {
  const path = yield* Config.option(Config.string("MODEL_CATALOG_FILE"))
  return yield* Option.match(path, {
    onNone: () => Effect.succeed(undefined),
    onSome: (path) =>
      Effect.tryPromise({
        try: () => Fs.readFile(path, "utf8"),
        catch: () => new CatalogError({ message: `cannot read MODEL_CATALOG_FILE ${path}` })
      }).pipe(
        Effect.flatMap(Schema.decode(Schema.parseJson(CatalogFile))),
        Effect.mapError((error) =>
          error._tag === "CatalogError"
            ? error
            : new CatalogError({ message: `MODEL_CATALOG_FILE: ${error.message}` })
        )
      )
  })
})

/** The catalog with MODEL_CATALOG_FILE's entries, when it is set. */
export const layer: Layer.Layer<Catalog, CatalogError | ConfigError.ConfigError> = Layer.effect(
  Catalog,
  Effect.flatMap(configuredFile, make)
)
