/**
 * Providers a tenant (scope "") or one of its key scopes runs itself: any
 * server speaking one of the three protocols at a base URL. Agents name
 * their models `<provider>/<id>`.
 */
import { ApiError, Common, Provider } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Cache, Context, Data, Duration, Effect, Layer, Option, Redacted, Schema } from "effect"
import { Catalog } from "./Catalog.ts"
import * as Secrets from "./internal/secrets.ts"

export interface Stored {
  readonly name: string
  readonly scope: string
  readonly provider: Provider.CustomProvider
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  readonly headers: Record<string, string>
  readonly last4: Option.Option<string>
  readonly setAt: number
}

interface Row {
  readonly name: string
  readonly scope: string
  readonly type: Provider.CustomProviderType
  readonly baseUrl: string
  readonly auth: Provider.CustomProviderAuth
  readonly sealedKey: string | null
  readonly last4: string | null
  readonly sealedHeaders: string | null
  readonly headerNames: ReadonlyArray<string>
  readonly models: unknown
  readonly setAt: number
}

const decodeModels = Schema.decodeUnknownSync(Schema.Array(Provider.CustomModel))

/**
 * How long a provider read for model calls is reused on a node: a change made through another node reaches
 * model calls here within it; one made through this node, at once.
 */
export const callCacheTimeToLive = Duration.seconds(1)

class ProviderKey extends Data.Class<{ readonly tenantId: string; readonly scope: string; readonly name: string }> {}

/** The model's output limit: as given, else 8,192 or half of a smaller context window. */
export const maxOutputTokens = (model: Provider.CustomModel) =>
  model.maxOutputTokens ?? Math.min(Provider.defaultMaxOutputTokens, Math.floor(model.contextWindow / 2))

export interface Service {
  /** The providers of the tenant (scope "") or of one of its key scopes, by name. */
  readonly list: (
    tenantId: string,
    scope: string
  ) => Effect.Effect<ReadonlyArray<Stored>, PersistenceError.PersistenceError>
  readonly find: (
    tenantId: string,
    scope: string,
    name: string
  ) => Effect.Effect<Option.Option<Stored>, PersistenceError.PersistenceError>
  /** `find` for model calls: reused for `callCacheTimeToLive`. */
  readonly forCall: (
    tenantId: string,
    scope: string,
    name: string
  ) => Effect.Effect<Option.Option<Stored>, PersistenceError.PersistenceError>
  readonly get: (
    tenantId: string,
    scope: string,
    name: string
  ) => Effect.Effect<Stored, ApiError.NotFound | PersistenceError.PersistenceError>
  /**
   * Saves the provider; `apiKey`/`headers` omitted keep what is stored, null removes it. InvalidRequest for
   * a built-in provider's name or a base URL the egress rules refuse.
   */
  readonly put: (
    tenantId: string,
    scope: string,
    name: string,
    input: Provider.CustomProviderInput
  ) => Effect.Effect<Stored, ApiError.InvalidRequest | ApiError.NotFound | PersistenceError.PersistenceError>
  readonly remove: (
    tenantId: string,
    scope: string,
    name: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** The API record of a stored provider: header names and last4, never values. */
  readonly toProvider: (stored: Stored) => Provider.Provider
}

export class CustomProviders extends Context.Tag("@agent-runtime/models/CustomProviders")<
  CustomProviders,
  Service
>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const sealer = yield* SealedSecret.Sealer
  const egress = yield* Egress.Egress
  const catalog = yield* Catalog

  const columns = sql`name, scope, type, base_url, auth, sealed_key, last4, sealed_headers, header_names, models,
    floor(extract(epoch from set_at))::float8 AS set_at`

  const open = (tenantId: string, row: Row) =>
    Effect.gen(function*() {
      const apiKey = row.sealedKey === null
        ? Option.none()
        : Option.some(yield* sealer.open(row.sealedKey, Secrets.context.customKey(tenantId, row.scope, row.name)))
      const headers = row.sealedHeaders === null
        ? {}
        : JSON.parse(
          Redacted.value(
            yield* sealer.open(row.sealedHeaders, Secrets.context.customHeaders(tenantId, row.scope, row.name))
          )
        ) as Record<string, string>
      const stored: Stored = {
        name: row.name,
        scope: row.scope,
        provider: new Provider.CustomProvider({
          type: row.type,
          baseUrl: row.baseUrl,
          auth: row.auth,
          headers: row.headerNames,
          models: decodeModels(row.models)
        }),
        apiKey,
        headers,
        last4: Option.fromNullable(row.last4),
        setAt: row.setAt
      }
      return stored
    }).pipe(
      // A sealed key or header that does not open is no database fault but a sealing key missing from this
      // node's (SEALING_KEYS_PREVIOUS): a defect, as it always was.
      Effect.orDie
    )

