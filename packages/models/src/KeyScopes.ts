/**
 * Key scopes: named sets of provider entries (a key, a base URL replacing
 * the provider's API root, sealed headers, a region) that an agent's model
 * calls use before the tenant's own keys.
 */
import { ApiError, Common, Provider } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { Catalog } from "./Catalog.ts"
import * as Secrets from "./internal/secrets.ts"
import * as Keys from "./Keys.ts"

export interface StoredEntry {
  readonly provider: string
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  readonly baseUrl: Option.Option<string>
  readonly headers: Record<string, string>
  readonly region: Option.Option<string>
}

interface Row {
  readonly scope: string
  readonly provider: string
  readonly sealedKey: string | null
  readonly last4: string | null
  readonly baseUrl: string | null
  readonly sealedHeaders: string | null
  readonly headerNames: ReadonlyArray<string>
  readonly region: string | null
  readonly setAt: number
}

const toEntry = (row: Row) =>
  new Provider.KeyScopeEntry({
    provider: row.provider,
    setAt: row.setAt,
    ...(row.last4 === null ? {} : { last4: row.last4 }),
    ...(row.baseUrl === null ? {} : { baseUrl: row.baseUrl }),
    ...(row.region === null ? {} : { region: row.region }),
    ...(row.headerNames.length === 0 ? {} : { headers: row.headerNames })
  })

export interface Service {
  readonly list: (
    tenantId: string
  ) => Effect.Effect<ReadonlyArray<Provider.KeyScope>, PersistenceError.PersistenceError>
  /** A scope with its entries; NotFound for a scope with none. */
  readonly get: (
    tenantId: string,
    scope: string
  ) => Effect.Effect<Provider.KeyScope, ApiError.NotFound | PersistenceError.PersistenceError>
  /**
   * Sets one provider's entry, replaced whole: NotFound for a provider neither built in nor a tool provider,
   * InvalidRequest for an entry with neither a key nor a base URL, or a base URL the egress rules refuse.
   */
  readonly put: (
    tenantId: string,
    scope: string,
    provider: string,
    input: Provider.KeyScopeEntryInput
  ) => Effect.Effect<
    Provider.KeyScopeEntry,
    ApiError.InvalidRequest | ApiError.NotFound | PersistenceError.PersistenceError
  >
  /** Sets the entry's key the `KeyInput` way: checked with the provider first unless verify is false. */
  readonly putKey: (
    tenantId: string,
    scope: string,
    provider: string,
    input: Provider.KeyInput
  ) => Effect.Effect<Provider.KeySet, ApiError.InvalidRequest | ApiError.NotFound | PersistenceError.PersistenceError>
  readonly removeEntry: (
    tenantId: string,
    scope: string,
    provider: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** Removes the scope: its entries and its own custom providers. */
  readonly remove: (
    tenantId: string,
    scope: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** The entry a call through `scope` uses for `provider`, its secrets opened. */
  readonly find: (
    tenantId: string,
    scope: string,
    provider: string
  ) => Effect.Effect<Option.Option<StoredEntry>, PersistenceError.PersistenceError>
}

export class KeyScopes extends Context.Tag("@agent-runtime/models/KeyScopes")<KeyScopes, Service>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const sealer = yield* SealedSecret.Sealer
  const egress = yield* Egress.Egress
  const catalog = yield* Catalog
  const keys = yield* Keys.Keys

  const columns = sql`scope, provider, sealed_key, last4, base_url, sealed_headers, header_names, region,
    floor(extract(epoch from set_at))::float8 AS set_at`

  const rows = (tenantId: string, scope: Option.Option<string>, provider?: string) =>
    sql<Row>`SELECT ${columns} FROM key_scope_entries WHERE tenant_id = ${tenantId}
      ${Option.match(scope, { onNone: () => sql``, onSome: (scope) => sql`AND scope = ${scope}` })}
      ${provider === undefined ? sql`` : sql`AND provider = ${provider}`}
      ORDER BY scope, provider`.pipe(PersistenceError.PersistenceError.refail)

  const list = (tenantId: string) =>
    Effect.map(rows(tenantId, Option.none()), (all) => {
      const scopes = new Map<string, Array<Provider.KeyScopeEntry>>()
      for (const row of all) scopes.set(row.scope, [...(scopes.get(row.scope) ?? []), toEntry(row)])
      return [...scopes].map(([scope, providers]) => new Provider.KeyScope({ scope, providers }))
    })

  const get = (tenantId: string, scope: string) =>
    Effect.flatMap(rows(tenantId, Option.some(scope)), (entries) =>
      entries.length === 0
        ? Effect.fail(new ApiError.NotFound({ error: `no key scope ${scope}` }))
        : Effect.succeed(new Provider.KeyScope({ scope, providers: entries.map(toEntry) })))

  /** Sets one provider's entry; the entry is replaced whole. */
  const put = (tenantId: string, scope: string, provider: string, input: Provider.KeyScopeEntryInput) =>
    Effect.gen(function*() {
      // Tool providers (web_search's, web_fetch's renderer) take entries too: their own key or gateway per scope.
      if (Option.isNone(catalog.provider(provider)) && !Keys.toolProviders.some((tool) => tool.id === provider)) {
        return yield* new ApiError.NotFound({ error: `no provider ${provider}` })
      }
      if (input.apiKey === undefined && input.baseUrl === undefined) {
        return yield* new ApiError.InvalidRequest({
          error: "invalid request: an entry needs an apiKey, or a baseUrl of a gateway that holds the key"
        })
      }
      if (input.baseUrl !== undefined) {
        yield* egress.check(input.baseUrl).pipe(
          Effect.mapError((error) =>
            new ApiError.InvalidRequest({ error: `invalid request: baseUrl: ${error.message}` })
          )
        )
      }
      const headers = input.headers ?? {}
      const row = {
        tenantId,
        scope,
        provider,
        sealedKey: input.apiKey === undefined
          ? null
          : sealer.seal(input.apiKey, Secrets.context.scopeKey(tenantId, scope, provider)),
        last4: input.apiKey === undefined ? null : Secrets.last4(input.apiKey),
        baseUrl: input.baseUrl?.replace(/\/$/, "") ?? null,
        sealedHeaders: Object.keys(headers).length === 0
          ? null
          : sealer.seal(JSON.stringify(headers), Secrets.context.scopeHeaders(tenantId, scope, provider)),
        headerNames: JSON.stringify(Secrets.headerNames(headers)),
        region: input.region ?? null
      }
      // The saved row comes back from the same statement: read again after it, a concurrent delete of the
      // scope left nothing to read (and the answer was a 500).
      const [saved] = yield* sql<Row>`
        INSERT INTO key_scope_entries ${sql.insert(row)}
        ON CONFLICT (tenant_id, scope, provider) DO UPDATE SET
          sealed_key = excluded.sealed_key, last4 = excluded.last4, base_url = excluded.base_url,
          sealed_headers = excluded.sealed_headers, header_names = excluded.header_names, region = excluded.region,
          set_at = now()
        RETURNING ${columns}`.pipe(PersistenceError.PersistenceError.refail)
      return toEntry(saved!)
    })

  /** Sets the scope's key for a provider the KeyInput way: checked with the provider first unless verify is false. */
  const putKey = (tenantId: string, scope: string, provider: string, input: Provider.KeyInput) =>
    Effect.gen(function*() {
      const verification = yield* keys.check(provider, input)
      if (verification.status !== "invalid") {
        yield* put(tenantId, scope, provider, new Provider.KeyScopeEntryInput({ apiKey: input.apiKey }))
      }
      return new Provider.KeySet({ provider, last4: Secrets.last4(input.apiKey), verification })
    })

  const removeEntry = (tenantId: string, scope: string, provider: string) =>
    sql`DELETE FROM key_scope_entries WHERE tenant_id = ${tenantId} AND scope = ${scope} AND provider = ${provider}
      RETURNING provider`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap(Common.deleted(provider, `no entry for ${provider} in key scope ${scope}`))
    )

