/**
 * Stateless runs: one input, one answer, nothing carried over. A run is an
 * agent row of its own (id `run_...`, `retention_seconds` set) with one
 * request under the same id, so it runs on the agent's engine: the same turn
 * loop, tools, files, spend limit, webhooks, journal and cluster (a drained
 * node hands it on, a dead node's run resumes elsewhere). Tenant-facing agent
 * reads leave these rows out. Once it ends, a run is kept for its retention
 * window, then deleted with everything it wrote (see `sweep`).
 */
import { Ledger } from "@agent-runtime/billing"
import type { Session, Webhook } from "@agent-runtime/domain"
import { Agent as AgentSchemas, ApiError, Common, Run, StatelessRun } from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import type { Listing } from "@agent-runtime/models"
import { UsageLog } from "@agent-runtime/models"
import { DatabaseHealth, Ids, Storable } from "@agent-runtime/store"
import { NodeSpans } from "@agent-runtime/telemetry"
import type { Sharding } from "@effect/cluster"
import { SqlClient, type Statement } from "@effect/sql"
import { Context, Duration, Effect, Layer, Option, Schedule, type Scope, Stream } from "effect"
import { entityClient, fingerprint } from "./Agent.ts"
import { PersistenceError } from "./AgentError.ts"
import * as AgentEvents from "./AgentEvents.ts"
import { type AgentRow, AgentStore } from "./AgentStore.ts"
import type * as AgentTokens from "./AgentTokens.ts"
import type { Definitions } from "./Definitions.ts"
import { Drain } from "./Drain.ts"
import * as AgentSetup from "./internal/agentSetup.ts"
import * as AgentViews from "./internal/agentViews.ts"
import * as Prompts from "./Prompts.ts"
import * as Sse from "./Sse.ts"
import * as StructuredOutput from "./StructuredOutput.ts"
import * as Workspace from "./Workspace.ts"

/** Why a run is not started; nothing is left behind. */
export type CreateError =
  | ApiError.InvalidRequest
  | ApiError.NotFound
  | ApiError.TooLarge
  | ApiError.SpendLimit
  | ApiError.InsufficientCredit
  | ApiError.PaymentRequired
  | ApiError.IdempotencyConflict
  | ApiError.IdempotencyInProgress
  | PersistenceError

/** Why a run's events cannot be read. */
export type PollError = ApiError.NotFound | ApiError.ReplayGap | ApiError.Unavailable | PersistenceError

