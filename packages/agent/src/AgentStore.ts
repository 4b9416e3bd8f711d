/**
 * The agent journal in PostgreSQL: agents, their requests in arrival order,
 * their history, and the blocks of event ids they hand out. Whatever node
 * owns an agent rebuilds its state from here.
 */
import { Ledger } from "@agent-runtime/billing"
import { Agent as AgentSchemas, ApiError } from "@agent-runtime/domain"
import { Storable } from "@agent-runtime/store"
import { Outbox } from "@agent-runtime/webhooks"
import { SqlClient, type Statement } from "@effect/sql"
import { Context, Effect, flow, Layer, Option, Record, Schema, String } from "effect"
import { Fenced, PersistenceError } from "./AgentError.ts"
import * as Announcements from "./Announcements.ts"
import type { Announce } from "./Announcements.ts"

/** An agent's settings as kept: what its turns need. */
export const AgentConfig = Schema.Struct({
  model: Schema.String,
  systemPrompt: Schema.optional(Schema.String),
  systemPromptAppend: Schema.optional(Schema.String),
  thinkingLevel: Schema.optional(Schema.String),
  keyScope: Schema.optional(Schema.String),
  modelHeaders: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  subject: Schema.optional(Schema.String),
  /** Claims for tool servers, carried as `ctx` in identity tokens; set only at creation. */
  context: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  /** Bounds of each turn (model responses, seconds); see AgentSchemas.RunLimits. */
  runLimits: Schema.optional(AgentSchemas.RunLimits),
  /** Per model response (a stateless run's settings). */
  maxOutputTokens: Schema.optional(Schema.Number),
  temperature: Schema.optional(Schema.Number),
  /** The agent this one was forked from, and the history index the copy ended at. */
  forkedFrom: Schema.optional(Schema.Struct({ agentId: Schema.String, atMessage: Schema.Number })),
  builtins: Schema.optional(Schema.Array(Schema.String)),
  delegate: Schema.optional(Schema.Unknown),
  /** From the agent's definition: tools that need approval, who approves, how long inputs wait. */
  humanInput: Schema.optional(Schema.Struct({
    approvals: Schema.optional(
      Schema.Array(Schema.Struct({ tool: Schema.String, source: Schema.optional(Schema.String) }))
    ),
    approvers: Schema.optional(Schema.Array(Schema.String)),
    expiresInSeconds: Schema.optional(Schema.Number)
  })),
  /** false: the model gets present_file alone of the file tools. */
  fileTools: Schema.optional(Schema.Boolean),
  /** The volumes its file tools see (see Workspace); absent for agents made before volumes. */
  mounts: Schema.optional(Schema.Array(AgentSchemas.Mount)),
  /** The definition (and its revision) the agent was made from or last moved to. */
  definition: Schema.optional(Schema.Struct({ id: Schema.String, revision: Schema.Number })),
  /** Of the settings a definition supplies, those the agent set itself; re-applying the definition keeps them. */
  own: Schema.optional(Schema.Array(Schema.String)),
  /**
   * A sub-agent's place: the agents that delegated to it, nearest first (the run and call of each), and
   * the depth delegation may reach from the root. A spend limit above counts what sub-agents spend.
   */
  delegation: Schema.optional(Schema.Struct({
    ancestors: Schema.Array(
      Schema.Struct({ agentId: Schema.String, requestId: Schema.String, toolCallId: Schema.String })
    ),
    maxDepth: Schema.Number
  })),
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
  /** Failed attempts to wake its unfinished work, and when the next may happen. */
  readonly resumeFailures: number
  readonly resumeAfter: number | null
  /** The tools its application last listed, and their hash (see `ApplicationConnection.toolsHash`). */
  readonly applicationTools: ReadonlyArray<ApplicationTool> | null
  readonly toolsHash: string | null
  /** The connection serving its tools now, as its owner last wrote it. */
  readonly connection: string | null
}

/** A tool the application listed, with the runtime's settings from its `_meta`. */
export const ApplicationTool = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  parameters: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  exposure: Schema.optional(Schema.Literal("direct", "codemode", "both")),
  executionMode: Schema.optional(Schema.Literal("sequential", "parallel")),
  deadlineMs: Schema.optional(Schema.Number),
  needsApproval: Schema.optional(Schema.Boolean)
})
export type ApplicationTool = typeof ApplicationTool.Type

/** A request as the journal keeps it, and as a Prompt hands it to the agent's owner. */
export const RequestRow = Schema.Struct({
  agentId: Schema.String,
  id: Schema.String,
  seq: Schema.Number,
  method: Schema.String,
  state: Schema.Literal("queued", "running", "completed"),
  fingerprint: Schema.String,
  input: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  beganIndex: Schema.NullOr(Schema.Number),
  outcome: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  steeredInto: Schema.NullOr(Schema.String),
  /** Set when the last owner handed the running turn on (drain) rather than losing it. */
  handoff: Schema.NullOr(Schema.String),
  /** How many times a node other than the one that began it took the turn over. */
  resumes: Schema.Number,
  startedAt: Schema.Number,
  beganAt: Schema.NullOr(Schema.Number),
  endedAt: Schema.NullOr(Schema.Number)
})
export interface RequestRow extends Schema.Schema.Type<typeof RequestRow> {}

/** A request to record: the store sets its place in line and its times. */
export interface NewRequest {
  readonly agentId: string
  readonly id: string
  readonly method: string
  readonly fingerprint: string
  readonly input: Record<string, unknown>
}

/** A request of an agent, read with the agent's expiry (see `requestOf`). */
export interface RequestOfAgent {
  readonly tenantId: string
  readonly expiresAt: number | null
  readonly request: Option.Option<RequestRow>
}

const epoch = (column: string) => `floor(extract(epoch from ${column}))::float8`

// The config as its JSON text: decoded through `configOf`.
const agentColumns = `id, tenant_id, key, name, type, config::text AS config, input_fingerprint,
  ${epoch("expires_at")} AS expires_at, ${epoch("created_at")} AS created_at,
  resume_failures, ${epoch("resume_after")} AS resume_after, application_tools, tools_hash, connection`

const requestColumns = `agent_id, id, seq::float8 AS seq, method, state, fingerprint, input, began_index, outcome,
  steered_into, handoff, resumes, ${epoch("started_at")} AS started_at, ${epoch("began_at")} AS began_at,
  ${epoch("ended_at")} AS ended_at`

const decodeConfig = Schema.decodeUnknownSync(AgentConfig)

