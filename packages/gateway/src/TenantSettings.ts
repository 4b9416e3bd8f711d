/**
 * A tenant's own gateway settings, set by the operator: today its number of
 * stream slots (none stored means `GATEWAY_STREAM_SLOTS`).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"

export class TenantSettings extends Effect.Service<TenantSettings>()("@agent-runtime/gateway/TenantSettings", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const streamSlots = (tenantId: string) =>
      sql<{ streamSlots: number }>`SELECT stream_slots FROM gateway_settings WHERE tenant_id = ${tenantId}`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => row.streamSlots)),
        Effect.orDie
      )

    /** Sets the tenant's slots, or with `None` goes back to the default. */
    const setStreamSlots = (tenantId: string, slots: Option.Option<number>) =>
      Option.match(slots, {
        onNone: () => sql`DELETE FROM gateway_settings WHERE tenant_id = ${tenantId}`,
        onSome: (slots) =>
          sql`INSERT INTO gateway_settings ${sql.insert({ tenantId, streamSlots: slots })}
            ON CONFLICT (tenant_id) DO UPDATE SET stream_slots = EXCLUDED.stream_slots`
      }).pipe(Effect.asVoid, Effect.orDie)

    return { streamSlots, setStreamSlots } as const
  })
}) {}