export class Runs extends Context.Tag("@agent-runtime/agent/Runs")<Runs, {
  /**
   * Starts a run (the same Idempotency-Key and body are the same run while it is kept) and answers it once it
   * ends or `wait` is over.
   */
  readonly create: (
    tenantId: string,
    input: StatelessRun.RunInput,
    idempotencyKey: Option.Option<string>
  ) => Effect.Effect<StatelessRun.StatelessRun, CreateError>
  /** The run; with `wait` (at most 25 s), once it ends or the wait is over. */
  readonly get: (
    tenantId: string,
    runId: string,
    wait: Duration.Duration
  ) => Effect.Effect<StatelessRun.StatelessRun, ApiError.NotFound | PersistenceError>
  readonly list: (tenantId: string, params: Common.PageParams) => Effect.Effect<
    { readonly data: ReadonlyArray<StatelessRun.StatelessRun>; readonly next: string | null },
    PersistenceError
  >
  /** A page of the run's messages (see AgentViews.historyPage). */
  readonly messages: (
    tenantId: string,
    runId: string,
    page: { readonly before?: number | undefined; readonly limit?: number | undefined }
  ) => Effect.Effect<Session.HistoryPage, ApiError.NotFound | PersistenceError>
  /** The run's events after `cursor`, waiting up to `wait` for the first. */
  readonly poll: (
    tenantId: string,
    runId: string,
    cursor: number,
    wait: Duration.Duration
  ) => Effect.Effect<Session.EventPoll, PollError>
  /**
   * The bytes of the run's SSE stream: its events from `cursor` (from its first when absent), ending after
   * its `response` frame; a run that ended answers that frame alone.
   */
  readonly eventBody: (
    tenantId: string,
    runId: string,
    cursor: Option.Option<number>,
    ready: unknown
  ) => Effect.Effect<Stream.Stream<Uint8Array>, PollError, Scope.Scope>
  /** Stops a running run (it ends failed, code aborted) and answers it; an ended run as it is. */
  readonly abort: (
    tenantId: string,
    runId: string
  ) => Effect.Effect<StatelessRun.StatelessRun, ApiError.NotFound | PersistenceError>
  /** Deletes the run now (aborting it if it runs); its rows and files go at the next sweep. */
  readonly remove: (
    tenantId: string,
    runId: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError>
  /**
   * Deletes runs past their retention (and deleted ones), with their messages, journal and volumes; ends
   * what an ended run left waiting on a person. How many runs it deleted.
   */
  readonly sweep: Effect.Effect<number, PersistenceError>
}>() {}

/** A run as read: its row, its request's state and outcome, and its usage. */
interface RunRow {
  readonly id: string
  readonly model: string
  readonly retentionSeconds: number
  readonly createdAt: number
  readonly state: string | null
  readonly outcome: unknown
  readonly metadata: Record<string, string> | null
  readonly endedAt: number | null
  readonly usage: { readonly usage: Webhook.RunUsage | null }
}

interface StoredOutcome {
  readonly result?: Partial<Run.RunResult> & { readonly toolErrors?: number; readonly output?: unknown }
  readonly error?: string
  readonly code?: string
  readonly uncertain?: boolean
}

/** How long a deleted run's rows stay for its owner to let it go before the sweep removes them. */
const deletedGrace = "1 minute"

/** A run whose request was never recorded (its create failed midway) is removed after this. */
const unstartedGrace = "10 minutes"

/** What the run shows for how it ended. */
const endOf = (outcome: StoredOutcome): Pick<StatelessRun.StatelessRun, "status" | "error"> => {
  const result = outcome.result
  const failed = (code: string, message: string) => ({
    status: "failed" as const,
    error: new StatelessRun.RunFailure({
      code,
      message,
      ...(outcome.uncertain === true ? { uncertain: true } : {})
    })
  })
  if (outcome.code !== undefined) return failed(outcome.code, outcome.error ?? result?.error ?? outcome.code)
  if (outcome.error !== undefined) return failed("failed", outcome.error)
  if (typeof result?.error === "string") return failed("failed", result.error)
  switch (result?.stopped) {
    case "input_required":
      return { status: "input_required", error: undefined }
    case "spend_limit":
      return failed("spend_limit", "the run's spend limit was reached")
    case "turn_limit":
      return failed("turn_limit", "the run reached its limit of model rounds")
  }
  return { status: "completed", error: undefined }
}

const view = (row: RunRow): StatelessRun.StatelessRun => {
  const outcome = row.state === "completed" ? (row.outcome ?? {}) as StoredOutcome : undefined
  const result = outcome?.result
  const ended = outcome === undefined ? { status: "running" as const, error: undefined } : endOf(outcome)
  return new StatelessRun.StatelessRun({
    id: row.id,
    status: ended.status,
    model: row.model,
    ...(result?.reply === undefined ? {} : { text: result.reply }),
    ...(result?.output === undefined ? {} : { output: result.output }),
    ...(ended.error === undefined ? {} : { error: ended.error }),
    usage: row.usage.usage,
    toolCalls: result?.toolCalls ?? [],
    toolErrors: typeof result?.toolErrors === "number" ? result.toolErrors : 0,
    ...(result?.inputs === undefined ? {} : { inputs: result.inputs }),
    ...(result?.files === undefined ? {} : { files: result.files }),
    ...(result?.presented === undefined ? {} : { presented: result.presented }),
    ...(row.metadata === null ? {} : { metadata: row.metadata }),
    retentionSeconds: row.retentionSeconds,
    createdAt: row.createdAt,
    ...(row.endedAt === null ? {} : { endedAt: row.endedAt, expiresAt: row.endedAt + row.retentionSeconds })
  }, { disableValidation: true })
}

/** The prompt a run's input makes: its text parts joined, its file parts as inline files. */
const promptOf = (input: StatelessRun.RunInputValue) => {
  if (typeof input === "string") return { text: input, files: [] }
  const text = input.flatMap((part) => part.type === "text" ? [part.text] : []).join("\n\n")
  const files = input.flatMap((part) =>
    part.type === "file"
      ? [
        new Run.PromptFileData({
          data: part.data,
          name: part.name,
          ...(part.contentType === undefined ? {} : { contentType: part.contentType })
        })
      ]
      : []
  )
  return { text, files }
}

/** A run has no built-ins that wait on a person, even when its definition names them. */
const personal = new Set(["ask_user", "schedule"])

const isResponse = (data: unknown, runId: string) => {
  const frame = data as { readonly type?: unknown; readonly id?: unknown } | null
  return frame?.type === "response" && frame.id === runId
}

const seconds = (wait: StatelessRun.RunInput["wait"]) =>
  wait === true ? StatelessRun.maxCreateWaitSeconds : wait === false || wait === undefined ? 0 : wait

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const store = yield* AgentStore
  const usage = yield* UsageLog.UsageLog
  const volumes = yield* Volumes.Volumes
  const events = yield* AgentEvents.AgentEvents
  const prompts = yield* Prompts.Prompts
  const ledger = yield* Ledger.Ledger
  const setup = yield* AgentSetup.make
  const makeClient = yield* entityClient