/**
 * Configs decoded lately, by their JSON text: every accept and every turn reads its agent, whose config seldom
 * changes, and decoding it was most of reading the row. Bounded by their texts' length (a config may carry a
 * system prompt of 32,000 characters); agents with the same config share its value.
 */
const decodedConfigs = new Map<string, AgentConfig>()
const maxDecodedCharacters = 8_000_000
let decodedCharacters = 0

const configOf = (json: string) => {
  let config = decodedConfigs.get(json)
  if (config === undefined) {
    config = decodeConfig(JSON.parse(json))
    if (decodedCharacters + json.length > maxDecodedCharacters) {
      decodedConfigs.clear()
      decodedCharacters = 0
    }
    decodedConfigs.set(json, config)
    decodedCharacters += json.length
  }
  return config
}

const decodeTools = Schema.decodeUnknownSync(Schema.Array(ApplicationTool))

const toAgent = (row: any): AgentRow => ({
  ...row,
  config: configOf(row.config),
  applicationTools: row.applicationTools === null ? null : decodeTools(row.applicationTools)
})

/** A row as `to_jsonb` writes it (snake case), as a RequestRow. */
export const fromJsonRow = (row: Record<string, unknown>) =>
  Record.mapKeys(row, String.snakeToCamel) as unknown as RequestRow

/** Event ids an owner reserves at a time; it asks for the next block halfway through one. */
export const eventBlockSize = 100_000

/**
 * A journal write that happens only under `guard`, a condition `fenced`
 * supplies: it holds while the writer's epoch is still the agent's.
 */
export type Write = (
  guard: Statement.Fragment
) => Statement.Statement<unknown> | ReadonlyArray<Statement.Statement<unknown>>

/** Several writes as one, in one statement: none of them may change a row another changes. */
export const writeAll = (writes: ReadonlyArray<Write>): Write => (guard) =>
  writes.flatMap((write) => [write(guard)].flat())

/** A new agent's row; the store sets its times. */
export interface NewAgent extends
  Omit<
    AgentRow,
    "expiresAt" | "createdAt" | "resumeFailures" | "resumeAfter" | "applicationTools" | "toolsHash" | "connection"
  >
{
  readonly ttlSeconds: number | null
  /** The application's tools declared with the agent (`mcp.tools`), and their hash. */
  readonly declaredTools?: { readonly tools: ReadonlyArray<ApplicationTool>; readonly hash: string } | undefined
}

/** What a node gets when it claims an agent: its epoch, and the event log the last owner let go of. */
export interface Ownership {
  readonly epoch: number
  /** When the claim was made (Unix seconds, the database's clock, as a request's `startedAt`). */
  readonly claimedAt: number
  readonly previousOwner: string | null
  readonly continuesFrom: number | null
  readonly inherited: ReadonlyArray<{ readonly id: number; readonly data: unknown }> | null
}

/** A history message as journaled. */
export interface MessageRow {
  readonly index: number
  readonly requestId: string | null
  readonly message: unknown
}

