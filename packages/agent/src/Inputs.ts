/**
 * Human input: the questions, approvals, forms and pages a turn asks a
 * person for. A turn that asks ends its request with stopped input_required;
 * each input then settles by an answer (answered, declined, cancelled), by
 * time (expired) or by a new prompt to the agent (superseded). When the last
 * input of a suspension settles by answer or expiry, the request of method
 * resume that continues the turn is recorded in the same transaction, keyed
 * by the suspended request: it starts exactly once, however many nodes settle
 * inputs at the same moment.
 */
import { CanonicalJson, Input } from "@agent-runtime/domain"
import { DatabaseHealth, Storable } from "@agent-runtime/store"
import { Outbox } from "@agent-runtime/webhooks"
import type { Sharding } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Context, Duration, Effect, flow, Layer, Schedule } from "effect"
import * as Crypto from "node:crypto"
import { entityClient } from "./Agent.ts"
import { AnswerRefused, PersistenceError } from "./AgentError.ts"
import { ownerAnswerLimit } from "./AgentEvents.ts"
import { AgentStore, type RequestRow, type Write } from "./AgentStore.ts"
import { Drain } from "./Drain.ts"
import * as JsonSchema from "./internal/jsonSchema.ts"

/** An input as stored. */
export interface InputRow {
  readonly id: string
  readonly agentId: string
  readonly tenantId: string
  readonly requestId: string
  readonly toolCallId: string
  readonly kind: Input.InputKind
  readonly message: string
  readonly detail: Record<string, unknown>
  readonly audience: ReadonlyArray<string>
  readonly approvers: ReadonlyArray<string>
  readonly state: Input.InputState
  readonly answer: Input.InputAnswer | null
  readonly createdAt: number
  readonly expiresAt: number
}

/** The detail as its kind's record. */
const detailOf = (row: InputRow): Input.InputDetail => {
  const detail = row.detail as any
  switch (row.kind) {
    case "question":
      return new Input.QuestionDetail(detail)
    case "approval":
      return new Input.ApprovalDetail(detail)
    case "form":
      return new Input.FormDetail(detail)
    case "url":
      return new Input.UrlDetail(detail)
  }
}

export const toInput = (row: InputRow): Input.Input =>
  new Input.Input({
    id: row.id,
    agent: row.agentId,
    tenant: row.tenantId,
    requestId: row.requestId,
    toolCallId: row.toolCallId,
    kind: row.kind,
    message: row.message,
    detail: detailOf(row),
    responders: new Input.Responders({ audience: row.audience }),
    state: row.state,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
    ...(row.answer === null ? {} : { answer: new Input.InputAnswer(row.answer) })
  })

/** What a tool call asks of a person; the turn waits on it. */
export interface Ask {
  readonly toolCallId: string
  readonly kind: Input.InputKind
  readonly message: string
  readonly detail: Record<string, unknown>
  /** What the tool gets back when it is called again (see `Tools.Ask`): kept in the detail, never shown. */
  readonly resume?: unknown
}

/** Where an input's detail keeps its `resume` (a key no kind's detail has). */
const resumeKey = "agent-runtime/resume"

/** What the tool that asked the input gets back when it is called again. */
export const resumeOf = (row: InputRow): unknown => row.detail[resumeKey]

/** The detail as watchers see it: without what is kept for the tool. */
export const shownDetail = (row: InputRow): Record<string, unknown> => {
  const { [resumeKey]: _kept, ...shown } = row.detail
  return shown
}

/** Who may answer the inputs a turn asks, and how long they wait. */
export interface Responders {
  readonly audience: ReadonlyArray<string>
  readonly approvers: ReadonlyArray<string>
  readonly lifetimeSeconds: number
}

/** One answer, as the API takes it. */
export interface AnswerItem {
  readonly id: string
  readonly action: Input.InputAction
  readonly content?: Record<string, unknown> | undefined
  readonly from?:
    | { readonly id: string; readonly name?: string | undefined; readonly username?: string | undefined }
    | undefined
  readonly actor?: string | undefined
}