  const epoch = (column: string) => sql.unsafe(`floor(extract(epoch from ${column}))::float8`)

  /** The run's row and request, unless it is deleted or past its retention. */
  const rowsOf = (tenantId: string, where: Statement.Fragment, limit: number) =>
    sql<RunRow>`
      SELECT a.id, a.config ->> 'model' AS model, a.retention_seconds, ${epoch("a.created_at")} AS created_at,
        r.state, r.outcome, r.input -> 'metadata' AS metadata, ${epoch("r.ended_at")} AS ended_at,
        ${usage.runUsage(sql.unsafe("a.id"), sql.unsafe("a.id"))} AS usage
      FROM agents a LEFT JOIN agent_requests r ON r.agent_id = a.id AND r.id = a.id
      WHERE a.tenant_id = ${tenantId} AND a.retention_seconds IS NOT NULL AND a.deleted_at IS NULL
        AND (r.ended_at IS NULL OR r.ended_at + make_interval(secs => a.retention_seconds) > now())
        AND ${where}
      ORDER BY a.id LIMIT ${limit}`

  const read = (tenantId: string, runId: string) =>
    Effect.flatMap(
      PersistenceError.refail(rowsOf(tenantId, sql`a.id = ${runId}`, 1)),
      (rows) =>
        rows.length === 0 ? Effect.fail(new ApiError.NotFound({ error: `no run ${runId}` })) : Effect.succeed(rows[0]!)
    )

  /** The run once it ends or `wait` is over. */
  const answer = (tenantId: string, runId: string, wait: Duration.Duration) =>
    Effect.map(
      Duration.toMillis(wait) === 0
        ? read(tenantId, runId)
        : events.awaitSettled(runId, runId, read(tenantId, runId), (row) => row.state === "completed", wait),
      view
    )

  const findByKey = (tenantId: string, key: string) =>
    PersistenceError.refail(
      sql<{ id: string; inputFingerprint: string }>`
        SELECT id, input_fingerprint FROM agents
        WHERE tenant_id = ${tenantId} AND run_key = ${key} AND deleted_at IS NULL`
    ).pipe(Effect.map((rows) => Option.fromNullable(rows[0])))

