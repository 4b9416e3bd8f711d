/**
 * A tenant's trace export settings: the endpoint (checked by the egress
 * rules when saved, and again at every export), headers sealed at rest and
 * never shown again, and what the nodes last heard from the endpoint.
 */
import { ApiError, Telemetry } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Duration, Effect, identity, Layer, Option, Redacted } from "effect"

/** What an export needs: the settings with the headers opened. */
export interface Target {
  readonly endpoint: string
  readonly headers: Redacted.Redacted<Readonly<Record<string, string>>>
  readonly protocol: Telemetry.TelemetryProtocol
  readonly sampleRate: number
  readonly includeContent: boolean
}

export type ExportResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly error: string }

export class TelemetrySettings extends Context.Tag("@agent-runtime/telemetry/TelemetrySettings")<TelemetrySettings, {
  /** The settings with their status; none when the tenant exports nothing. */
  readonly get: (
    tenantId: string
  ) => Effect.Effect<Option.Option<Telemetry.TelemetrySettings>, PersistenceError.PersistenceError>
  /** Changes what is given; the first needs `endpoint`. Headers stay while the endpoint keeps its origin. */
  readonly put: (
    tenantId: string,
    input: Telemetry.TelemetryInput
  ) => Effect.Effect<Telemetry.TelemetrySettings, ApiError.InvalidRequest | PersistenceError.PersistenceError>
  /** Stops export; whether anything was set. */
  readonly clear: (tenantId: string) => Effect.Effect<Telemetry.TelemetryCleared, PersistenceError.PersistenceError>
  /**
   * The export target, read at most once per `cacheMillis` per tenant on this node: a change made on another
   * node applies to runs starting after that. A read not answered `within` fails; a target this node holds is
   * answered at once, with no bound to set up.
   */
  readonly target: (
    tenantId: string,
    options?: { readonly within?: Duration.DurationInput }
  ) => Effect.Effect<Option.Option<Target>, PersistenceError.PersistenceError>
  /** What an export heard: a success, or the error since the last success. */
  readonly recordExport: (
    tenantId: string,
    result: ExportResult
  ) => Effect.Effect<void, PersistenceError.PersistenceError>
}>() {}

/** How long a node keeps a tenant's target before reading it again. */
export const cacheMillis = 2000

/** What the headers are sealed to: the tenant, so sealed headers copied to another row do not open. */
const sealingContext = (tenantId: string) => `telemetry-headers:${tenantId}`

interface Row {
  readonly endpoint: string
  readonly sealedHeaders: string | null
  readonly headerNames: ReadonlyArray<string>
  readonly protocol: Telemetry.TelemetryProtocol
  readonly sampleRate: number
  readonly includeContent: boolean
  readonly preset: Telemetry.TelemetryPreset | null
  readonly updatedAt: number
  readonly lastExportAt: number | null
  readonly lastError: string | null
  readonly lastErrorAt: number | null
}

const epoch = (column: string) => `floor(extract(epoch from ${column}))::float8 AS ${column}`
const columns = `endpoint, sealed_headers, header_names, protocol, sample_rate, include_content, preset,
  ${epoch("updated_at")}, ${epoch("last_export_at")}, last_error, ${epoch("last_error_at")}`