/** What a settling changed: the inputs it names (as they stand now), and resume requests it recorded. */
export interface Settled {
  readonly inputs: ReadonlyArray<InputRow>
  /** Inputs that left pending in this settling: each gets an input_resolved event. */
  readonly changed: ReadonlyArray<InputRow>
  readonly resumes: ReadonlyArray<RequestRow>
}

/** An input's id: one per request and call, so a turn run again after a lost node asks the same input. */
export const inputId = (agentId: string, requestId: string, toolCallId: string) =>
  `in_${
    Crypto.createHash("sha256").update(`${agentId}\u0000${requestId}\u0000${toolCallId}`).digest("base64url").slice(
      0,
      24
    )
  }`

/** The request that resumes a suspended one: its id is derived, so it is recorded once. */
export const resumeRequestId = (suspension: string) => `resume_${suspension}`

const stateOf = (action: Input.InputAction): Input.ResolvedInputState =>
  action === "accept" ? "answered" : action === "decline" ? "declined" : "cancelled"

interface QuestionSpec {
  readonly question: string
  readonly multiSelect?: boolean
}

/** Why an answer does not fit its input, if it does not. */
const misfit = (row: InputRow, item: AnswerItem): string | undefined => {
  const content = item.content
  if (item.action !== "accept") {
    if (row.kind === "approval" && item.action === "decline" && content?.reason !== undefined) {
      return typeof content.reason === "string" && content.reason.length <= 2000
        ? undefined
        : "content.reason must be a string of at most 2000 characters"
    }
    return undefined
  }
  switch (row.kind) {
    case "question": {
      const answers = content?.answers
      if (typeof answers !== "object" || answers === null || Array.isArray(answers)) {
        return "content.answers must map each question to a label, labels, or own words"
      }
      const questions = (row.detail.questions as ReadonlyArray<QuestionSpec>) ?? []
      for (const [question, answer] of Object.entries(answers)) {
        const asked = questions.find((spec) => spec.question === question)
        if (asked === undefined) return `content.answers: no question ${JSON.stringify(question)} was asked`
        if (Array.isArray(answer)) {
          if (asked.multiSelect !== true) return `content.answers: ${JSON.stringify(question)} takes one answer`
          if (!answer.every((label) => typeof label === "string")) return "content.answers: labels are strings"
        } else if (typeof answer !== "string") return "content.answers: an answer is a string or array of strings"
      }
      return Object.keys(answers).length === 0 ? "content.answers must answer at least one question" : undefined
    }
    case "form": {
      // An unusable schema was refused when the tool asked.
      const validate = JsonSchema.validatorFor(row.detail.requestedSchema as Record<string, unknown>)
      const misfit = JsonSchema.misfitOf(validate, content ?? {}, "content")
      return misfit === undefined ? undefined : `content does not fit the form: ${misfit}`
    }
    case "approval":
      return content?.argumentsHash !== undefined && content.argumentsHash !== row.detail.argumentsHash
        ? "content.argumentsHash names other arguments than the call waiting for approval"
        : undefined
    case "url":
      return undefined
  }
}