  /**
   * The run's prompt, recorded under the run's id (once, however often it is sent). A run has no expiry and
   * no application: those refusals cannot happen.
   */
  const send = (run: AgentRow, prompt: Run.PromptInput) =>
    prompts.prompt(run, prompt, run.id).pipe(
      Effect.catchTags({ Gone: Effect.die, ApplicationNotConnected: Effect.die })
    )

  /** Removes a run made by a create that then failed: it never ran, and leaves nothing behind. */
  const discard = (tenantId: string, runId: string, workspaceId: string | undefined) =>
    Effect.gen(function*() {
      if (workspaceId !== undefined) yield* Effect.ignore(volumes.remove(tenantId, workspaceId))
      yield* sql`DELETE FROM agents WHERE id = ${runId}`
    }).pipe(PersistenceError.refail)

  const create = (tenantId: string, input: StatelessRun.RunInput, idempotencyKey: Option.Option<string>) =>
    Effect.gen(function*() {
      const {
        actor,
        from,
        input: given,
        maxOutputTokens,
        metadata,
        output,
        retentionSeconds,
        temperature,
        wait,
        ...settings
      } = input
      const waitFor = Duration.seconds(seconds(wait))
      // How long the caller waits is no part of what the run is.
      const inputFingerprint = fingerprint({ ...input, wait: undefined })
      const key = Option.getOrNull(idempotencyKey)
      const { files, text } = promptOf(given)
      const prompt = new Run.PromptInput({
        text,
        ...(files.length === 0 ? {} : { files }),
        ...(output === undefined ? {} : { output }),
        ...(actor === undefined ? {} : { actor }),
        ...(from === undefined ? {} : { from }),
        ...(metadata === undefined ? {} : { metadata })
      })
      if (key !== null) {
        const existing = yield* findByKey(tenantId, key)
        if (Option.isSome(existing)) {
          if (existing.value.inputFingerprint !== inputFingerprint) {
            return yield* new ApiError.IdempotencyConflict({
              error: `Idempotency-Key ${key} was used with another body`
            })
          }
          // Its prompt again, under the run's id: recorded once, so a create cut short after the row is finished.
          const run = yield* store.findById(existing.value.id)
          if (Option.isSome(run)) yield* send(run.value, prompt)
          return yield* answer(tenantId, existing.value.id, waitFor)
        }
      }
      // Checked before anything is written.
      if (output !== undefined) {
        const problem = StructuredOutput.problemOf(output.schema)
        if (problem !== undefined) return yield* new ApiError.InvalidRequest({ error: `invalid request: ${problem}` })
      }
      const inline = Run.inlineBytes(files)
      if (inline > Run.maxInlineFileBytes) {
        return yield* new ApiError.TooLarge({
          error: `inline files come to ${inline} bytes; at most ${Run.maxInlineFileBytes} across the input`
        })
      }
      // A prepaid tenant's spent credit refuses the run before anything is written.
      yield* ledger.admit(tenantId)
      const base = yield* setup.configFor(tenantId, settings)
      const builtins = base.builtins?.filter((name) => !personal.has(name))
      // A workspace only when there are files to hold or file tools asked for: a classifier has no tools at all.
      const workspaceId = files.length > 0 || settings.fileTools === true ? Ids.volume() : undefined
      const config = {
        ...base,
        ...(builtins === undefined ? {} : { builtins }),
        ...(maxOutputTokens === undefined ? {} : { maxOutputTokens }),
        ...(temperature === undefined ? {} : { temperature }),
        mounts: workspaceId === undefined
          ? []
          : [new AgentSchemas.Mount({ volumeId: workspaceId, path: Workspace.workspacePath, mode: "rw" })]
      }
      const id = Ids.make("run")
      const inserted = yield* sql<{ id: string }>`
        INSERT INTO agents (id, tenant_id, name, config, input_fingerprint, retention_seconds, run_key)
        VALUES (${id}, ${tenantId}, ${id}, ${Storable.stringify(config)}::jsonb, ${inputFingerprint},
          ${retentionSeconds ?? StatelessRun.defaultRetentionSeconds}, ${key})
        ON CONFLICT (tenant_id, run_key) WHERE run_key IS NOT NULL AND deleted_at IS NULL DO NOTHING
        RETURNING id`.pipe(
        Effect.tap((rows) =>
          rows.length === 0 || workspaceId === undefined
            ? Effect.void
            : volumes.create(tenantId, { id: workspaceId, agentId: id })
        ),
        sql.withTransaction,
        PersistenceError.refail
      )
      if (inserted.length === 0) {
        return yield* new ApiError.IdempotencyInProgress({
          error: `the first request with Idempotency-Key ${key} still runs`
        })
      }
      const run = yield* store.findById(id)
      if (Option.isNone(run)) return yield* new ApiError.NotFound({ error: `no run ${id}` })
      yield* send(run.value, prompt).pipe(Effect.tapError(() => discard(tenantId, id, workspaceId)))
      return yield* answer(tenantId, id, waitFor)
    })

