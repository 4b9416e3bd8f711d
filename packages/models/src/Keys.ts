/**
 * Keys for built-in providers: the tenant's own (source tenant), those the
 * operator set for a tenant (source admin), and platform keys paid by the
 * platform. Sealed at rest; only `last4` ever leaves.
 */
import { ApiError, Common, Provider } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { Catalog } from "./Catalog.ts"
import * as Secrets from "./internal/secrets.ts"
import * as Verify from "./internal/verify.ts"

/**
 * Web search APIs for web_search, and the page renderer web_fetch uses for
 * script-only pages. Their keys are set like model keys; there is no cheap
 * check for them, so they are stored unverified.
 */
export const toolProviders: ReadonlyArray<{ readonly id: string; readonly kind: Provider.ProviderKind }> = [
  { id: "brave", kind: "search" },
  { id: "exa", kind: "search" },
  { id: "parallel", kind: "search" },
  { id: "browserless", kind: "fetch" }
]

export interface StoredKey {
  readonly apiKey: Redacted.Redacted<string>
  readonly source: Provider.KeySource
}

interface KeyRow {
  readonly provider: string
  readonly source: Provider.KeySource
  readonly sealedKey: string
  readonly last4: string
  readonly setAt: number
}

export interface Service {
  /**
   * Checks a key with its provider, unless `input.verify` is false or the provider is a tool provider (those
   * have no cheap check); NotFound for no such built-in provider.
   */
  readonly check: (
    provider: string,
    input: Provider.KeyInput
  ) => Effect.Effect<Provider.KeyVerification, ApiError.NotFound>
  /** Checks, then stores the tenant's own key (source `admin` when the operator sets it); a refused key is not kept. */
  readonly setTenantKey: (
    tenantId: string,
    provider: string,
    input: Provider.KeyInput,
    source: "tenant" | "admin"
  ) => Effect.Effect<Provider.KeySet, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly deleteTenantKey: (
    tenantId: string,
    provider: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** Checks, then stores the key the platform pays for; a refused key is not kept. */
  readonly setPlatformKey: (
    provider: string,
    input: Provider.KeyInput
  ) => Effect.Effect<Provider.KeySet, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly deletePlatformKey: (
    provider: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** The key each provider's calls use for the tenant, by provider: its own or the operator's, else the platform's. */
  readonly statusMap: (
    tenantId: string
  ) => Effect.Effect<ReadonlyMap<string, Provider.KeyStatus>, PersistenceError.PersistenceError>
  /** The key a call of the tenant to `provider` uses, opened. */
  readonly find: (
    tenantId: string,
    provider: string
  ) => Effect.Effect<Option.Option<StoredKey>, PersistenceError.PersistenceError>
}

export class Keys extends Context.Tag("@agent-runtime/models/Keys")<Keys, Service>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const sealer = yield* SealedSecret.Sealer
  const catalog = yield* Catalog
  const egress = yield* Egress.Egress

  const builtin = (provider: string) =>
    Option.match(catalog.provider(provider), {
      onNone: () => Effect.fail(new ApiError.NotFound({ error: `no provider ${provider}` })),
      onSome: Effect.succeed
    })

  /** Checks the key with the provider when asked to, before storing it. */
  const check = (provider: string, input: Provider.KeyInput) =>
    Effect.gen(function*() {
      if (toolProviders.some((tool) => tool.id === provider)) {
        return new Provider.KeyVerification({ status: "unverified", detail: "not checked" })
      }
      const known = yield* builtin(provider)
      if (input.verify === false) return new Provider.KeyVerification({ status: "unverified", detail: "not checked" })
      const model = known.models[0]!
      return yield* Verify.verify(egress, {
        api: model.api,
        baseUrl: model.baseUrl,
        apiKey: Redacted.make(input.apiKey)
      })
    })

  /** Checks the key, then stores it with `save` unless the provider refused it (a refused key is not kept). */
  const checkThenSave = (
    provider: string,
    input: Provider.KeyInput,
    save: (last4: string) => Effect.Effect<unknown, SqlError>
  ) =>
    Effect.gen(function*() {
      const verification = yield* check(provider, input)
      const last4 = Secrets.last4(input.apiKey)
      if (verification.status !== "invalid") yield* PersistenceError.PersistenceError.refail(save(last4))
      return new Provider.KeySet({ provider, last4, verification })
    })

  const setTenantKey = (tenantId: string, provider: string, input: Provider.KeyInput, source: "tenant" | "admin") =>
    checkThenSave(provider, input, (last4) => {
      const sealedKey = sealer.seal(input.apiKey, Secrets.context.tenantKey(tenantId, provider))
      return sql`
        INSERT INTO tenant_keys ${sql.insert({ tenantId, provider, source, sealedKey, last4 })}
        ON CONFLICT (tenant_id, provider) DO UPDATE SET
          source = excluded.source, sealed_key = excluded.sealed_key, last4 = excluded.last4, set_at = now()`
    })

  const deleteTenantKey = (tenantId: string, provider: string) =>
    sql`DELETE FROM tenant_keys WHERE tenant_id = ${tenantId} AND provider = ${provider} RETURNING provider`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap(Common.deleted(provider, `no key for ${provider}`))
    )