/** A collector's base URL (no path) gets the OTLP traces path, as OTEL_EXPORTER_OTLP_ENDPOINT does. */
export const tracesUrl = (endpoint: string) => {
  const url = new URL(endpoint)
  if (url.pathname === "/" || url.pathname === "") url.pathname = "/v1/traces"
  return url.toString()
}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const egress = yield* Egress.Egress
  const sealer = yield* SealedSecret.Sealer
  const fields = sql.unsafe(columns)
  const cache = new Map<string, { readonly at: number; readonly target: Option.Option<Target> }>()

  const toSettings = (row: Row) =>
    new Telemetry.TelemetrySettings({
      endpoint: row.endpoint,
      headers: row.headerNames,
      protocol: row.protocol,
      sampleRate: row.sampleRate,
      include: { content: row.includeContent },
      preset: row.preset,
      updatedAt: row.updatedAt,
      status: new Telemetry.TelemetryStatus({
        lastExportAt: row.lastExportAt,
        lastError: row.lastError,
        lastErrorAt: row.lastErrorAt
      })
    })

  const read = (tenantId: string) =>
    sql<Row>`SELECT ${fields} FROM telemetry_settings WHERE tenant_id = ${tenantId}`.pipe(
      Effect.map((rows) => Option.fromNullable(rows[0]))
    )

  const invalid = (error: string) => new ApiError.InvalidRequest({ error: `invalid request: ${error}` })

  const put = (tenantId: string, input: Telemetry.TelemetryInput) =>
    Effect.gen(function*() {
      const endpoint = input.endpoint === undefined ? undefined : tracesUrl(input.endpoint)
      if (endpoint !== undefined) {
        if (new URL(endpoint).username !== "" || new URL(endpoint).password !== "") {
          return yield* invalid("endpoint: credentials go in headers, not in the URL")
        }
        yield* egress.check(endpoint).pipe(Effect.mapError((error) => invalid(`endpoint: ${error.message}`)))
      }
      return yield* sql.withTransaction(Effect.gen(function*() {
        const [current] = yield* sql<Row>`SELECT ${fields} FROM telemetry_settings
            WHERE tenant_id = ${tenantId} FOR UPDATE`
        const next = endpoint ?? current?.endpoint
        if (next === undefined) return yield* invalid("endpoint: required when no telemetry is set")
        const moved = current !== undefined && new URL(current.endpoint).origin !== new URL(next).origin
        const headers = input.headers ?? (moved || current === undefined ? undefined : null)
        // null: keep the sealed headers as they are; undefined: none; an object: these (an empty one: none).
        const sealed = headers === null
          ? current!.sealedHeaders
          : headers === undefined || Object.keys(headers).length === 0
          ? null
          : sealer.seal(JSON.stringify(headers), sealingContext(tenantId))
        const names = headers === null ? current!.headerNames : Object.keys(headers ?? {})
        const [row] = yield* sql<Row>`
            INSERT INTO telemetry_settings (tenant_id, endpoint, sealed_headers, header_names, protocol, sample_rate,
              include_content, preset)
            VALUES (${tenantId}, ${next}, ${sealed}, ${`{${names.map((name) => `"${name}"`).join(",")}}`},
              ${input.protocol ?? current?.protocol ?? "http/protobuf"}, ${
          input.sampleRate ?? current?.sampleRate ?? 1
        },
              ${input.include?.content ?? current?.includeContent ?? false},
              ${input.preset ?? current?.preset ?? null})
            ON CONFLICT (tenant_id) DO UPDATE SET endpoint = EXCLUDED.endpoint,
              sealed_headers = EXCLUDED.sealed_headers, header_names = EXCLUDED.header_names,
              protocol = EXCLUDED.protocol, sample_rate = EXCLUDED.sample_rate,
              include_content = EXCLUDED.include_content, preset = EXCLUDED.preset, updated_at = now(),
              -- A new endpoint has heard nothing yet.
              last_export_at = CASE WHEN telemetry_settings.endpoint = EXCLUDED.endpoint
                THEN telemetry_settings.last_export_at END,
              last_error = CASE WHEN telemetry_settings.endpoint = EXCLUDED.endpoint
                THEN telemetry_settings.last_error END,
              last_error_at = CASE WHEN telemetry_settings.endpoint = EXCLUDED.endpoint
                THEN telemetry_settings.last_error_at END
            RETURNING ${fields}`
        cache.delete(tenantId)
        return toSettings(row!)
      }))
    }).pipe(
      Effect.mapError((error) =>
        error instanceof ApiError.InvalidRequest ? error : new PersistenceError.PersistenceError({ cause: error })
      )
    )

  const clear = (tenantId: string) =>
    sql`DELETE FROM telemetry_settings WHERE tenant_id = ${tenantId} RETURNING tenant_id`.pipe(
      Effect.map((rows) => {
        cache.delete(tenantId)
        return new Telemetry.TelemetryCleared({ deleted: rows.length > 0 })
      }),
      PersistenceError.PersistenceError.refail
    )

  const open = (tenantId: string, row: Row) =>
    row.sealedHeaders === null
      ? Effect.succeed({})
      : sealer.open(row.sealedHeaders, sealingContext(tenantId)).pipe(
        Effect.map((opened) => JSON.parse(Redacted.value(opened)) as Record<string, string>),
        // Sealed under a key this node no longer has: a configuration fault, not the tenant's.
        Effect.orDie
      )

  const target = (tenantId: string, options?: { readonly within?: Duration.DurationInput }) =>
    Effect.suspend(() => {
      const cached = cache.get(tenantId)
      if (cached !== undefined && Date.now() - cached.at < cacheMillis) return Effect.succeed(cached.target)
      const within = options?.within
      return read(tenantId).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.succeed(Option.none<Target>()),
          onSome: (row) =>
            Effect.map(open(tenantId, row), (headers) =>
              Option.some<Target>({
                endpoint: row.endpoint,
                headers: Redacted.make(headers),
                protocol: row.protocol,
                sampleRate: row.sampleRate,
                includeContent: row.includeContent
              }))
        })),
        Effect.tap((found) => Effect.sync(() => cache.set(tenantId, { at: Date.now(), target: found }))),
        PersistenceError.PersistenceError.refail,
        // A bound is a race of two fibers: set up only around a read, not for every run and record.
        within === undefined ? identity : Effect.timeoutFail({
          duration: within,
          onTimeout: () =>
            new PersistenceError.PersistenceError({
              cause: new Error(`the telemetry settings were not read within ${Duration.format(within)}`)
            })
        })
      )
    })

  const recordExport = (tenantId: string, result: ExportResult) =>
    (result.ok
      ? sql`UPDATE telemetry_settings SET last_export_at = now(), last_error = NULL, last_error_at = NULL
            WHERE tenant_id = ${tenantId}`
      : sql`UPDATE telemetry_settings SET last_error = ${result.error.slice(0, 500)}, last_error_at = now()
            WHERE tenant_id = ${tenantId}`).pipe(Effect.asVoid, PersistenceError.PersistenceError.refail)

  return TelemetrySettings.of({
    get: (tenantId) =>
      read(tenantId).pipe(Effect.map(Option.map(toSettings)), PersistenceError.PersistenceError.refail),
    put,
    clear,
    target,
    recordExport
  })
})

export const layer: Layer.Layer<
  TelemetrySettings,
  never,
  SqlClient.SqlClient | Egress.Egress | SealedSecret.Sealer
> = Layer.effect(TelemetrySettings, make)