  const get = (tenantId: string, runId: string, wait: Duration.Duration) =>
    answer(tenantId, runId, Duration.min(wait, AgentEvents.longPollLimit))

  const list = (tenantId: string, params: Common.PageParams) =>
    Effect.map(
      PersistenceError.refail(rowsOf(
        tenantId,
        params.after === undefined ? sql`true` : sql`a.id > ${params.after}`,
        Common.pageQueryLimit(params)
      )),
      (rows) => Common.toPage(rows.map(view), params)
    )

  const messages = (
    tenantId: string,
    runId: string,
    page: { readonly before?: number | undefined; readonly limit?: number | undefined }
  ) => Effect.zipRight(read(tenantId, runId), AgentViews.historyPage(store, runId, page))

  const poll = (tenantId: string, runId: string, cursor: number, wait: Duration.Duration) =>
    Effect.zipRight(read(tenantId, runId), events.poll(runId, cursor, wait))

  const eventBody = (tenantId: string, runId: string, cursor: Option.Option<number>, ready: unknown) =>
    Effect.gen(function*() {
      const row = yield* read(tenantId, runId)
      const after = Option.getOrElse(cursor, () => 0)
      if (row.state === "completed") {
        // Ended: what its owner still holds after the cursor, to its response frame; else that frame alone.
        const held = yield* events.poll(runId, after, Duration.zero).pipe(
          Effect.map((polled) => polled.events),
          Effect.catchTags({ ReplayGap: () => Effect.succeed([]), Unavailable: () => Effect.succeed([]) })
        )
        const end = held.findIndex((entry) => isResponse(entry.data, runId))
        return Stream.make(
          Sse.ready(ready, after),
          ...(end === -1
            ? [Sse.unnumbered(JSON.stringify({ type: "response", id: runId, outcome: row.outcome }))]
            : held.slice(0, end + 1).map((entry) => Sse.frame(entry.id, JSON.stringify(entry.data))))
        )
      }
      const body = yield* events.eventBody(runId, Option.orElse(cursor, () => Option.some(0)), {
        snapshot: true,
        ready
      })
      return Sse.until(
        body._tag === "Node"
          ? Stream.fromAsyncIterable(body.body as AsyncIterable<Uint8Array>, (error) => error)
          : body.body,
        `"type":"response","id":${JSON.stringify(runId)}`
      ).pipe(Stream.catchAllCause(() => Stream.make(Sse.reconnect)))
    })

  const abortRun = (runId: string) =>
    makeClient(runId).Abort({ requestId: Ids.make("req"), fingerprint: fingerprint({ method: "abort" }) }).pipe(
      Effect.timeout(AgentEvents.ownerAnswerLimit),
      Effect.orDie
    )

  const abort = (tenantId: string, runId: string) =>
    Effect.gen(function*() {
      const row = yield* read(tenantId, runId)
      if (row.state !== "completed") yield* abortRun(runId)
      return yield* answer(tenantId, runId, Duration.seconds(5))
    })