  const setPlatformKey = (provider: string, input: Provider.KeyInput) =>
    checkThenSave(provider, input, (last4) => {
      const sealedKey = sealer.seal(input.apiKey, Secrets.context.platformKey(provider))
      return sql`
        INSERT INTO platform_keys ${sql.insert({ provider, sealedKey, last4 })}
        ON CONFLICT (provider) DO UPDATE SET sealed_key = excluded.sealed_key, last4 = excluded.last4, set_at = now()`
    })

  const deletePlatformKey = (provider: string) =>
    sql`DELETE FROM platform_keys WHERE provider = ${provider} RETURNING provider`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap(Common.deleted(provider, `no platform key for ${provider}`))
    )

  /** The keys a tenant's calls use (of one provider, or of all): its own or the operator's, else the platform's. */
  const statuses = (tenantId: string, provider?: string) => {
    const only = provider === undefined ? sql`` : sql`AND provider = ${provider}`
    return sql<KeyRow>`
      SELECT provider, source, sealed_key, last4, floor(extract(epoch from set_at))::float8 AS set_at
      FROM tenant_keys WHERE tenant_id = ${tenantId} ${only}
      UNION ALL
      SELECT provider, 'platform', sealed_key, last4, floor(extract(epoch from set_at))::float8
      FROM platform_keys WHERE provider NOT IN (SELECT provider FROM tenant_keys WHERE tenant_id = ${tenantId})
        ${only}`.pipe(PersistenceError.PersistenceError.refail)
  }

  const status = (row: KeyRow) =>
    new Provider.KeyStatus({ provider: row.provider, source: row.source, last4: row.last4, setAt: row.setAt })

  const statusMap = (tenantId: string) =>
    Effect.map(statuses(tenantId), (rows) => new Map(rows.map((row) => [row.provider, status(row)])))

  const find = (tenantId: string, provider: string) =>
    Effect.gen(function*() {
      const [row] = yield* statuses(tenantId, provider)
      if (row === undefined) return Option.none()
      const context = row.source === "platform"
        ? Secrets.context.platformKey(provider)
        : Secrets.context.tenantKey(tenantId, provider)
      // A stored key that does not open is no database fault but a sealing key missing from this node's
      // (SEALING_KEYS_PREVIOUS): a defect, as it always was.
      const apiKey = yield* Effect.orDie(sealer.open(row.sealedKey, context))
      return Option.some({ apiKey, source: row.source })
    })

  return Keys.of({ check, setTenantKey, deleteTenantKey, setPlatformKey, deletePlatformKey, statusMap, find })
})

export const layer: Layer.Layer<Keys, never, SqlClient.SqlClient | SealedSecret.Sealer | Catalog | Egress.Egress> =
  Layer.effect(Keys, make)
