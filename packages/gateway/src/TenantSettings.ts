/**
 * A tenant's own gateway settings, set by the operator: today its number of
 * stream slots (none stored means `GATEWAY_STREAM_SLOTS`).
 */
import { PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"

export interface Service {
  /** The tenant's own number of stream slots, if the operator set one. */
  readonly streamSlots: (tenantId: string) => Effect.Effect<Option.Option<number>, PersistenceError.PersistenceError>
  /** Sets the tenant's slots, or with `None` goes back to the default. */
  readonly setStreamSlots: (
    tenantId: string,
    slots: Option.Option<number>
  ) => Effect.Effect<void, PersistenceError.PersistenceError>
}

export class TenantSettings extends Context.Tag("@agent-runtime/gateway/TenantSettings")<TenantSettings, Service>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const streamSlots = (tenantId: string) =>
    sql<{ streamSlots: number }>`SELECT stream_slots FROM gateway_settings WHERE tenant_id = ${tenantId}`.pipe(
      Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => row.streamSlots)),
      PersistenceError.PersistenceError.refail
    )

  const setStreamSlots = (tenantId: string, slots: Option.Option<number>) =>
    Option.match(slots, {
      onNone: () => sql`DELETE FROM gateway_settings WHERE tenant_id = ${tenantId}`,
      onSome: (slots) =>
        sql`INSERT INTO gateway_settings ${sql.insert({ tenantId, streamSlots: slots })}
          ON CONFLICT (tenant_id) DO UPDATE SET stream_slots = EXCLUDED.stream_slots`
    }).pipe(Effect.asVoid, PersistenceError.PersistenceError.refail)

  return TenantSettings.of({ streamSlots, setStreamSlots })
})

export const layer: Layer.Layer<TenantSettings, never, SqlClient.SqlClient> = Layer.effect(TenantSettings, make)
