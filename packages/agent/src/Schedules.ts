/**
 * Schedules: a prompt delivered to an agent at a time, once or every so
 * many seconds. Made by the API or by the agent itself (the `schedule`
 * builtin), kept in PostgreSQL, fired by whichever node finds one due.
 *
 * `ScheduleFiring` delivers them when due.
 */
import { ApiError, Schedule as ScheduleSchemas } from "@agent-runtime/domain"
import { Ids, PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Schema } from "effect"

/** Schedules one agent may hold at a time. */
export const maxPerAgent = 100

export const ScheduleRow = Schema.Struct({
  id: Schema.String,
  agentId: Schema.String,
  tenantId: Schema.String,
  dueAt: Schema.Number,
  createdAt: Schema.Number,
  text: Schema.NullOr(Schema.String),
  code: Schema.NullOr(Schema.String),
  everySeconds: Schema.NullOr(Schema.Number)
})
export type ScheduleRow = typeof ScheduleRow.Type

const toRecord = (row: ScheduleRow) =>
  new ScheduleSchemas.Schedule({
    id: row.id,
    agent: row.agentId,
    tenant: row.tenantId,
    dueAt: row.dueAt,
    createdAt: row.createdAt,
    ...(row.text === null ? {} : { text: row.text }),
    ...(row.code === null ? {} : { code: row.code }),
    ...(row.everySeconds === null ? {} : { everySeconds: row.everySeconds })
  })

/** When a schedule first falls due, in Unix milliseconds. */
export const firstDue = (input: ScheduleSchemas.ScheduleInput, now: number) =>
  input.at !== undefined
    ? typeof input.at === "number" ? input.at : Date.parse(input.at)
    : input.inSeconds !== undefined
    ? now + input.inSeconds * 1000
    : input.everySeconds !== undefined
    ? now + input.everySeconds * 1000
    : now

/** A repeating schedule's next time after `now`: one step on from `due`, or more when times were missed. */
export const nextDue = (due: number, everySeconds: number, now: number) => {
  const step = everySeconds * 1000
  return due + Math.max(1, Math.floor((now - due) / step) + 1) * step
}

export interface Service {
  /** A new schedule for a live agent of the tenant. */
  readonly create: (
    tenantId: string,
    agentId: string,
    input: ScheduleSchemas.ScheduleInput
  ) => Effect.Effect<
    ScheduleSchemas.Schedule,
    ApiError.InvalidRequest | ApiError.Conflict | ApiError.NotFound | PersistenceError.PersistenceError
  >
  /** The agent's schedules (or the tenant's, without an agent), soonest first. */
  readonly list: (
    tenantId: string,
    agentId?: string
  ) => Effect.Effect<ReadonlyArray<ScheduleSchemas.Schedule>, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly cancel: (
    tenantId: string,
    agentId: string,
    scheduleId: string
  ) => Effect.Effect<
    { readonly id: string; readonly deleted: true },
    ApiError.NotFound | PersistenceError.PersistenceError
  >
}

export class Schedules extends Context.Tag("@agent-runtime/agent/Schedules")<Schedules, Service>() {}

/** The columns of a ScheduleRow. */
export const columns = (sql: SqlClient.SqlClient) =>
  sql`id, agent_id, tenant_id, text, code, every_seconds,
    extract(epoch from due_at)::float8 AS due_at,
    floor(extract(epoch from created_at))::float8 AS created_at`

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const decode = Schema.decodeUnknown(Schema.Array(ScheduleRow))

  const create: Service["create"] = (tenantId, agentId, input) =>
    Effect.gen(function*() {
      const now = Date.now()
      const due = firstDue(input, now)
      if (!Number.isFinite(due)) return yield* new ApiError.InvalidRequest({ error: "at: not a time" })
      if (input.everySeconds === undefined && due < now - 60_000) {
        return yield* new ApiError.InvalidRequest({ error: "at: a one-off schedule's time has passed" })
      }
      const id = Ids.make("sch")
      // The agent row is locked so two schedules made at once cannot both be the one past the limit.
      const made = yield* sql.withTransaction(Effect.gen(function*() {
        const agent = yield* sql`
          SELECT id FROM agents
          WHERE id = ${agentId} AND tenant_id = ${tenantId} AND deleted_at IS NULL
            AND (expires_at IS NULL OR expires_at > now())
          FOR UPDATE`
        if (agent.length === 0) return "missing" as const
        const [held] = yield* sql<{ count: number }>`
          SELECT count(*)::int AS count FROM schedules WHERE agent_id = ${agentId}`
        if (held!.count >= maxPerAgent) return "full" as const
        return yield* sql`
          INSERT INTO schedules (id, agent_id, tenant_id, text, code, every_seconds, due_at)
          VALUES (${id}, ${agentId}, ${tenantId}, ${input.text ?? null}, ${input.code ?? null},
            ${input.everySeconds ?? null}, to_timestamp(${due / 1000}))
          RETURNING ${columns(sql)}`.pipe(Effect.flatMap(decode))
      })).pipe(PersistenceError.PersistenceError.refail)
      if (made === "missing") return yield* new ApiError.NotFound({ error: `no agent ${agentId}` })
      if (made === "full") {
        return yield* new ApiError.Conflict({ error: `an agent holds at most ${maxPerAgent} schedules` })
      }
      return toRecord(made[0]!)
    })

  const liveAgent = (tenantId: string, agentId: string) =>
    sql`
      SELECT id FROM agents
      WHERE id = ${agentId} AND tenant_id = ${tenantId} AND deleted_at IS NULL
        AND (expires_at IS NULL OR expires_at > now())`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap((rows) =>
        rows.length === 0 ? Effect.fail(new ApiError.NotFound({ error: `no agent ${agentId}` })) : Effect.void
      )
    )

  const list: Service["list"] = (tenantId, agentId) =>
    Effect.zipRight(
      agentId === undefined ? Effect.void : liveAgent(tenantId, agentId),
      // A deleted agent's schedules are gone for the tenant at once; the next firing removes the rows.
      sql`
        SELECT ${columns(sql)} FROM schedules
        WHERE tenant_id = ${tenantId} ${agentId === undefined ? sql`` : sql`AND agent_id = ${agentId}`}
          AND agent_id IN (SELECT id FROM agents WHERE tenant_id = ${tenantId} AND deleted_at IS NULL)
        ORDER BY due_at, id
        LIMIT 1000`.pipe(
        Effect.flatMap(decode),
        PersistenceError.PersistenceError.refail,
        Effect.map((rows) => rows.map(toRecord))
      )
    )

  const cancel: Service["cancel"] = (tenantId, agentId, scheduleId) =>
    sql<{ id: string }>`
      DELETE FROM schedules WHERE id = ${scheduleId} AND agent_id = ${agentId} AND tenant_id = ${tenantId}
      RETURNING id`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap((rows) =>
        rows.length === 0
          ? Effect.fail(new ApiError.NotFound({ error: `no schedule ${scheduleId}` }))
          : Effect.succeed({ id: scheduleId, deleted: true as const })
      )
    )

  return Schedules.of({ create, list, cancel })
})

export const layer: Layer.Layer<Schedules, never, SqlClient.SqlClient> = Layer.effect(Schedules, make)
