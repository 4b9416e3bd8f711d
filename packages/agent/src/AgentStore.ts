/**
 * The agent journal in PostgreSQL: agents, their requests in arrival order,
 * their history, and the blocks of event ids they hand out. Whatever node
 * owns an agent rebuilds its state from here.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"

/** An agent's settings as kept: what its turns need. */
export const AgentConfig = Schema.Struct({
  model: Schema.String,
  systemPrompt: Schema.optional(Schema.String),
  systemPromptAppend: Schema.optional(Schema.String),
  thinkingLevel: Schema.optional(Schema.String),
  keyScope: Schema.optional(Schema.String),
  modelHeaders: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  subject: Schema.optional(Schema.String),
  maxTurns: Schema.optional(Schema.Number),
  /** The agent this one was forked from, and the history index the copy ended at. */
  forkedFrom: Schema.optional(Schema.Struct({ agentId: Schema.String, atMessage: Schema.Number })),
  /** USD budget counted from `since` (Unix seconds); a new value restarts at zero. */
  spendLimit: Schema.optional(Schema.Struct({ usd: Schema.Number, since: Schema.Number }))
})
export type AgentConfig = typeof AgentConfig.Type

export interface AgentRow {
  readonly id: string
  readonly tenantId: string
  readonly key: string | null
  readonly name: string
  readonly type: string | null
  readonly config: AgentConfig
  readonly inputFingerprint: string
  readonly expiresAt: number | null
  readonly createdAt: number
}

export interface RequestRow {
  readonly agentId: string
  readonly id: string
  readonly seq: number
  readonly method: string
  readonly state: "queued" | "running" | "completed"
  readonly fingerprint: string
  readonly input: Record<string, unknown>
  readonly beganIndex: number | null
  readonly outcome: Record<string, unknown> | null
  readonly steeredInto: string | null
  readonly startedAt: number
  readonly beganAt: number | null
  readonly endedAt: number | null
}

const epoch = (column: string) => `floor(extract(epoch from ${column}))::float8`

const agentColumns = `id, tenant_id, key, name, type, config, input_fingerprint,
  ${epoch("expires_at")} AS expires_at, ${epoch("created_at")} AS created_at`

const requestColumns = `agent_id, id, seq::float8 AS seq, method, state, fingerprint, input, began_index, outcome,
  steered_into, ${epoch("started_at")} AS started_at, ${epoch("began_at")} AS began_at,
  ${epoch("ended_at")} AS ended_at`

const decodeConfig = Schema.decodeUnknownSync(AgentConfig)

const toAgent = (row: any): AgentRow => ({ ...row, config: decodeConfig(row.config) })

/** Event ids an owner may hand out before it asks for more. */
export const eventBlockSize = 100_000