export class InputStore extends Context.Tag("@agent-runtime/agent/InputStore")<InputStore, {
  /** Records what a request's calls ask (a call asking again finds its input); the caller fences the write. */
  readonly ask: (
    tenantId: string,
    agentId: string,
    requestId: string,
    asks: ReadonlyArray<Ask>,
    responders: Responders
  ) => Write
  /** The inputs of one request. */
  readonly forRequest: (agentId: string, requestId: string) => Effect.Effect<ReadonlyArray<InputRow>, PersistenceError>
  /** The latest input of each of these tool calls. */
  readonly forCalls: (
    agentId: string,
    toolCallIds: ReadonlyArray<string>
  ) => Effect.Effect<ReadonlyMap<string, InputRow>, PersistenceError>
  /** The agent's inputs, newest first, at most 100. */
  readonly list: (
    agentId: string,
    state?: Input.InputState
  ) => Effect.Effect<ReadonlyArray<InputRow>, PersistenceError>
  /**
   * The tenant's inbox: inputs of its agents that are not deleted, newest first (then by id), `limit` of them
   * after the input `after` (the last of the previous page).
   */
  readonly inbox: (
    tenantId: string,
    options: {
      readonly state?: Input.InputState | undefined
      readonly after?: string | undefined
      readonly limit: number
    }
  ) => Effect.Effect<ReadonlyArray<InputRow>, PersistenceError>
  /**
   * Records answers, all or none: each must name a pending input of the agent (or repeat the answer it
   * has), come from its audience or approvers when `from` is given, and fit the input.
   */
  readonly answer: (
    agentId: string,
    answers: ReadonlyArray<AnswerItem>,
    by: Record<string, unknown>
  ) => Effect.Effect<Settled, AnswerRefused | PersistenceError>
  /** Settles the agent's pending inputs whose time is up as expired. */
  readonly expire: (agentId: string) => Effect.Effect<Settled, PersistenceError>
  /** A new prompt came: the pending inputs of these calls are superseded, and no resume follows. */
  readonly supersede: (
    agentId: string,
    toolCallIds: ReadonlyArray<string>
  ) => Effect.Effect<Settled, PersistenceError>
  /**
   * An abort came: every pending input of the agent is cancelled, and no resume follows (an answer after it
   * is refused as a conflict). A person's own `cancel` answer is another thing: that one resumes the turn.
   */
  readonly cancel: (agentId: string) => Effect.Effect<Settled, PersistenceError>
  /** Agents with pending inputs past their time. */
  readonly expiring: Effect.Effect<ReadonlyArray<string>, PersistenceError>
}>() {}