  /** Removes the scope: its entries and its own providers. */
  const remove = (tenantId: string, scope: string) =>
    Effect.gen(function*() {
      const entries = yield* sql`DELETE FROM key_scope_entries WHERE tenant_id = ${tenantId} AND scope = ${scope}
        RETURNING provider`
      const providers = yield* sql`DELETE FROM custom_providers WHERE tenant_id = ${tenantId} AND scope = ${scope}
        RETURNING name`
      return yield* Common.deleted(scope, `no key scope ${scope}`)([...entries, ...providers])
    }).pipe(
      sql.withTransaction,
      Effect.catchTag("SqlError", (cause) => new PersistenceError.PersistenceError({ cause }))
    )

  /** The entry a call through `scope` uses for `provider`, secrets opened. */
  const find = (tenantId: string, scope: string, provider: string) =>
    Effect.gen(function*() {
      const [row] = yield* rows(tenantId, Option.some(scope), provider)
      if (row === undefined) return Option.none<StoredEntry>()
      const apiKey = row.sealedKey === null
        ? Option.none()
        : Option.some(yield* sealer.open(row.sealedKey, Secrets.context.scopeKey(tenantId, scope, provider)))
      const headers = row.sealedHeaders === null ? {} : JSON.parse(
        Redacted.value(yield* sealer.open(row.sealedHeaders, Secrets.context.scopeHeaders(tenantId, scope, provider)))
      ) as Record<string, string>
      return Option.some<StoredEntry>({
        provider,
        apiKey,
        baseUrl: Option.fromNullable(row.baseUrl),
        headers,
        region: Option.fromNullable(row.region)
      })
    }).pipe(
      // An entry's secret that does not open is no database fault but a sealing key missing from this node's
      // (SEALING_KEYS_PREVIOUS): a defect, as it always was.
      Effect.catchTag("SealedSecretError", Effect.die)
    )

  return KeyScopes.of({ list, get, put, putKey, removeEntry, remove, find })
})

/** The service with its `Keys`, which checks a key set the `KeyInput` way. */
export const layer: Layer.Layer<
  KeyScopes,
  never,
  SqlClient.SqlClient | SealedSecret.Sealer | Egress.Egress | Catalog
> = Layer.effect(KeyScopes, make).pipe(Layer.provide(Keys.layer))