export class AgentStore extends Effect.Service<AgentStore>()("@agent-runtime/agent/AgentStore", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const agentFields = sql.unsafe(agentColumns)
    const requestFields = sql.unsafe(requestColumns)

    const insertAgent = (
      agent: Omit<AgentRow, "expiresAt" | "createdAt"> & { readonly ttlSeconds: number | null }
    ) =>
      sql`
        INSERT INTO agents (id, tenant_id, key, name, type, config, input_fingerprint, expires_at)
        VALUES (${agent.id}, ${agent.tenantId}, ${agent.key}, ${agent.name}, ${agent.type},
          ${JSON.stringify(agent.config)}::jsonb, ${agent.inputFingerprint},
          ${agent.ttlSeconds === null ? null : sql`now() + make_interval(secs => ${agent.ttlSeconds})`})
        RETURNING ${agentFields}`.pipe(Effect.map((rows) => toAgent(rows[0])))

    /** A live agent of the tenant: not deleted and not expired. */
    const find = (tenantId: string, id: string) =>
      sql`SELECT ${agentFields} FROM agents
        WHERE id = ${id} AND tenant_id = ${tenantId} AND deleted_at IS NULL`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAgent))
      )

    const findById = (id: string) =>
      sql`SELECT ${agentFields} FROM agents WHERE id = ${id} AND deleted_at IS NULL`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAgent))
      )

    const findByKey = (tenantId: string, key: string) =>
      sql`SELECT ${agentFields} FROM agents
        WHERE tenant_id = ${tenantId} AND key = ${key} AND deleted_at IS NULL`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAgent))
      )

    const list = (tenantId: string, after: string | undefined, limit: number) =>
      sql`SELECT ${agentFields} FROM agents WHERE tenant_id = ${tenantId} AND deleted_at IS NULL
        ${after === undefined ? sql`` : sql`AND id > ${after}`}
        ORDER BY id LIMIT ${limit}`.pipe(Effect.map((rows) => rows.map(toAgent)))

    const remove = (tenantId: string, id: string) =>
      sql`UPDATE agents SET deleted_at = now() WHERE id = ${id} AND tenant_id = ${tenantId} AND deleted_at IS NULL
        RETURNING id`

    /** The first id of a fresh block of event ids: they keep growing whoever owns the agent. */
    const reserveEvents = (agentId: string) =>
      sql<{ start: number }>`
        UPDATE agents SET event_block = event_block + ${eventBlockSize} WHERE id = ${agentId}
        RETURNING (event_block - ${eventBlockSize})::float8 AS start`.pipe(Effect.map((rows) => rows[0]?.start ?? 0))

    /** Records a request once; a second delivery of the same id finds the first. */
    const insertRequest = (request: {
      readonly agentId: string
      readonly id: string
      readonly method: string
      readonly fingerprint: string
      readonly input: Record<string, unknown>
    }) =>
      sql`
        INSERT INTO agent_requests (agent_id, id, method, state, fingerprint, input)
        VALUES (${request.agentId}, ${request.id}, ${request.method}, 'queued', ${request.fingerprint},
          ${JSON.stringify(request.input)}::jsonb)
        ON CONFLICT (agent_id, id) DO NOTHING`.pipe(
        Effect.zipRight(getRequest(request.agentId, request.id)),
        Effect.map(Option.getOrThrow)
      )

    const getRequest = (agentId: string, id: string) =>
      sql<RequestRow>`SELECT ${requestFields} FROM agent_requests WHERE agent_id = ${agentId} AND id = ${id}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    /** Requests not yet completed, in arrival order. */
    const openRequests = (agentId: string) =>
      sql<RequestRow>`SELECT ${requestFields} FROM agent_requests
        WHERE agent_id = ${agentId} AND state <> 'completed' ORDER BY seq`

    /** The latest requests: the running and the most recently settled. */
    const recentRequests = (agentId: string, limit: number) =>
      sql<RequestRow>`SELECT ${requestFields} FROM agent_requests
        WHERE agent_id = ${agentId} ORDER BY seq DESC LIMIT ${limit}`.pipe(Effect.map((rows) => rows.toReversed()))

    const markRunning = (agentId: string, id: string, beganIndex: number) =>
      sql`UPDATE agent_requests SET state = 'running', began_index = ${beganIndex}, began_at = coalesce(began_at, now())
        WHERE agent_id = ${agentId} AND id = ${id}`

    const complete = (agentId: string, id: string, outcome: Record<string, unknown>, steeredInto?: string) =>
      sql`UPDATE agent_requests SET state = 'completed', outcome = ${JSON.stringify(outcome)}::jsonb,
          steered_into = ${steeredInto ?? null}, ended_at = now()
        WHERE agent_id = ${agentId} AND id = ${id} AND state <> 'completed'`

    /** Agents with work not yet completed: what a restarted cluster must pick up again. */
    const agentsWithOpenWork = sql<{ agentId: string }>`
      SELECT DISTINCT r.agent_id FROM agent_requests r JOIN agents a ON a.id = r.agent_id
      WHERE r.state <> 'completed' AND a.deleted_at IS NULL`.pipe(Effect.map((rows) => rows.map((row) => row.agentId)))

    const updateConfig = (agentId: string, config: AgentConfig) =>
      sql`UPDATE agents SET config = ${JSON.stringify(config)}::jsonb WHERE id = ${agentId}`

    const appendMessage = (agentId: string, index: number, requestId: string | null, message: unknown) =>
      sql`INSERT INTO agent_messages (agent_id, index, request_id, message)
        VALUES (${agentId}, ${index}, ${requestId}, ${JSON.stringify(message)}::jsonb)
        ON CONFLICT (agent_id, index) DO UPDATE SET message = excluded.message, request_id = excluded.request_id`

    /** Messages from `index` on are taken back (a turn cut short is run again from its start). */
    const truncateMessages = (agentId: string, index: number) =>
      sql`DELETE FROM agent_messages WHERE agent_id = ${agentId} AND index >= ${index}`

    /** Messages before `before`, each marked when it opens a turn (the first message of its request). */
    const messagesBefore = (agentId: string, before: number) =>
      sql<{ index: number; message: unknown; bytes: number; turnStart: boolean }>`
        SELECT index, message, octet_length(message::text) AS bytes,
          (request_id IS NULL OR lag(request_id) OVER (ORDER BY index) IS DISTINCT FROM request_id) AS turn_start
        FROM agent_messages WHERE agent_id = ${agentId} AND index < ${before} ORDER BY index`

    /** Request ids that have settled, to tell finished turns from the running one. */
    const completedRequests = (agentId: string) =>
      sql<{ id: string }>`SELECT id FROM agent_requests WHERE agent_id = ${agentId} AND state = 'completed'`.pipe(
        Effect.map((rows) => new Set(rows.map((row) => row.id)))
      )

    const messageCount = (agentId: string) =>
      sql<{ count: number }>`SELECT count(*)::int AS count FROM agent_messages WHERE agent_id = ${agentId}`.pipe(
        Effect.map((rows) => rows[0]?.count ?? 0)
      )

    const messages = (agentId: string) =>
      sql<{ index: number; requestId: string | null; message: unknown }>`
        SELECT index, request_id, message FROM agent_messages WHERE agent_id = ${agentId} ORDER BY index`

    return {
      insertAgent,
      find,
      findById,
      findByKey,
      list,
      remove,
      reserveEvents,
      insertRequest,
      getRequest,
      openRequests,
      recentRequests,
      markRunning,
      complete,
      agentsWithOpenWork,
      appendMessage,
      messagesBefore,
      completedRequests,
      messageCount,
      truncateMessages,
      updateConfig,
      messages
    } as const
  })
}) {}