// created_at is shown in seconds under its own name: an ORDER BY of it names the table's column, not this one.
const columns = `id, agent_id, tenant_id, request_id, tool_call_id, kind, message, detail, audience, approvers, state,
  answer, floor(extract(epoch from created_at))::float8 AS created_at,
  floor(extract(epoch from expires_at))::float8 AS expires_at`

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const store = yield* AgentStore
  const fields = sql.unsafe(columns)

  const ask = (
    tenantId: string,
    agentId: string,
    requestId: string,
    asks: ReadonlyArray<Ask>,
    responders: Responders
  ): Write =>
  (guard) => {
    const expiresAt = sql`now() + make_interval(secs => ${responders.lifetimeSeconds})`
    return [
      sql`INSERT INTO agent_inputs (id, agent_id, tenant_id, request_id, tool_call_id, kind, message, detail, audience,
        approvers, expires_at)
      SELECT a.id, ${agentId}, ${tenantId}, ${requestId}, a.tool_call_id, a.kind, a.message, a.detail,
        ${Storable.stringify(responders.audience)}::jsonb, ${
        Storable.stringify(responders.approvers)
      }::jsonb, ${expiresAt}
      FROM jsonb_to_recordset(${
        Storable.stringify(asks.map((asked) => ({
          id: inputId(agentId, requestId, asked.toolCallId),
          tool_call_id: asked.toolCallId,
          kind: asked.kind,
          message: asked.message,
          detail: asked.resume === undefined ? asked.detail : { ...asked.detail, [resumeKey]: asked.resume }
        })))
      }::jsonb) AS a(id text, tool_call_id text, kind text, message text, detail jsonb)
      WHERE ${guard}
      ON CONFLICT (id) DO NOTHING`,
      // input.requested for each input this write makes (not for one a repeated write finds made).
      Outbox.insert(
        sql,
        asks.map((asked): Outbox.NewEvent => {
          const id = inputId(agentId, requestId, asked.toolCallId)
          return {
            tenantId,
            type: "input.requested",
            data: { agentId, requestId, inputId: id, toolCallId: asked.toolCallId, kind: asked.kind },
            merge: sql`jsonb_build_object('expiresAt', floor(extract(epoch from ${expiresAt})))`,
            when: sql`${guard} AND NOT EXISTS (SELECT 1 FROM agent_inputs WHERE id = ${id})`
          }
        })
      )
    ]
  }

  const forRequest = (agentId: string, requestId: string) =>
    sql<InputRow>`SELECT ${fields} FROM agent_inputs WHERE agent_id = ${agentId} AND request_id = ${requestId}
      ORDER BY agent_inputs.created_at, id`

  const forCalls = (agentId: string, toolCallIds: ReadonlyArray<string>) =>
    toolCallIds.length === 0
      ? Effect.succeed(new Map<string, InputRow>())
      : sql<InputRow>`SELECT DISTINCT ON (tool_call_id) ${fields} FROM agent_inputs
        WHERE agent_id = ${agentId} AND tool_call_id IN ${sql.in(toolCallIds)}
        ORDER BY tool_call_id, agent_inputs.created_at DESC, id`.pipe(
        Effect.map((rows) => new Map(rows.map((row) => [row.toolCallId, row])))
      )

  const list = (agentId: string, state?: Input.InputState) =>
    sql<InputRow>`SELECT ${fields} FROM agent_inputs WHERE agent_id = ${agentId}
      ${state === undefined ? sql`` : sql`AND state = ${state}`}
      ORDER BY agent_inputs.created_at DESC, id LIMIT 100`

  const inbox = (
    tenantId: string,
    options: {
      readonly state?: Input.InputState | undefined
      readonly after?: string | undefined
      readonly limit: number
    }
  ) =>
    sql<InputRow>`SELECT ${fields} FROM agent_inputs i
      WHERE tenant_id = ${tenantId}
        AND EXISTS (SELECT 1 FROM agents a
          WHERE a.id = i.agent_id AND a.deleted_at IS NULL AND a.retention_seconds IS NULL)
      ${options.state === undefined ? sql`` : sql`AND state = ${options.state}`}
      ${
      options.after === undefined
        ? sql``
        : sql`AND (created_at, id) < (SELECT created_at, id FROM agent_inputs
          WHERE id = ${options.after} AND tenant_id = ${tenantId})`
    }
      ORDER BY i.created_at DESC, i.id DESC LIMIT ${options.limit}`

  /** Locks the named inputs, in id order so two settlings never wait on each other crosswise. */
  const lock = (agentId: string, ids: ReadonlyArray<string>) =>
    ids.length === 0 ? Effect.succeed([] as ReadonlyArray<InputRow>) : sql<InputRow>`
      SELECT ${fields} FROM agent_inputs WHERE agent_id = ${agentId} AND id IN ${sql.in(ids)}
      ORDER BY id FOR UPDATE`

  /** Settles pending inputs; answers the settled rows. */
  const write = (
    agentId: string,
    changes: ReadonlyArray<{ readonly id: string; readonly state: string; readonly answer?: unknown }>
  ) =>
    changes.length === 0
      ? Effect.succeed([] as ReadonlyArray<InputRow>)
      : sql`UPDATE agent_inputs i SET state = c.state, answer = c.answer, settled_at = now()
        FROM jsonb_to_recordset(${Storable.stringify(changes)}::jsonb) AS c(id text, state text, answer jsonb)
        WHERE i.agent_id = ${agentId} AND i.id = c.id AND i.state = 'pending'`.pipe(
        Effect.zipRight(sql<InputRow>`SELECT ${fields} FROM agent_inputs
          WHERE agent_id = ${agentId} AND id IN ${sql.in(changes.map((change) => change.id))} ORDER BY id`),
        // In the settling's transaction; the callers change only inputs they locked pending.
        Effect.tap((rows) =>
          Outbox.insert(
            sql,
            rows.map((row): Outbox.NewEvent => ({
              tenantId: row.tenantId,
              type: "input.resolved",
              data: { agentId, requestId: row.requestId, inputId: row.id, state: row.state }
            }))
          )
        )
      )

  /**
   * For each suspended request whose inputs all settled, the resume request, recorded once: the request's
   * row is locked first, so of two settlings at once the second sees what the first wrote.
   */
  const resume = (agentId: string, requestIds: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const resumes: Array<RequestRow> = []
      for (const requestId of [...new Set(requestIds)].sort()) {
        const [suspended] = yield* sql<{ input: Record<string, unknown> }>`
          SELECT input FROM agent_requests WHERE agent_id = ${agentId} AND id = ${requestId} FOR UPDATE`
        const [open] = yield* sql<{ pending: number; ended: number }>`
          SELECT count(*) FILTER (WHERE state = 'pending')::int AS pending,
            count(*) FILTER (WHERE state IN ('superseded', 'cancelled') AND answer IS NULL)::int AS ended
          FROM agent_inputs WHERE agent_id = ${agentId} AND request_id = ${requestId}`
        // A superseded suspension is continued by the prompt that superseded it; an aborted one by none.
        if (suspended === undefined || open === undefined || open.pending > 0 || open.ended > 0) continue
        const { actor, from, metadata } = suspended.input as Record<string, unknown>
        resumes.push(
          yield* store.insertRequest({
            agentId,
            id: resumeRequestId(requestId),
            method: "resume",
            fingerprint: resumeRequestId(requestId),
            input: {
              suspension: requestId,
              ...(actor === undefined ? {} : { actor }),
              ...(from === undefined ? {} : { from }),
              ...(metadata === undefined ? {} : { metadata })
            }
          })
        )
      }
      return resumes
    })

  const answer = (agentId: string, answers: ReadonlyArray<AnswerItem>, by: Record<string, unknown>) =>
    Effect.gen(function*() {
      const rows = yield* lock(agentId, [...new Set(answers.map((item) => item.id))].sort())
      const now = Date.now() / 1000
      const changes: Array<{ id: string; state: string; answer: Input.InputAnswer }> = []
      for (const item of answers) {
        const refuse = (reason: AnswerRefused["reason"], detail: string) =>
          Effect.fail(new AnswerRefused({ reason, inputId: item.id, detail }))
        const row = rows.find((candidate) => candidate.id === item.id)
        if (row === undefined) return yield* refuse("not_found", "no such input of this agent")
        if (
          item.from !== undefined && !row.audience.includes(item.from.id) && !row.approvers.includes(item.from.id)
        ) return yield* refuse("forbidden", `${item.from.id} is not among those who may answer it`)
        const state = stateOf(item.action)
        const settled = changes.find((change) => change.id === item.id)?.answer ?? row.answer
        if (row.state !== "pending" || settled !== null) {
          const same = settled !== null && settled.action === item.action &&
            CanonicalJson.equals(settled.content ?? null, item.content ?? null)
          if (same) continue
          return yield* refuse(
            "conflict",
            `it is already ${row.state === "pending" ? stateOf(settled!.action) : row.state}`
          )
        }
        if (row.expiresAt <= now) return yield* refuse("conflict", "it expired")
        const wrong = misfit(row, item)
        if (wrong !== undefined) return yield* refuse("invalid", wrong)
        changes.push({
          id: row.id,
          state,
          answer: {
            action: item.action,
            ...(item.content === undefined ? {} : { content: item.content }),
            by: {
              ...by,
              ...(item.from === undefined ? {} : item.from),
              ...(item.actor === undefined ? {} : { actor: item.actor })
            },
            at: Math.floor(now)
          } as Input.InputAnswer
        })
      }
      const changed = yield* write(agentId, changes)
      const resumes = yield* resume(agentId, changed.map((row) => row.requestId))
      const current = new Map([...rows, ...changed].map((row) => [row.id, row]))
      return { inputs: answers.map((item) => current.get(item.id)!), changed, resumes } satisfies Settled
    }).pipe(sql.withTransaction)

  /** Settles these inputs, those still pending, as the runtime's own doing (no one's answer). */
  const settleAll = (agentId: string, ids: ReadonlyArray<string>, state: "expired" | "superseded" | "cancelled") =>
    Effect.gen(function*() {
      const rows = yield* lock(agentId, ids)
      const changed = yield* write(
        agentId,
        rows.filter((row) => row.state === "pending").map((row) => ({ id: row.id, state }))
      )
      const resumes = state === "expired" ? yield* resume(agentId, changed.map((row) => row.requestId)) : []
      return { inputs: rows, changed, resumes } satisfies Settled
    }).pipe(sql.withTransaction)

  const expire = (agentId: string) =>
    sql<{ id: string }>`SELECT id FROM agent_inputs
      WHERE agent_id = ${agentId} AND state = 'pending' AND expires_at <= now()`.pipe(
      Effect.flatMap((rows) => settleAll(agentId, rows.map((row) => row.id).sort(), "expired"))
    )

  const supersede = (agentId: string, toolCallIds: ReadonlyArray<string>) =>
    toolCallIds.length === 0
      ? Effect.succeed<Settled>({ inputs: [], changed: [], resumes: [] })
      : sql<{ id: string }>`SELECT id FROM agent_inputs
        WHERE agent_id = ${agentId} AND state = 'pending' AND tool_call_id IN ${sql.in(toolCallIds)}`.pipe(
        Effect.flatMap((rows) => settleAll(agentId, rows.map((row) => row.id).sort(), "superseded"))
      )

  const cancel = (agentId: string) =>
    sql<{ id: string }>`SELECT id FROM agent_inputs WHERE agent_id = ${agentId} AND state = 'pending'`.pipe(
      Effect.flatMap((rows) => settleAll(agentId, rows.map((row) => row.id).sort(), "cancelled"))
    )

  const expiring = sql<{ agentId: string }>`SELECT DISTINCT agent_id FROM agent_inputs
    WHERE state = 'pending' AND expires_at <= now() LIMIT 1000`.pipe(
    Effect.map((rows) => rows.map((row) => row.agentId))
  )

  return InputStore.of({
    ask,
    forRequest: flow(forRequest, PersistenceError.refail),
    forCalls: flow(forCalls, PersistenceError.refail),
    list: flow(list, PersistenceError.refail),
    inbox: flow(inbox, PersistenceError.refail),
    answer: (agentId, answers, by) =>
      answer(agentId, answers, by).pipe(
        Effect.catchTag("SqlError", (cause) => Effect.fail(new PersistenceError({ cause })))
      ),
    expire: flow(expire, PersistenceError.refail),
    supersede: flow(supersede, PersistenceError.refail),
    cancel: flow(cancel, PersistenceError.refail),
    expiring: PersistenceError.refail(expiring)
  })
})