  const list = (tenantId: string, scope: string) =>
    sql<Row>`SELECT ${columns} FROM custom_providers WHERE tenant_id = ${tenantId} AND scope = ${scope} ORDER BY name`
      .pipe(
        PersistenceError.PersistenceError.refail,
        Effect.flatMap(Effect.forEach((row) => open(tenantId, row)))
      )

  const find = (tenantId: string, scope: string, name: string) =>
    sql<Row>`SELECT ${columns} FROM custom_providers
      WHERE tenant_id = ${tenantId} AND scope = ${scope} AND name = ${name}`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap((rows) =>
        rows.length === 0 ? Effect.succeed(Option.none()) : Effect.map(open(tenantId, rows[0]!), Option.some)
      )
    )

  // Read with every model call otherwise: a statement per turn.
  const forCalls = yield* Cache.make({
    capacity: 10_000,
    timeToLive: callCacheTimeToLive,
    lookup: (key: ProviderKey) => find(key.tenantId, key.scope, key.name)
  })

  const forCall = (tenantId: string, scope: string, name: string) =>
    forCalls.get(new ProviderKey({ tenantId, scope, name }))

  const forget = (tenantId: string, scope: string, name: string) =>
    forCalls.invalidate(new ProviderKey({ tenantId, scope, name }))

  const get = (tenantId: string, scope: string, name: string) =>
    Effect.flatMap(
      find(tenantId, scope, name),
      Option.match({
        onNone: () => Effect.fail(new ApiError.NotFound({ error: `no custom provider ${name}` })),
        onSome: Effect.succeed
      })
    )

  const put = (tenantId: string, scope: string, name: string, input: Provider.CustomProviderInput) =>
    Effect.gen(function*() {
      if (Option.isSome(catalog.provider(name))) {
        return yield* new ApiError.InvalidRequest({ error: `invalid request: name: ${name} is a built-in provider` })
      }
      yield* egress.check(input.baseUrl).pipe(
        Effect.mapError((error) => new ApiError.InvalidRequest({ error: `invalid request: baseUrl: ${error.message}` }))
      )
      const existing = yield* find(tenantId, scope, name)
      const keep = <A>(given: A | null | undefined, stored: Option.Option<A>) =>
        given === undefined ? Option.getOrUndefined(stored) : given ?? undefined
      const apiKey = keep(
        input.apiKey,
        Option.flatMap(existing, (stored) => Option.map(stored.apiKey, Redacted.value))
      )
      const headers = keep(input.headers, Option.map(existing, (stored) => stored.headers))
      const row = {
        tenantId,
        scope,
        name,
        type: input.type,
        baseUrl: input.baseUrl.replace(/\/$/, ""),
        auth: input.type === "anthropic-messages" ? input.auth ?? "x-api-key" : "bearer",
        sealedKey: apiKey === undefined
          ? null
          : sealer.seal(apiKey, Secrets.context.customKey(tenantId, scope, name)),
        last4: apiKey === undefined ? null : Secrets.last4(apiKey),
        sealedHeaders: headers === undefined || Object.keys(headers).length === 0
          ? null
          : sealer.seal(JSON.stringify(headers), Secrets.context.customHeaders(tenantId, scope, name)),
        headerNames: JSON.stringify(headers === undefined ? [] : Secrets.headerNames(headers)),
        models: JSON.stringify(Schema.encodeSync(Schema.Array(Provider.CustomModel))(input.models))
      }
      yield* sql`
        INSERT INTO custom_providers ${sql.insert(row)}
        ON CONFLICT (tenant_id, scope, name) DO UPDATE SET
          type = excluded.type, base_url = excluded.base_url, auth = excluded.auth, sealed_key = excluded.sealed_key,
          last4 = excluded.last4, sealed_headers = excluded.sealed_headers, header_names = excluded.header_names,
          models = excluded.models, set_at = now()`.pipe(PersistenceError.PersistenceError.refail)
      yield* forget(tenantId, scope, name)
      return yield* get(tenantId, scope, name)
    })

  const remove = (tenantId: string, scope: string, name: string) =>
    sql`DELETE FROM custom_providers WHERE tenant_id = ${tenantId} AND scope = ${scope} AND name = ${name}
      RETURNING name`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.tap(() => forget(tenantId, scope, name)),
      Effect.flatMap(Common.deleted(name, `no custom provider ${name}`))
    )

  const toProvider = (stored: Stored) =>
    new Provider.Provider({
      id: stored.name,
      kind: "model",
      models: stored.provider.models.length,
      apiKey: true,
      key: Option.match(stored.last4, {
        onNone: () => null,
        onSome: (last4) =>
          new Provider.KeyStatus({ provider: stored.name, source: "tenant", last4, setAt: stored.setAt })
      }),
      custom: stored.provider
    })

  return CustomProviders.of({ list, find, forCall, get, put, remove, toProvider })
})

export const layer: Layer.Layer<
  CustomProviders,
  never,
  SqlClient.SqlClient | SealedSecret.Sealer | Egress.Egress | Catalog
> = Layer.effect(CustomProviders, make)