export class AgentStore extends Context.Tag("@agent-runtime/agent/AgentStore")<AgentStore, {
  /**
   * Inserts an agent with its starting history, in one transaction; None (and nothing written) when a live
   * agent of the tenant already has its key. `alongside` runs in the same transaction once the row is in.
   */
  readonly insertAgent: <E = never>(
    agent: NewAgent,
    history: ReadonlyArray<MessageRow>,
    alongside?: Effect.Effect<void, E>
  ) => Effect.Effect<Option.Option<AgentRow>, PersistenceError | E>
  /** A live agent of the tenant (not deleted; expiry is the caller's to judge). */
  readonly find: (tenantId: string, id: string) => Effect.Effect<Option.Option<AgentRow>, PersistenceError>
  /**
   * `find` for the tenant `tenant` yields (a query for `tenant_id`, such as an API key's), checked in the same
   * statement: none outside when it yields no tenant (the credential is not valid).
   */
  readonly findFor: (
    tenant: Statement.Fragment,
    id: string
  ) => Effect.Effect<Option.Option<Option.Option<AgentRow>>, PersistenceError>
  readonly findById: (id: string) => Effect.Effect<Option.Option<AgentRow>, PersistenceError>
  readonly findByKey: (tenantId: string, key: string) => Effect.Effect<Option.Option<AgentRow>, PersistenceError>
  /** The tenant's live agents mounting `volumeId` with `notify`: those told when others change its files. */
  readonly notifiedOf: (
    tenantId: string,
    volumeId: string
  ) => Effect.Effect<ReadonlyArray<AgentRow>, PersistenceError>
  /** A page of the tenant's agents by id, after `after`. */
  readonly list: (
    tenantId: string,
    after: string | undefined,
    limit: number
  ) => Effect.Effect<ReadonlyArray<AgentRow>, PersistenceError>
  /** Marks the agent deleted; whether there was one. */
  readonly remove: (tenantId: string, id: string) => Effect.Effect<boolean, PersistenceError>
  /**
   * Sets a live agent's name, type and lifetime (counted from now; null: until deleted), as an upsert names
   * them (one left out stays, as POST /clients/{id}/metadata leaves the lifetime); its expiry, or None when no
   * live agent has the id.
   */
  readonly updateDetails: (
    agentId: string,
    details: {
      readonly name?: string | undefined
      readonly type?: string | null | undefined
      readonly ttlSeconds?: number | null | undefined
      /** The body a retry of POST /v1/agents with the agent's key is told by from now on. */
      readonly inputFingerprint?: string | undefined
    }
  ) => Effect.Effect<Option.Option<number | null>, PersistenceError>
  /**
   * The first id of a fresh block of event ids, after `after` too (the last id an owner that let go handed
   * out): they keep growing whoever owns the agent.
   */
  readonly reserveEvents: (agentId: string, after: number) => Effect.Effect<number, PersistenceError>
  /**
   * Reserves the block after one that ends at `until`, and answers its end; none when another owner has
   * reserved since, so ids past `until` are no longer this owner's to hand out.
   */
  readonly extendEvents: (agentId: string, until: number) => Effect.Effect<Option.Option<number>, PersistenceError>
  /**
   * Records a request once; a second delivery of the same id finds the first. With `announce`, a row recorded
   * now is announced on `queuedChannel` as it commits, for its owner to queue.
   */
  readonly insertRequest: (request: NewRequest, announce?: Announce) => Effect.Effect<RequestRow, PersistenceError>
  /**
   * `findFor` and `insertRequest` in one statement, for a prompt that needs no check of the agent first: the
   * request is recorded only when the agent is live and has nothing a prompt must check before it is
   * accepted (no spend limit, a tenant not prepaid and, unless `allowDisconnected`, no application tools; see
   * Agents). Otherwise
   * `request` is none and the agent is there to check. A row recorded now is announced, as `insertRequest`'s.
   */
  readonly acceptFor: (
    tenant: Statement.Fragment,
    request: NewRequest,
    options: { readonly allowDisconnected: boolean; readonly announce?: Announce }
  ) => Effect.Effect<
    Option.Option<{ readonly agent: Option.Option<AgentRow>; readonly request: Option.Option<RequestRow> }>,
    PersistenceError
  >
  readonly getRequest: (agentId: string, id: string) => Effect.Effect<Option.Option<RequestRow>, PersistenceError>
  /** The agent's request recorded as `seq`. */
  readonly requestAt: (agentId: string, seq: number) => Effect.Effect<Option.Option<RequestRow>, PersistenceError>
  /**
   * A request of a tenant's agent, read with the agent's expiry in one statement: none when the tenant has
   * no such agent.
   */
  readonly requestOf: (
    tenantId: string,
    agentId: string,
    id: string
  ) => Effect.Effect<Option.Option<RequestOfAgent>, PersistenceError>
  /** `requestOf` for the tenant `tenant` yields, as `findFor`: none outside when it yields no tenant. */
  readonly requestFor: (
    tenant: Statement.Fragment,
    agentId: string,
    id: string
  ) => Effect.Effect<Option.Option<Option.Option<RequestOfAgent>>, PersistenceError>
  /** Sub-agents below an agent, at any depth; with `requestId`, those its run delegated to (and theirs). */
  readonly subAgents: (
    agentId: string,
    requestId?: string
  ) => Effect.Effect<ReadonlyArray<string>, PersistenceError>
  /** Every agent's queued requests, in arrival order: what owners that could not hear announcements may miss. */
  readonly queuedRequests: Effect.Effect<ReadonlyArray<RequestRow>, PersistenceError>
  /** Requests not yet completed and not steered into a turn, in arrival order. */
  readonly openRequests: (agentId: string) => Effect.Effect<ReadonlyArray<RequestRow>, PersistenceError>
  /** Open requests a turn took as steered prompts, in arrival order. */
  readonly steeredInto: (agentId: string, into: string) => Effect.Effect<ReadonlyArray<RequestRow>, PersistenceError>
  /** The latest requests, oldest first: the running and the most recently settled. */
  readonly recentRequests: (
    agentId: string,
    limit: number
  ) => Effect.Effect<ReadonlyArray<RequestRow>, PersistenceError>
  /** Makes the caller the agent's owner: a new epoch, which every later journal write must carry. */
  readonly claim: (agentId: string, owner: string) => Effect.Effect<Ownership, PersistenceError>
  /** The agent's current ownership epoch: another owner's claim since ours shows as a higher one. */
  readonly epochOf: (agentId: string) => Effect.Effect<number, PersistenceError>
  /**
   * Lets go of the agent on purpose (drain, rebalance, idle): any node may
   * pick up its open work, and the next owner's event log goes on from
   * `cursor` with the buffered `events`, so watchers miss nothing.
   */
  readonly release: (
    agentId: string,
    epoch: number,
    cursor: number,
    events: ReadonlyArray<{ readonly id: number; readonly data: unknown }>
  ) => Effect.Effect<void, PersistenceError>
  /** Announces agents let go with unfinished work, so a node wakes each on its next owner at once. */
  readonly announceReleased: (agentIds: ReadonlyArray<string>) => Effect.Effect<void, PersistenceError>
  /**
   * Runs a journal write only while `epoch` is still the agent's, in one
   * statement; a stale owner's write fails with Fenced and changes nothing.
   * Answers the database's clock as it wrote (Unix seconds, floored as the
   * rows' times are read): the time any `now()` in the write stands for.
   */
  readonly fenced: (agentId: string, epoch: number, write: Write) => Effect.Effect<number, Fenced | PersistenceError>
  /** The request's turn begins; `report` (run.started) is written with it, once. */
  readonly markRunning: (agentId: string, id: string, beganIndex: number, report: Outbox.NewEvent) => Write
  /** A node took over the running turn: its handoff note is consumed; `report` gets the count of `resumes`. */
  readonly markResumed: (agentId: string, id: string, report: Outbox.NewEvent) => Write
  /** The owner stops the running turn between steps, for another node to continue it. */
  readonly markHandoff: (agentId: string, id: string, reason: string) => Write
  /** Steered prompts a running turn took: they end with it. */
  readonly markSteered: (agentId: string, ids: ReadonlyArray<string>, into: string) => Write
  /** Recorded before a tool call is sent: a call with a start and no result has an unknown outcome. */
  readonly startToolCall: (agentId: string, requestId: string, toolCallId: string, tool: string) => Write
  /** Records a call's result; `charge` (a prepaid tenant's, for the call) with it, once: only with the first. */
  readonly finishToolCall: (agentId: string, toolCallId: string, result: unknown, charge?: Ledger.Charge) => Write
  /** Settles the request; `report` (run.completed or run.failed) is written with it, once. */
  readonly complete: (
    agentId: string,
    id: string,
    outcome: Record<string, unknown>,
    report: Outbox.NewEvent | undefined,
    steeredInto?: string,
    /** A prepaid tenant's charge for the turn, written once: only by the statement that ends the request. */
    charge?: Ledger.Charge
  ) => Write
  readonly updateConfig: (agentId: string, config: AgentConfig) => Write
  /** The tools the application listed, and their hash. */
  readonly setApplicationTools: (agentId: string, tools: ReadonlyArray<ApplicationTool>, hash: string) => Write
  /** The connection serving the agent's tools, or null when none does. */
  readonly setConnection: (agentId: string, connection: string | null) => Write
  readonly appendMessage: (agentId: string, index: number, requestId: string | null, message: unknown) => Write
  /** The request's tool calls that were sent, with their results where they came back. */
  readonly toolCalls: (
    agentId: string,
    requestId: string
  ) => Effect.Effect<ReadonlyMap<string, { readonly tool: string; readonly result?: unknown }>, PersistenceError>
  /**
   * Agents with unfinished work that no live runner holds (let go, or their
   * runner went silent past `leaseSeconds`, or restarted since it began
   * their running turn), or with a request queued for more than
   * `unheardSeconds` (its owner may never have been told of it), whose next
   * wake-up is due.
   */
  readonly agentsToWake: (
    leaseSeconds: number,
    unheardSeconds: number
  ) => Effect.Effect<ReadonlyArray<{ readonly agentId: string; readonly resumeFailures: number }>, PersistenceError>
  /**
   * Agents with unfinished work whose owner is `owner`, whose next wake-up is due: the runner at that
   * address compares them with the agents it serves (see Wakeups).
   */
  readonly ownedToWake: (
    owner: string
  ) => Effect.Effect<ReadonlyArray<{ readonly agentId: string; readonly resumeFailures: number }>, PersistenceError>
  /** Waking the agent's work failed: the next attempt waits twice as long as the last, at most an hour. */
  readonly resumeFailed: (agentId: string) => Effect.Effect<void, PersistenceError>
  readonly resumeSucceeded: (agentId: string) => Effect.Effect<void, PersistenceError>
  /** Messages before `before`, each marked when it opens a turn (the first message of its request). */
  readonly messagesBefore: (agentId: string, before: number) => Effect.Effect<
    ReadonlyArray<
      { readonly index: number; readonly message: unknown; readonly bytes: number; readonly turnStart: boolean }
    >,
    PersistenceError
  >
  /** Request ids that have settled, to tell finished turns from the running one. */
  readonly completedRequests: (agentId: string) => Effect.Effect<ReadonlySet<string>, PersistenceError>
  readonly messageCount: (agentId: string) => Effect.Effect<number, PersistenceError>
  /** The size of the whole history's message JSON, in bytes. */
  readonly historyBytes: (agentId: string) => Effect.Effect<number, PersistenceError>
  /** The whole history, in order. */
  readonly messages: (agentId: string) => Effect.Effect<ReadonlyArray<MessageRow>, PersistenceError>
}>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // Tenant-facing reads leave out stateless runs (`retention_seconds` set): they are agent rows the tenant does
  // not see as agents (see Runs). The runtime's own reads, by id, find them like any agent.
  const agentFields = sql.unsafe(agentColumns)
  const requestFields = sql.unsafe(requestColumns)

  const insertRow = (agent: NewAgent) =>
    sql`
      INSERT INTO agents (id, tenant_id, key, name, type, config, input_fingerprint, expires_at, application_tools,
        tools_hash)
      VALUES (${agent.id}, ${agent.tenantId}, ${agent.key}, ${agent.name}, ${agent.type},
        ${Storable.stringify(agent.config)}::jsonb, ${agent.inputFingerprint},
        ${agent.ttlSeconds === null ? null : sql`now() + make_interval(secs => ${agent.ttlSeconds})`},
        ${agent.declaredTools === undefined ? null : Storable.stringify(agent.declaredTools.tools)}::jsonb,
        ${agent.declaredTools?.hash ?? null})
      ON CONFLICT (tenant_id, key) WHERE key IS NOT NULL AND deleted_at IS NULL DO NOTHING
      RETURNING ${agentFields}`.pipe(Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAgent)))

  // No owner yet, so the history is not fenced; it is written with the row, or not at all.
  const insertAgent = <E = never>(
    agent: NewAgent,
    history: ReadonlyArray<MessageRow>,
    alongside: Effect.Effect<void, E> = Effect.void
  ) =>
    PersistenceError.refail(insertRow(agent)).pipe(
      Effect.tap((inserted) => Option.isNone(inserted) ? Effect.void : alongside),
      Effect.tap((inserted) =>
        Option.isNone(inserted) || history.length === 0 ?
          Effect.void :
          PersistenceError.refail(sql`INSERT INTO agent_messages ${
            sql.insert(history.map((row) => ({
              agentId: agent.id,
              index: row.index,
              requestId: row.requestId,
              message: Storable.stringify(row.message)
            })))
          }`)
      ),
      sql.withTransaction,
      Effect.catchTag("SqlError", (cause) => new PersistenceError({ cause }))
    )

  /** A tenant's id as the query for it that `findFor` and `requestFor` take. */
  const tenantOf = (tenantId: string) => sql`SELECT ${tenantId}::text AS tenant_id`

  const findFor = (tenant: Statement.Fragment, id: string) =>
    sql`SELECT ${agentFields} FROM (${tenant}) AS k (reader)
      LEFT JOIN agents ON id = ${id} AND tenant_id = k.reader AND deleted_at IS NULL
        AND retention_seconds IS NULL`.pipe(
      Effect.map((rows) =>
        Option.map(Option.fromNullable(rows[0]), (row) => row.id === null ? Option.none() : Option.some(toAgent(row)))
      )
    )

  const find = (tenantId: string, id: string) => Effect.map(findFor(tenantOf(tenantId), id), Option.flatten)

  const findById = (id: string) =>
    sql`SELECT ${agentFields} FROM agents WHERE id = ${id} AND deleted_at IS NULL`.pipe(
      Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAgent))
    )

  const findByKey = (tenantId: string, key: string) =>
    sql`SELECT ${agentFields} FROM agents
      WHERE tenant_id = ${tenantId} AND key = ${key} AND deleted_at IS NULL`.pipe(
      Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toAgent))
    )

  const notifiedOf = (tenantId: string, volumeId: string) =>
    sql`SELECT ${agentFields} FROM agents
      WHERE tenant_id = ${tenantId} AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > now())
        AND config -> 'mounts' @> ${Storable.stringify([{ volumeId, notify: true }])}::jsonb`.pipe(
      Effect.map((rows) => rows.map(toAgent))
    )

  const list = (tenantId: string, after: string | undefined, limit: number) =>
    sql`SELECT ${agentFields} FROM agents WHERE tenant_id = ${tenantId} AND deleted_at IS NULL AND retention_seconds IS NULL
      ${after === undefined ? sql`` : sql`AND id > ${after}`}
      ORDER BY id LIMIT ${limit}`.pipe(Effect.map((rows) => rows.map(toAgent)))

  const remove = (tenantId: string, id: string) =>
    sql`UPDATE agents SET deleted_at = now() WHERE id = ${id} AND tenant_id = ${tenantId} AND deleted_at IS NULL
      RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

  const updateDetails = (
    agentId: string,
    details: {
      readonly name?: string | undefined
      readonly type?: string | null | undefined
      readonly ttlSeconds?: number | null | undefined
      readonly inputFingerprint?: string | undefined
    }
  ) =>
    sql<{ expiresAt: number | null }>`UPDATE agents SET name = ${details.name ?? sql`name`},
        type = ${details.type === undefined ? sql`type` : details.type},
        expires_at = ${
      details.ttlSeconds === undefined
        ? sql`expires_at`
        : details.ttlSeconds === null
        ? null
        : sql`now() + make_interval(secs => ${details.ttlSeconds})`
    },
        input_fingerprint = ${details.inputFingerprint ?? sql`input_fingerprint`}
      WHERE id = ${agentId} AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > now())
      RETURNING ${sql.unsafe(epoch("expires_at"))} AS expires_at`.pipe(
      Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => row.expiresAt))
    )

  const reserveEvents = (agentId: string, after: number) =>
    sql<{ start: number }>`
      UPDATE agents SET event_block = GREATEST(event_block, ${after}) + ${eventBlockSize} WHERE id = ${agentId}
      RETURNING (event_block - ${eventBlockSize})::float8 AS start`.pipe(Effect.map((rows) => rows[0]?.start ?? 0))

  const extendEvents = (agentId: string, until: number) =>
    sql<{ until: number }>`
      UPDATE agents SET event_block = event_block + ${eventBlockSize} WHERE id = ${agentId} AND event_block = ${until}
      RETURNING event_block::float8 AS until`.pipe(Effect.map((rows) => Option.fromNullable(rows[0]?.until)))

  const insertRequest = (request: NewRequest, announce?: Announce) =>
    // One round trip: the new row, or the one already there. A row another statement is inserting at the same
    // moment is not in this statement's snapshot: it is read once that one has committed.
    sql<RequestRow>`
      WITH inserted AS (
        INSERT INTO agent_requests (agent_id, id, method, state, fingerprint, input)
        VALUES (${request.agentId}, ${request.id}, ${request.method}, 'queued', ${request.fingerprint},
          ${Storable.stringify(request.input)}::jsonb)
        ON CONFLICT (agent_id, id) DO NOTHING
        RETURNING ${requestFields})${Announcements.announcing(sql, announce)}
      SELECT * FROM inserted WHERE ${Announcements.announcedAll(sql, announce)}
      UNION ALL
      SELECT ${requestFields} FROM agent_requests
      WHERE agent_id = ${request.agentId} AND id = ${request.id} AND NOT EXISTS (SELECT 1 FROM inserted)`.pipe(
      Effect.flatMap((rows) =>
        rows.length > 0
          ? Effect.succeed(rows[0]!)
          : Effect.map(getRequest(request.agentId, request.id), Option.getOrThrow)
      )
    )

  const acceptFor = (
    tenant: Statement.Fragment,
    request: NewRequest,
    options: { readonly allowDisconnected: boolean; readonly announce?: Announce }
  ) =>
    // The row just inserted is not in the snapshot the rest of the statement reads: `inserted` answers for it.
    sql<{ readonly id: string | null; readonly accepting: boolean; readonly request: Record<string, unknown> | null }>`
      WITH agent AS (
        SELECT a.* FROM (${tenant}) AS k (reader)
        LEFT JOIN agents a ON a.id = ${request.agentId} AND a.tenant_id = k.reader AND a.deleted_at IS NULL
          AND a.retention_seconds IS NULL),
      accepting AS (
        SELECT id FROM agent WHERE id IS NOT NULL AND (expires_at IS NULL OR expires_at > now())
          AND config -> 'spendLimit' IS NULL AND ${Ledger.unbilled(sql, sql`agent.tenant_id`)}
          ${options.allowDisconnected ? sql`` : sql`AND coalesce(jsonb_array_length(application_tools), 0) = 0`}),
      inserted AS (
        INSERT INTO agent_requests (agent_id, id, method, state, fingerprint, input)
        SELECT id, ${request.id}, ${request.method}, 'queued', ${request.fingerprint},
          ${Storable.stringify(request.input)}::jsonb FROM accepting
        ON CONFLICT (agent_id, id) DO NOTHING
        RETURNING ${requestFields})${Announcements.announcing(sql, options.announce)}
      SELECT ${agentFields}, EXISTS (SELECT 1 FROM accepting) AND ${
      Announcements.announcedAll(sql, options.announce)
    } AS accepting,
        coalesce((SELECT to_jsonb(i) FROM inserted i), (SELECT to_jsonb(r) FROM (SELECT ${requestFields}
          FROM agent_requests WHERE agent_id = ${request.agentId} AND id = ${request.id}) r)) AS request
      FROM agent`.pipe(
      Effect.flatMap((rows) => {
        const row = rows[0]
        if (row === undefined) return Effect.succeed(Option.none())
        if (row.id === null) return Effect.succeed(Option.some({ agent: Option.none(), request: Option.none() }))
        const { accepting, request: recorded, ...agent } = row
        const found = { agent: Option.some(toAgent(agent)), request: Option.none<RequestRow>() }
        if (!accepting) return Effect.succeed(Option.some(found))
        // Inserted at the same moment by another statement, which has committed by now.
        const accepted = recorded === null
          ? Effect.map(getRequest(request.agentId, request.id), Option.getOrThrow)
          : Effect.succeed(fromJsonRow(recorded))
        return Effect.map(accepted, (row) => Option.some({ ...found, request: Option.some(row) }))
      })
    )

  const getRequest = (agentId: string, id: string) =>
    sql<RequestRow>`SELECT ${requestFields} FROM agent_requests WHERE agent_id = ${agentId} AND id = ${id}`.pipe(
      Effect.map((rows) => Option.fromNullable(rows[0]))
    )

  const requestAt = (agentId: string, seq: number) =>
    sql<RequestRow>`SELECT ${requestFields} FROM agent_requests WHERE agent_id = ${agentId} AND seq = ${seq}`.pipe(
      Effect.map((rows) => Option.fromNullable(rows[0]))
    )

  const requestFor = (tenant: Statement.Fragment, agentId: string, id: string) =>
    sql<
      RequestRow & { readonly agentExpiresAt: number | null; readonly agentFound: boolean; readonly reader: string }
    >`
      SELECT a.id IS NOT NULL AS agent_found, ${sql.unsafe(epoch("a.expires_at"))} AS agent_expires_at, k.reader,
        r.*
      FROM (${tenant}) AS k (reader)
      LEFT JOIN agents a ON a.id = ${agentId} AND a.tenant_id = k.reader AND a.deleted_at IS NULL
        AND a.retention_seconds IS NULL
      LEFT JOIN LATERAL (SELECT ${requestFields} FROM agent_requests WHERE agent_id = a.id AND id = ${id}) r ON true`
      .pipe(
        Effect.map((rows) =>
          Option.map(
            Option.fromNullable(rows[0]),
            ({ agentExpiresAt, agentFound, reader, ...request }): Option.Option<RequestOfAgent> =>
              agentFound
                ? Option.some({
                  tenantId: reader,
                  expiresAt: agentExpiresAt,
                  request: request.id === null ? Option.none<RequestRow>() : Option.some(request as RequestRow)
                })
                : Option.none()
          )
        )
      )

  const requestOf = (tenantId: string, agentId: string, id: string) =>
    Effect.map(requestFor(tenantOf(tenantId), agentId, id), Option.flatten)

  const queuedRequests = sql<RequestRow>`SELECT ${requestFields} FROM agent_requests
    WHERE state = 'queued' AND steered_into IS NULL ORDER BY seq`

  /** Requests not yet completed, in arrival order. */
  const openRequests = (agentId: string) =>
    sql<RequestRow>`SELECT ${requestFields} FROM agent_requests
      WHERE agent_id = ${agentId} AND state <> 'completed' AND steered_into IS NULL ORDER BY seq`

  /** Steered prompts a running turn took: they end with it. */
  const markSteered = (agentId: string, ids: ReadonlyArray<string>, into: string): Write => (guard) =>
    sql`UPDATE agent_requests SET steered_into = ${into}, began_at = now()
      WHERE agent_id = ${agentId} AND id IN ${sql.in(ids)} AND state <> 'completed' AND ${guard}`

  /** Open requests a turn took as steered prompts. */
  const steeredInto = (agentId: string, into: string) =>
    sql<RequestRow>`SELECT ${requestFields} FROM agent_requests
      WHERE agent_id = ${agentId} AND steered_into = ${into} AND state <> 'completed' ORDER BY seq`

  /** The latest requests: the running and the most recently settled. */
  const recentRequests = (agentId: string, limit: number) =>
    sql<RequestRow>`SELECT ${requestFields} FROM agent_requests
      WHERE agent_id = ${agentId} ORDER BY seq DESC LIMIT ${limit}`.pipe(Effect.map((rows) => rows.toReversed()))

  /** Makes the caller the agent's owner: a new epoch, which every later journal write must carry. */
  const claim = (agentId: string, owner: string) =>
    sql<{
      epoch: number
      claimedAt: number
      previousOwner: string | null
      continuesFrom: number | null
      inherited: Array<{ id: number; data: unknown }> | null
    }>`
      UPDATE agents a SET owner_epoch = a.owner_epoch + 1, owner = ${owner}, released_cursor = NULL,
        released_events = NULL, connection = NULL
      FROM (SELECT id, owner, released_cursor, released_events FROM agents WHERE id = ${agentId} FOR UPDATE) previous
      WHERE a.id = previous.id
      RETURNING a.owner_epoch::float8 AS epoch, ${sql.unsafe(epoch("now()"))} AS claimed_at,
        previous.owner AS previous_owner, previous.released_cursor::float8 AS continues_from,
        previous.released_events AS inherited`.pipe(
      Effect.map((rows) =>
        rows[0] ??
          { epoch: 0, claimedAt: Number.POSITIVE_INFINITY, previousOwner: null, continuesFrom: null, inherited: null }
      )
    )

  const epochOf = (agentId: string) =>
    sql<{ epoch: number }>`SELECT owner_epoch::float8 AS epoch FROM agents WHERE id = ${agentId}`.pipe(
      Effect.map((rows) => rows[0]?.epoch ?? 0)
    )

  /**
   * Lets go of the agent on purpose (drain, rebalance, idle): any node may
   * pick up its open work, and the next owner's event log goes on from
   * `cursor` with the buffered `events`, so watchers miss nothing.
   */
  const release = (
    agentId: string,
    epoch: number,
    cursor: number,
    events: ReadonlyArray<{ readonly id: number; readonly data: unknown }>
  ) =>
    sql`UPDATE agents SET owner = NULL, released_cursor = ${cursor}, released_events = ${
      Storable.stringify(events)
    }::jsonb
      WHERE id = ${agentId} AND owner_epoch = ${epoch}`

  /**
   * Announces agents let go with unfinished work, so a node wakes each on
   * its next owner at once (the periodic sweep stands behind it).
   */
  const announceReleased = (agentIds: ReadonlyArray<string>) =>
    agentIds.length === 0 ? Effect.void : sql`SELECT pg_notify(${Announcements.releasedChannel}, released.id)
      FROM agents released WHERE released.id IN ${sql.in(agentIds)}
      AND EXISTS (SELECT 1 FROM agent_requests WHERE agent_id = released.id AND state <> 'completed')`.pipe(
      Effect.asVoid
    )

  /**
   * Runs a journal write only while `epoch` is still the agent's, in one
   * statement: the write is conditioned on `guard`, which holds only if the
   * agents row (locked until the statement commits, so no claim slips in
   * between) still carries the epoch. A stale owner's write fails with
   * Fenced and changes nothing.
   */
  const fenced = (
    agentId: string,
    epoch: number,
    write: Write
  ) =>
    sql<{ epoch: number | null; at: number }>`
      WITH fence AS (SELECT owner_epoch FROM agents WHERE id = ${agentId} FOR NO KEY UPDATE),
        ${
      sql.csv(
        [write(sql`EXISTS (SELECT 1 FROM fence WHERE owner_epoch = ${epoch})`)].flat().map((statement, index) =>
          sql`${sql(`written_${index}`)} AS (${statement})`
        )
      )
    }
      SELECT (SELECT owner_epoch::float8 FROM fence) AS epoch, floor(extract(epoch from now()))::float8 AS at`.pipe(
      Effect.flatMap((rows) =>
        rows[0]?.epoch === epoch ? Effect.succeed(rows[0].at) : Effect.fail(new Fenced({ agentId, epoch }))
      ),
      Effect.catchTag("SqlError", (cause) => Effect.fail(new PersistenceError({ cause })))
    )

  /**
   * The request's event, written only where `guard` holds and the request is in one of `states`: the
   * statement's snapshot is the one its update sees, so the event goes with the change and only with it.
   */
  const reported = (
    guard: Statement.Fragment,
    agentId: string,
    id: string,
    states: ReadonlyArray<string>,
    report: Outbox.NewEvent
  ) =>
    Outbox.insert(sql, [{
      ...report,
      when: sql`${guard} AND EXISTS (SELECT 1 FROM agent_requests
        WHERE agent_id = ${agentId} AND id = ${id} AND state IN ${sql.in(states)})`
    }])

  const markRunning = (agentId: string, id: string, beganIndex: number, report: Outbox.NewEvent): Write => (guard) => [
    sql`UPDATE agent_requests SET state = 'running', began_index = ${beganIndex}, began_at = coalesce(began_at, now())
      WHERE agent_id = ${agentId} AND id = ${id} AND ${guard}`,
    reported(guard, agentId, id, ["queued"], report)
  ]

  /** A node took over the running turn: its handoff note is consumed. */
  const markResumed = (agentId: string, id: string, report: Outbox.NewEvent): Write => (guard) => [
    sql`UPDATE agent_requests SET handoff = NULL, resumes = resumes + 1
      WHERE agent_id = ${agentId} AND id = ${id} AND ${guard}`,
    reported(guard, agentId, id, ["running"], {
      ...report,
      merge: sql`jsonb_build_object('resumes', (SELECT resumes + 1 FROM agent_requests
        WHERE agent_id = ${agentId} AND id = ${id}))`
    })
  ]

  /** The owner stops the running turn between steps, for another node to continue it. */
  const markHandoff = (agentId: string, id: string, reason: string): Write => (guard) =>
    sql`UPDATE agent_requests SET handoff = ${reason}
      WHERE agent_id = ${agentId} AND id = ${id} AND state = 'running' AND ${guard}`

  /** Recorded before a tool call is sent: a call with a start and no result has an unknown outcome. */
  const startToolCall = (agentId: string, requestId: string, toolCallId: string, tool: string): Write => (guard) =>
    sql`INSERT INTO agent_tool_calls (agent_id, tool_call_id, request_id, tool)
      SELECT ${agentId}, ${toolCallId}, ${requestId}, ${tool} WHERE ${guard} ON CONFLICT DO NOTHING`

  const finishToolCall =
    (agentId: string, toolCallId: string, result: unknown, charge?: Ledger.Charge): Write => (guard) => {
      // Before the result is written, in the same transaction: it charges only where no result was recorded.
      const charged = charge === undefined ? undefined : Ledger.charging(
        sql,
        [charge],
        sql`${guard} AND EXISTS (SELECT 1 FROM agent_tool_calls
        WHERE agent_id = ${agentId} AND tool_call_id = ${toolCallId} AND result IS NULL)`
      )
      return [
        ...(charged === undefined ? [] : [charged]),
        sql`UPDATE agent_tool_calls SET result = ${Storable.stringify(result)}::jsonb, ended_at = now()
        WHERE agent_id = ${agentId} AND tool_call_id = ${toolCallId} AND ${guard}`
      ]
    }

  const subAgents = (agentId: string, requestId?: string) =>
    sql<{ id: string }>`SELECT id FROM agents WHERE config -> 'delegation' -> 'ancestors' @> ${
      Storable.stringify([requestId === undefined ? { agentId } : { agentId, requestId }])
    }::jsonb`.pipe(Effect.map((rows) => rows.map((row) => row.id)))

  /** The request's tool calls that were sent, with their results where they came back. */
  const toolCalls = (agentId: string, requestId: string) =>
    sql<{ toolCallId: string; tool: string; result: unknown }>`SELECT tool_call_id, tool, result
      FROM agent_tool_calls WHERE agent_id = ${agentId} AND request_id = ${requestId}`.pipe(
      Effect.map((rows) => new Map(rows.map((row) => [row.toolCallId, row.result === null ? { tool: row.tool } : row])))
    )

  const complete = (
    agentId: string,
    id: string,
    outcome: Record<string, unknown>,
    report: Outbox.NewEvent | undefined,
    steeredInto?: string,
    charge?: Ledger.Charge
  ): Write =>
  (guard) => {
    // With the change and only with it: every part of the statement reads the request before it completes.
    const charged = charge === undefined ? undefined : Ledger.charging(
      sql,
      [charge],
      sql`${guard} AND EXISTS (SELECT 1 FROM agent_requests
        WHERE agent_id = ${agentId} AND id = ${id} AND state <> 'completed')`
    )
    return [
      // Announced with the change and only with it: a data-modifying statement runs to its end, RETURNING too.
      sql`UPDATE agent_requests SET state = 'completed', outcome = ${Storable.stringify(outcome)}::jsonb,
        steered_into = coalesce(${steeredInto ?? null}, steered_into), ended_at = now()
      WHERE agent_id = ${agentId} AND id = ${id} AND state <> 'completed' AND ${guard}
      RETURNING ${Announcements.settledNotify(sql)}`,
      ...(report === undefined ? [] : [reported(guard, agentId, id, ["queued", "running"], report)]),
      ...(charged === undefined ? [] : [charged])
    ]
  }

  const agentsToWake = (leaseSeconds: number, unheardSeconds: number) =>
    sql<{ agentId: string; resumeFailures: number }>`
      SELECT a.id AS agent_id, a.resume_failures FROM agents a
      WHERE a.id IN (SELECT agent_id FROM agent_requests WHERE state <> 'completed')
        AND a.deleted_at IS NULL AND (a.resume_after IS NULL OR a.resume_after <= now())
        AND (a.owner IS NULL OR NOT EXISTS (SELECT 1 FROM runner_reports w
            WHERE w.address = a.owner AND w.reported_at > now() - make_interval(secs => ${leaseSeconds}))
          OR a.id IN (SELECT agent_id FROM agent_requests WHERE state = 'queued' AND steered_into IS NULL
            AND started_at < now() - make_interval(secs => ${unheardSeconds}))
          -- A turn begun before its owner's runner (re)started under the same address: that process is gone.
          OR EXISTS (SELECT 1 FROM agent_requests r JOIN runner_reports w ON w.address = a.owner
            WHERE r.agent_id = a.id AND r.state = 'running' AND r.began_at < w.started_at))`

  const ownedToWake = (owner: string) =>
    sql<{ agentId: string; resumeFailures: number }>`
      SELECT a.id AS agent_id, a.resume_failures FROM agents a
      WHERE a.owner = ${owner} AND a.deleted_at IS NULL AND (a.resume_after IS NULL OR a.resume_after <= now())
        AND a.id IN (SELECT agent_id FROM agent_requests WHERE state <> 'completed')`

  /**
   * Waking the agent's work failed: after a few quick attempts (an outage or a move fails several in a row),
   * each waits twice as long as the last, at most an hour. Every node's sweep may have tried in the same
   * window: only the first failure of a window counts, so three nodes do not triple the wait.
   */
  const resumeFailed = (agentId: string) =>
    sql`UPDATE agents SET resume_failures = resume_failures + 1,
        resume_after = now() + make_interval(secs => least(3600, power(2, greatest(0, resume_failures - 3))::int))
      WHERE id = ${agentId} AND (resume_after IS NULL OR resume_after <= now())`

  const resumeSucceeded = (agentId: string) =>
    sql`UPDATE agents SET resume_failures = 0, resume_after = NULL WHERE id = ${agentId} AND resume_failures > 0`

  const updateConfig = (agentId: string, config: AgentConfig): Write => (guard) =>
    sql`UPDATE agents SET config = ${Storable.stringify(config)}::jsonb WHERE id = ${agentId} AND ${guard}`

  const setApplicationTools =
    (agentId: string, tools: ReadonlyArray<ApplicationTool>, hash: string): Write => (guard) =>
      sql`UPDATE agents SET application_tools = ${Storable.stringify(tools)}::jsonb, tools_hash = ${hash}
      WHERE id = ${agentId} AND ${guard}`

  const setConnection = (agentId: string, connection: string | null): Write => (guard) =>
    sql`UPDATE agents SET connection = ${connection} WHERE id = ${agentId} AND ${guard}`

  const appendMessage =
    (agentId: string, index: number, requestId: string | null, message: unknown): Write => (guard) =>
      sql`INSERT INTO agent_messages (agent_id, index, request_id, message)
      SELECT ${agentId}, ${index}, ${requestId}, ${Storable.stringify(message)}::jsonb WHERE ${guard}
      ON CONFLICT (agent_id, index) DO UPDATE SET message = excluded.message, request_id = excluded.request_id`

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

  const historyBytes = (agentId: string) =>
    sql<{ bytes: number }>`SELECT coalesce(sum(octet_length(message::text)), 0)::float8 AS bytes
      FROM agent_messages WHERE agent_id = ${agentId}`.pipe(Effect.map((rows) => rows[0]?.bytes ?? 0))

  const messages = (agentId: string) =>
    sql<{ index: number; requestId: string | null; message: unknown }>`
      SELECT index, request_id, message FROM agent_messages WHERE agent_id = ${agentId} ORDER BY index`

  return AgentStore.of({
    insertAgent,
    find: flow(find, PersistenceError.refail),
    findFor: flow(findFor, PersistenceError.refail),
    acceptFor: flow(acceptFor, PersistenceError.refail),
    findById: flow(findById, PersistenceError.refail),
    findByKey: flow(findByKey, PersistenceError.refail),
    notifiedOf: flow(notifiedOf, PersistenceError.refail),
    list: flow(list, PersistenceError.refail),
    remove: flow(remove, PersistenceError.refail),
    updateDetails: flow(updateDetails, PersistenceError.refail),
    reserveEvents: flow(reserveEvents, PersistenceError.refail),
    extendEvents: flow(extendEvents, PersistenceError.refail),
    insertRequest: flow(insertRequest, PersistenceError.refail),
    getRequest: flow(getRequest, PersistenceError.refail),
    requestAt: flow(requestAt, PersistenceError.refail),
    requestOf: flow(requestOf, PersistenceError.refail),
    requestFor: flow(requestFor, PersistenceError.refail),
    queuedRequests: PersistenceError.refail(queuedRequests),
    openRequests: flow(openRequests, PersistenceError.refail),
    markSteered,
    steeredInto: flow(steeredInto, PersistenceError.refail),
    recentRequests: flow(recentRequests, PersistenceError.refail),
    claim: flow(claim, PersistenceError.refail),
    epochOf: flow(epochOf, PersistenceError.refail),
    release: flow(release, PersistenceError.refail),
    announceReleased: flow(announceReleased, PersistenceError.refail),
    fenced,
    markRunning,
    markResumed,
    markHandoff,
    startToolCall,
    finishToolCall,
    toolCalls: flow(toolCalls, PersistenceError.refail),
    subAgents: flow(subAgents, PersistenceError.refail),
    complete,
    agentsToWake: flow(agentsToWake, PersistenceError.refail),
    ownedToWake: flow(ownedToWake, PersistenceError.refail),
    resumeFailed: flow(resumeFailed, PersistenceError.refail),
    resumeSucceeded: flow(resumeSucceeded, PersistenceError.refail),
    appendMessage,
    messagesBefore: flow(messagesBefore, PersistenceError.refail),
    completedRequests: flow(completedRequests, PersistenceError.refail),
    messageCount: flow(messageCount, PersistenceError.refail),
    historyBytes: flow(historyBytes, PersistenceError.refail),
    updateConfig,
    setApplicationTools,
    setConnection,
    messages: flow(messages, PersistenceError.refail)
  })
})

/** An agent found by its tenant, unless it expired (410); not found, 404. */
export const liveOf = <A extends { readonly expiresAt: number | null }>(
  id: string,
  found: Option.Option<A>
): Effect.Effect<A, ApiError.NotFound | ApiError.Gone> => {
  if (Option.isNone(found)) return Effect.fail(new ApiError.NotFound({ error: `no agent ${id}` }))
  if (found.value.expiresAt !== null && found.value.expiresAt * 1000 <= Date.now()) {
    return Effect.fail(new ApiError.Gone({ error: `agent ${id} expired` }))
  }
  return Effect.succeed(found.value)
}

/** A live agent of the tenant: NotFound when it has none by that id, Gone once it expired. */
export const findLive = (store: AgentStore["Type"], tenantId: string, id: string) =>
  Effect.flatMap(store.find(tenantId, id), (agent) => liveOf(id, agent))

/** The request found (see `requestOf`) when its agent is live: NotFound or Gone otherwise. */
export const liveRequestOf = (
  agentId: string,
  id: string,
  found: Option.Option<RequestOfAgent>
): Effect.Effect<RequestRow, ApiError.NotFound | ApiError.Gone> =>
  Effect.flatMap(liveOf(agentId, found), ({ request }) =>
    Option.match(request, {
      onNone: () => Effect.fail(new ApiError.NotFound({ error: `no request ${id}` })),
      onSome: Effect.succeed
    }))

export const layer: Layer.Layer<AgentStore, never, SqlClient.SqlClient> = Layer.effect(AgentStore, make)