export const layer: Layer.Layer<InputStore, never, SqlClient.SqlClient | AgentStore> = Layer.effect(InputStore, make)

/** How often each node looks for inputs whose time is up. */
const expiryInterval = Duration.seconds(2)

/**
 * Expires inputs on time, from every node: each agent with an input past its time is sent ExpireInputs,
 * which its owner settles (the transaction makes a second node's send find nothing to do), resuming the
 * suspensions it completes. A draining node leaves it to the others.
 */
export const layerExpiry: Layer.Layer<
  never,
  never,
  Sharding.Sharding | Drain | DatabaseHealth.DatabaseHealth | InputStore
> = Layer.scopedDiscard(Effect.gen(function*() {
  const inputs = yield* InputStore
  const drain = yield* Drain
  const health = yield* DatabaseHealth.DatabaseHealth
  const makeClient = yield* entityClient
  const sweep = Effect.suspend(() =>
    drain.isDraining() || !health.current().reachable ? Effect.succeed([]) : inputs.expiring
  ).pipe(
    Effect.flatMap((agentIds) =>
      Effect.forEach(
        agentIds,
        (agentId) =>
          makeClient(agentId).ExpireInputs().pipe(
            Effect.timeout(ownerAnswerLimit),
            Effect.catchAllCause((cause) =>
              Effect.logWarning("expiring an agent's inputs failed; the next sweep tries again", cause).pipe(
                Effect.annotateLogs({ agentId })
              )
            )
          ),
        { concurrency: 8, discard: true }
      )
    ),
    Effect.catchAllCause((cause) => Effect.logWarning("looking for expired inputs failed", cause))
  )
  yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(expiryInterval)))
}))
