/**
 * Which endpoint and key a model call uses. Resolution order: the agent's
 * key scope (its own providers, then its entry for the model's provider),
 * then the tenant's own providers and keys (or the operator's for it), then
 * platform keys.
 */
import type { Provider } from "@agent-runtime/domain"
import type { PersistenceError } from "@agent-runtime/store"
import { Context, Effect, Layer, Option, type Redacted } from "effect"
import { Catalog, type CatalogModel } from "./Catalog.ts"
import { CustomProviders, maxOutputTokens, type Stored } from "./CustomProviders.ts"
import { Keys } from "./Keys.ts"
import { KeyScopes } from "./KeyScopes.ts"
import { ModelKeyMissing, UnknownModel } from "./ModelError.ts"

export type KeySource = Provider.KeySource | "scope"

export interface Target {
  /** `provider/model-id`, as the caller named it. */
  readonly id: string
  readonly provider: string
  /** The protocol-level model, its base URL already replaced where a key scope says so. */
  readonly model: CatalogModel
  /** Absent for a gateway at the base URL that holds the key: no auth header is sent. */
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  /** The messages type sends its key as x-api-key unless the provider says bearer. */
  readonly bearer: boolean
  /** Sealed headers of the key scope entry or custom provider, sent before modelHeaders. */
  readonly headers: Record<string, string>
  readonly source: KeySource
  readonly keyScope: Option.Option<string>
}

export interface Request {
  readonly tenantId: string
  readonly keyScope: Option.Option<string>
  readonly model: string
}

export const splitModelId = (id: string) => {
  const slash = id.indexOf("/")
  return slash <= 0 ? Option.none() : Option.some({ provider: id.slice(0, slash), modelId: id.slice(slash + 1) })
}

/** A custom provider's model in the protocol library's terms. */
export const toCatalogModel = (stored: Stored, model: Provider.CustomModel): CatalogModel => ({
  id: model.id,
  name: model.id,
  api: stored.provider.type,
  provider: stored.name,
  baseUrl: stored.provider.baseUrl,
  reasoning: model.reasoning ?? false,
  input: [...(model.input ?? ["text"])],
  cost: {
    input: model.pricing?.input ?? 0,
    output: model.pricing?.output ?? 0,
    cacheRead: model.pricing?.cacheRead ?? 0,
    cacheWrite: model.pricing?.cacheWrite ?? 0
  },
  contextWindow: model.contextWindow,
  maxTokens: maxOutputTokens(model),
  ...(model.compat === undefined ? {} : { compat: { ...model.compat } as NonNullable<CatalogModel["compat"]> })
})

export interface Service {
  /**
   * The endpoint, model and key a call for `request.model` uses, in the order above. UnknownModel for a model
   * no provider the tenant can use has; ModelKeyMissing when its provider has no key anywhere.
   */
  readonly resolve: (
    request: Request
  ) => Effect.Effect<Target, UnknownModel | ModelKeyMissing | PersistenceError.PersistenceError>
}

export class Credentials extends Context.Tag("@agent-runtime/models/Credentials")<Credentials, Service>() {}

export const make = Effect.gen(function*() {
  const catalog = yield* Catalog
  const keys = yield* Keys
  const scopes = yield* KeyScopes
  const custom = yield* CustomProviders

  const fromCustom = (request: Request, stored: Stored, modelId: string, source: KeySource) =>
    Option.match(Option.fromNullable(stored.provider.models.find((model) => model.id === modelId)), {
      onNone: () => Effect.fail(new UnknownModel({ model: request.model })),
      onSome: (model) =>
        Effect.succeed<Target>({
          id: request.model,
          provider: stored.name,
          model: toCatalogModel(stored, model),
          apiKey: stored.apiKey,
          bearer: stored.provider.auth === "bearer",
          headers: stored.headers,
          source,
          keyScope: stored.scope === "" ? Option.none() : Option.some(stored.scope)
        })
    })

  const resolve = (request: Request) =>
    Effect.gen(function*() {
      const { modelId, provider } = yield* Option.match(splitModelId(request.model), {
        onNone: () => Effect.fail(new UnknownModel({ model: request.model })),
        onSome: Effect.succeed
      })
      if (Option.isSome(request.keyScope)) {
        const scope = request.keyScope.value
        const scoped = yield* custom.forCall(request.tenantId, scope, provider)
        if (Option.isSome(scoped)) return yield* fromCustom(request, scoped.value, modelId, "scope")
        const entry = yield* scopes.find(request.tenantId, scope, provider)
        const model = catalog.find(request.model)
        if (Option.isSome(entry) && Option.isSome(model)) {
          return {
            id: request.model,
            provider,
            model: Option.match(entry.value.baseUrl, {
              onNone: () => model.value,
              onSome: (baseUrl) => ({ ...model.value, baseUrl })
            }),
            apiKey: entry.value.apiKey,
            bearer: false,
            headers: entry.value.headers,
            source: "scope",
            keyScope: request.keyScope
          } satisfies Target
        }
      }
      const own = yield* custom.forCall(request.tenantId, "", provider)
      if (Option.isSome(own)) return yield* fromCustom(request, own.value, modelId, "tenant")
      const model = yield* Option.match(catalog.find(request.model), {
        onNone: () => Effect.fail(new UnknownModel({ model: request.model })),
        onSome: Effect.succeed
      })
      const key = yield* keys.find(request.tenantId, provider)
      if (Option.isNone(key)) return yield* new ModelKeyMissing({ provider })
      return {
        id: request.model,
        provider,
        model,
        apiKey: Option.some(key.value.apiKey),
        bearer: false,
        headers: {},
        source: key.value.source,
        keyScope: Option.none()
      } satisfies Target
    })

  return Credentials.of({ resolve })
})

export const layer: Layer.Layer<Credentials, never, Catalog | CustomProviders | Keys | KeyScopes> = Layer.effect(
  Credentials,
  make
)