  const remove = (tenantId: string, runId: string) =>
    Effect.gen(function*() {
      const row = yield* read(tenantId, runId)
      if (row.state !== "completed") yield* abortRun(runId)
      yield* PersistenceError.refail(
        sql`UPDATE agents SET deleted_at = now() WHERE id = ${runId} AND retention_seconds IS NOT NULL`
      )
      return { id: runId, deleted: true as const }
    })

  const sweep = Effect.gen(function*() {
    // What an ended run left waiting on a person is cancelled through its owner: a run cannot be resumed.
    const waiting = yield* sql<{ id: string }>`
      SELECT DISTINCT a.id FROM agents a
        JOIN agent_requests r ON r.agent_id = a.id AND r.id = a.id AND r.state = 'completed'
        JOIN agent_inputs i ON i.agent_id = a.id AND i.state = 'pending'
      WHERE a.retention_seconds IS NOT NULL LIMIT 100`
    yield* Effect.forEach(waiting, (run) => Effect.ignore(abortRun(run.id)), { discard: true })
    const done = yield* sql<{ id: string; tenantId: string; mounts: ReadonlyArray<{ volumeId: string }> | null }>`
      SELECT a.id, a.tenant_id, a.config -> 'mounts' AS mounts FROM agents a
        LEFT JOIN agent_requests r ON r.agent_id = a.id AND r.id = a.id
      WHERE a.retention_seconds IS NOT NULL AND (
        a.deleted_at < now() - ${deletedGrace}::interval
        OR (r.state = 'completed' AND r.ended_at + make_interval(secs => a.retention_seconds) <= now())
        OR (r.agent_id IS NULL AND a.created_at < now() - ${unstartedGrace}::interval))
      LIMIT 100`
    for (const run of done) {
      // Its own workspace goes with it; the usage it recorded stays (what was spent was spent).
      yield* Effect.forEach(run.mounts ?? [], (mount) =>
        volumes.get(run.tenantId, mount.volumeId).pipe(
          Effect.flatMap((volume) => volume.agentId === run.id ? volumes.remove(run.tenantId, volume.id) : Effect.void),
          Effect.catchTag("NotFound", () => Effect.void)
        ), { discard: true })
      yield* sql`DELETE FROM agents WHERE id = ${run.id}`
    }
    return done.length
  }).pipe(PersistenceError.refail)

  return Runs.of({
    create: (tenantId, input, key) => create(tenantId, input, key).pipe(NodeSpans.withSpan("Runs.create")),
    get,
    list,
    messages,
    poll,
    eventBody,
    abort,
    remove,
    sweep
  })
})

export const layer: Layer.Layer<
  Runs,
  never,
  | Ledger.Ledger
  | SqlClient.SqlClient
  | AgentStore
  | UsageLog.UsageLog
  | Volumes.Volumes
  | AgentEvents.AgentEvents
  | Definitions
  | AgentTokens.AgentTokens
  | Listing.Listing
  | Sharding.Sharding
> = Layer.effect(Runs, make).pipe(Layer.provide(Prompts.layer))

/** How often each node deletes the runs past their retention. */
const sweepInterval = Duration.minutes(1)

/** Deletes runs past their retention, from every node (a second node's delete finds nothing); not while draining. */
export const layerSweep: Layer.Layer<never, never, Runs | Drain | DatabaseHealth.DatabaseHealth> = Layer
  .scopedDiscard(Effect.gen(function*() {
    const runs = yield* Runs
    const drain = yield* Drain
    const health = yield* DatabaseHealth.DatabaseHealth
    const once = Effect.suspend(() =>
      drain.isDraining() || !health.current().reachable ? Effect.void : Effect.asVoid(runs.sweep)
    ).pipe(Effect.catchAllCause((cause) => Effect.logWarning("deleting expired runs failed", cause)))
    yield* Effect.forkScoped(Effect.repeat(once, Schedule.spaced(sweepInterval)))
  }))
