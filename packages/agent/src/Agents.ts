/**
 * What the API asks of agents: create (idempotent by key), read, list,
 * delete, prompt, request records, events, state and history. Work goes to
 * the agent's entity; reads of settled data come from the journal.
 */
import type { Ledger } from "@agent-runtime/billing"
import {
  Agent as AgentSchemas,
  ApiError,
  type Application,
  Common,
  type Definition,
  type Input,
  Run,
  Session
} from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import type { Listing, UsageLog } from "@agent-runtime/models"
import { Ids, PersistenceError } from "@agent-runtime/store"
import { NodeSpans, TraceExport } from "@agent-runtime/telemetry"
import type { Sharding } from "@effect/cluster"
import { Context, Duration, Effect, identity, Layer, Option, type Scope, type Stream } from "effect"
import { entityClient, fingerprint, toRecord } from "./Agent.ts"
import * as AgentEvents from "./AgentEvents.ts"
import { AgentStore, findLive, liveRequestOf, type RequestRow } from "./AgentStore.ts"
import * as AgentTokens from "./AgentTokens.ts"
import type { Definitions } from "./Definitions.ts"
import type * as EventLog from "./EventLog.ts"
import * as Inputs from "./Inputs.ts"
import * as AgentSetup from "./internal/agentSetup.ts"
import * as AgentViews from "./internal/agentViews.ts"
import * as Prompts from "./Prompts.ts"
import type { Tools } from "./Tools.ts"

export type { Caller, PromptError } from "./Prompts.ts"
type Caller = Prompts.Caller
type PromptError = Prompts.PromptError

export class Agents extends Context.Tag("@agent-runtime/agent/Agents")<Agents, {
  /** A new agent (the same Idempotency-Key and body return the same agent), with its first prompt if given. */
  readonly create: (
    tenantId: string,
    input: AgentSchemas.AgentInput,
    idempotencyKey: Option.Option<string>
  ) => Effect.Effect<
    AgentSchemas.AgentCreated,
    ApiError.IdempotencyConflict | ApiError.IdempotencyInProgress | ApiError.InvalidRequest | ApiError.NotFound
  >
  /**
   * The keyed agent with the given settings applied; made when no live agent has the key. With a
   * definition, its latest revision is re-applied (the agent's own model, thinkingLevel and fileTools stay).
   */
  readonly upsert: (tenantId: string, key: string, input: AgentSchemas.AgentInput) => Effect.Effect<
    AgentSchemas.AgentCreated,
    ApiError.IdempotencyConflict | ApiError.IdempotencyInProgress | ApiError.InvalidRequest | ApiError.NotFound
  >
  /** Re-applies the agent's definition at `revision` (default its latest): a configure request. */
  readonly applyDefinition: (
    tenantId: string,
    agentId: string,
    input: Definition.DefinitionApply
  ) => Effect.Effect<
    Run.RequestRecord,
    ApiError.NotFound | ApiError.Gone | ApiError.InvalidRequest | ApiError.IdempotencyConflict
  >
  /** A new agent with the source's settings and a copy of its history up to a finished turn. */
  readonly fork: (
    tenantId: string,
    sourceId: string,
    input: AgentSchemas.ForkInput
  ) => Effect.Effect<
    AgentSchemas.ForkCreated,
    ApiError.NotFound | ApiError.Gone | ApiError.IdempotencyConflict | ApiError.TooLarge
  >
  /** The credentials of a keyed agent, by key or id. */
  readonly credentials: (
    tenantId: string,
    keyOrId: string
  ) => Effect.Effect<AgentSchemas.AgentCredentials, ApiError.NotFound | ApiError.AgentKeyless>
  /** The tenant of a live agent named by a genuine token. */
  readonly authenticateToken: (
    token: string,
    agentId: string
  ) => Effect.Effect<Option.Option<{ readonly tenantId: string; readonly agentId: string }>>
  readonly prompt: (
    tenantId: string,
    agentId: string,
    input: Run.PromptInput
  ) => Effect.Effect<Run.RequestRecord, PromptError>
  /**
   * `prompt` for a caller whose credential is checked in the statement that reads the agent, a round trip
   * sooner: refused before anything about the agent when it is not valid.
   */
  readonly promptAs: (
    caller: Caller,
    agentId: string,
    input: Run.PromptInput
  ) => Effect.Effect<Run.RequestRecord, ApiError.Unauthorized | PromptError>
  /**
   * Puts a file in the agent's workspace under uploads/<requestId>/<name>, to attach to that prompt as
   * {path}; the upload's path is where the agent sees it.
   */
  readonly upload: (
    tenantId: string,
    agentId: string,
    requestId: string,
    name: string,
    bytes: Uint8Array,
    contentType: string | undefined
  ) => Effect.Effect<
    Session.Upload,
    ApiError.NotFound | ApiError.Gone | ApiError.InvalidRequest | ApiError.TooLarge
  >
  /**
   * Runs `code` with the agent's code-mode tools, as a request of method execute queued like a prompt:
   * its outcome's result is what the code returned or threw, the calls it made and their errors.
   */
  readonly execute: (
    tenantId: string,
    agentId: string,
    input: Run.ExecuteInput
  ) => Effect.Effect<
    Run.RequestRecord,
    | ApiError.NotFound
    | ApiError.Gone
    | ApiError.SpendLimit
    | ApiError.InsufficientCredit
    | ApiError.PaymentRequired
    | ApiError.IdempotencyConflict
    | ApiError.ApplicationNotConnected
  >
  /** A turn on the history as it is, without a new user message. */
  readonly continueRun: (
    tenantId: string,
    agentId: string,
    input: Run.ContinueInput
  ) => Effect.Effect<
    Run.RequestRecord,
    | ApiError.NotFound
    | ApiError.Gone
    | ApiError.SpendLimit
    | ApiError.InsufficientCredit
    | ApiError.PaymentRequired
    | ApiError.IdempotencyConflict
    | ApiError.ApplicationNotConnected
  >
  readonly abort: (
    tenantId: string,
    agentId: string,
    requestId: Option.Option<string>
  ) => Effect.Effect<Run.RequestRecord, ApiError.NotFound | ApiError.Gone | ApiError.IdempotencyConflict>
  /**
   * Changes settings at once; mounts are checked as at creation. A request id used before answers that
   * request's record when the body is the same, else a conflict, and changes nothing.
   */
  readonly configure: (
    tenantId: string,
    agentId: string,
    input: AgentSchemas.ConfigureInput
  ) => Effect.Effect<
    Run.RequestRecord,
    ApiError.NotFound | ApiError.Gone | ApiError.InvalidRequest | ApiError.IdempotencyConflict
  >
  /** A status request, answered at once from the owner's view of the agent. */
  readonly statusRequest: (
    tenantId: string,
    agentId: string
  ) => Effect.Effect<Run.RequestRecord, ApiError.NotFound | ApiError.Gone | ApiError.Unavailable>
  readonly detail: (
    tenantId: string,
    agentId: string
  ) => Effect.Effect<AgentSchemas.AgentDetail, ApiError.NotFound | ApiError.Gone | ApiError.Unavailable>
  readonly list: (
    tenantId: string,
    params: Common.PageParams
  ) => Effect.Effect<{ readonly data: ReadonlyArray<AgentSchemas.AgentSummary>; readonly next: string | null }>
  readonly remove: (tenantId: string, agentId: string) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound>
  /** Sets a live agent's name and/or type (left out: unchanged); its name and type now. */
  readonly setMetadata: (
    tenantId: string,
    agentId: string,
    input: AgentSchemas.AgentMetadataInput
  ) => Effect.Effect<AgentSchemas.AgentMetadata, ApiError.NotFound | ApiError.Gone>
  /** A live agent's mounts, its workspace included (as its detail shows them). */
  readonly mounts: (
    tenantId: string,
    agentId: string
  ) => Effect.Effect<ReadonlyArray<AgentSchemas.Mount>, ApiError.NotFound | ApiError.Gone>
  /** The record of a request; with `wait` it answers once the request settles or the wait (at most 25 s) ends. */
  readonly request: (
    tenantId: string,
    agentId: string,
    requestId: string,
    wait: Duration.Duration
  ) => Effect.Effect<Run.RequestRecord, ApiError.NotFound | ApiError.Gone>
  /** `request` for a caller whose credential is checked with every read of the request, as `promptAs`. */
  readonly requestAs: (
    caller: Caller,
    agentId: string,
    requestId: string,
    wait: Duration.Duration
  ) => Effect.Effect<Run.RequestRecord, ApiError.Unauthorized | ApiError.NotFound | ApiError.Gone>
  readonly state: (
    tenantId: string,
    agentId: string
  ) => Effect.Effect<Session.SessionState, ApiError.NotFound | ApiError.Gone | ApiError.Unavailable>
  /** A page of history, oldest first, ending before `before`, in whole turns (see HistoryPage). */
  /** The whole history, oldest first; TooLarge past `Session.maxWholeHistoryBytes` (see AgentViews.wholeHistory). */
  readonly wholeHistory: (
    tenantId: string,
    agentId: string
  ) => Effect.Effect<Session.History, ApiError.NotFound | ApiError.Gone | ApiError.TooLarge>
  readonly history: (
    tenantId: string,
    agentId: string,
    page?: { readonly before?: number | undefined; readonly limit?: number | undefined }
  ) => Effect.Effect<Session.HistoryPage, ApiError.NotFound | ApiError.Gone>
  /** The events after `cursor`, waiting up to `wait` for the first. */
  readonly poll: (
    tenantId: string,
    agentId: string,
    cursor: number,
    wait: Duration.Duration
  ) => Effect.Effect<EventLog.Poll, ApiError.NotFound | ApiError.Gone | ApiError.ReplayGap | ApiError.Unavailable>
  /** The body of an SSE response of the agent's events. */
  readonly eventBody: (
    tenantId: string,
    agentId: string,
    cursor: Option.Option<number>,
    options: { readonly snapshot: boolean; readonly ready: unknown }
  ) => Effect.Effect<
    AgentEvents.EventBody,
    ApiError.NotFound | ApiError.Gone | ApiError.ReplayGap | ApiError.Unavailable,
    Scope.Scope
  >
  /** The SSE body of an application connection (see AgentEvents.connectionBody). */
  readonly connectionBody: (
    tenantId: string,
    agentId: string,
    cursor: Option.Option<number>,
    options: AgentEvents.ConnectionOptions
  ) => Effect.Effect<
    Stream.Stream<Uint8Array>,
    | ApiError.NotFound
    | ApiError.Gone
    | ApiError.ReplayGap
    | ApiError.ApplicationConnected
    | ApiError.Unavailable,
    Scope.Scope
  >
  /** The agent's inputs, newest first (at most 100), in one state if given. */
  /** The inputs of the tenant's agents, newest first, a page at a time (see InputStore.inbox). */
  readonly inbox: (
    tenantId: string,
    params: Common.PageParams & { readonly state?: Input.InputState | undefined }
  ) => Effect.Effect<Common.Page<Input.Input>>
  readonly inputs: (
    tenantId: string,
    agentId: string,
    state?: Input.InputState
  ) => Effect.Effect<Input.InputList, ApiError.NotFound | ApiError.Gone>
  /**
   * Answers inputs, all or none (see Inputs.answer), as the agent's owner records them; `by` says which
   * credential answered. The suspensions they complete resume, once.
   */
  readonly answer: (
    tenantId: string,
    agentId: string,
    answers: ReadonlyArray<Inputs.AnswerItem>,
    by: Record<string, unknown>
  ) => Effect.Effect<
    Run.AnsweredAll,
    | ApiError.NotFound
    | ApiError.Gone
    | ApiError.Forbidden
    | ApiError.Conflict
    | ApiError.InvalidRequest
    | ApiError.Unavailable
  >
  /** A message from the application on its connection, handed to the agent's owner. */
  readonly mcp: (
    tenantId: string,
    agentId: string,
    connection: string,
    message: Application.JsonRpcMessage
  ) => Effect.Effect<
    void,
    | ApiError.NotFound
    | ApiError.Gone
    | ApiError.Conflict
    | ApiError.ApplicationReplaced
    | ApiError.Unavailable
  >
}>() {}

/**
 * A service method: a span named after it (see NodeSpans), and a journal failure as the defect of its cause.
 * The API answers those 503 when the database cannot be reached (see DatabaseHealth), else 500.
 */
const method =
  <Args extends ReadonlyArray<any>, A, E, R>(name: string, f: (...args: Args) => Effect.Effect<A, E, R>) =>
  (...args: Args) => f(...args).pipe(PersistenceError.orDie, NodeSpans.withSpan(`Agents.${name}`))

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const traces = yield* TraceExport.TraceExport
  const tokens = yield* AgentTokens.AgentTokens
  const events = yield* AgentEvents.AgentEvents
  const makeClient = yield* entityClient
  const volumes = yield* Volumes.Volumes
  const prompts = yield* Prompts.Prompts
  const setup = yield* AgentSetup.make
  const views = yield* AgentViews.make

  const live = (tenantId: string, id: string) => findLive(store, tenantId, id)

  /** Credentials of a keyed agent, by key or id. */
  const credentials = (tenantId: string, keyOrId: string) =>
    Effect.gen(function*() {
      const byId = yield* store.find(tenantId, keyOrId)
      const agent = Option.isSome(byId) ? byId : yield* store.findByKey(tenantId, keyOrId)
      if (Option.isNone(agent)) return yield* new ApiError.NotFound({ error: `no agent ${keyOrId}` })
      if (agent.value.key === null) {
        return yield* new ApiError.AgentKeyless({ error: `agent ${agent.value.id} was made without a key` })
      }
      return new AgentSchemas.AgentCredentials({
        id: agent.value.id,
        token: tokens.issue(agent.value.id),
        expiresAt: agent.value.expiresAt
      })
    })

  /** The tenant of a live agent named by a genuine token. */
  const authenticateToken = (token: string, agentId: string) =>
    Effect.gen(function*() {
      const named = tokens.agentOf(token)
      if (Option.isNone(named) || named.value !== agentId) return Option.none<{ tenantId: string; agentId: string }>()
      const agent = yield* store.findById(agentId)
      return Option.map(agent, (agent) => ({ tenantId: agent.tenantId, agentId: agent.id }))
    })

  const prompt = (tenantId: string, agentId: string, input: Run.PromptInput) =>
    Effect.flatMap(live(tenantId, agentId), (agent) => prompts.prompt(agent, input))

  const continueRun = (tenantId: string, agentId: string, input: Run.ContinueInput) =>
    Effect.flatMap(live(tenantId, agentId), (agent) => prompts.continueRun(agent, input))

  const execute = (tenantId: string, agentId: string, input: Run.ExecuteInput) =>
    Effect.flatMap(live(tenantId, agentId), (agent) => prompts.execute(agent, input))

  const upload = (
    tenantId: string,
    agentId: string,
    requestId: string,
    name: string,
    bytes: Uint8Array,
    contentType: string | undefined
  ) => Effect.flatMap(live(tenantId, agentId), (agent) => prompts.upload(agent, requestId, name, bytes, contentType))

  const abort = (tenantId: string, agentId: string, requestId: Option.Option<string>) => {
    const sent = fingerprint({ method: "abort" })
    return Effect.flatMap(
      live(tenantId, agentId),
      () =>
        makeClient(agentId).Abort({ requestId: Option.getOrElse(requestId, () => Ids.make("req")), fingerprint: sent })
          .pipe(Effect.orDie, Effect.flatMap(AgentSetup.ownRecord("abort", sent)))
    )
  }

  const status = events.status

  const inputStore = yield* Inputs.InputStore

  const inputs = (tenantId: string, agentId: string, state?: Input.InputState) =>
    Effect.zipRight(
      live(tenantId, agentId),
      Effect.map(inputStore.list(agentId, state), (rows): Input.InputList => rows.map(Inputs.toInput))
    )

  const inbox = (tenantId: string, params: Common.PageParams & { readonly state?: Input.InputState | undefined }) =>
    Effect.map(
      inputStore.inbox(tenantId, { state: params.state, after: params.after, limit: Common.pageQueryLimit(params) }),
      (rows) => Common.toPage(rows.map(Inputs.toInput), params)
    )

  const answer = (
    tenantId: string,
    agentId: string,
    answers: ReadonlyArray<Inputs.AnswerItem>,
    by: Record<string, unknown>
  ) =>
    Effect.zipRight(
      live(tenantId, agentId),
      makeClient(agentId).Answer({ answers, by }).pipe(
        AgentEvents.fromOwner,
        Effect.catchTags({
          AnswerRefused: (refused) => {
            const error = refused.message
            switch (refused.reason) {
              case "not_found":
                return Effect.fail(new ApiError.NotFound({ error }))
              case "forbidden":
                return Effect.fail(new ApiError.Forbidden({ error }))
              case "conflict":
                return Effect.fail(new ApiError.Conflict({ error }))
              case "invalid":
                return Effect.fail(new ApiError.InvalidRequest({ error }))
            }
          },
          MailboxFull: (error) => Effect.die(error),
          AlreadyProcessingMessage: (error) => Effect.die(error),
          PersistenceError: (error) => Effect.die(error)
        }),
        Effect.map((answered) => new Run.AnsweredAll({ inputs: answered.inputs, requests: answered.requests }))
      )
    )

  const list = (tenantId: string, params: Common.PageParams) =>
    Effect.map(
      store.list(tenantId, params.after, Common.pageQueryLimit(params)),
      (rows) => Common.toPage(rows.map((agent) => AgentViews.summary(agent, false)), params)
    )

  /** Removes the agent, and its own workspaces with it (volumes it only mounts stay). */
  const remove = (tenantId: string, agentId: string) =>
    Effect.gen(function*() {
      const agent = yield* store.find(tenantId, agentId)
      if (!(yield* store.remove(tenantId, agentId)) || Option.isNone(agent)) {
        return yield* new ApiError.NotFound({ error: `no agent ${agentId}` })
      }
      // A workspace already gone is fine; a database fault is not (the agent's own volumes would stay).
      const gone = () => Effect.void
      yield* Effect.forEach(agent.value.config.mounts ?? [], (mount) =>
        volumes.get(tenantId, mount.volumeId).pipe(
          Effect.flatMap((volume) =>
            volume.agentId === agentId ? Effect.asVoid(volumes.remove(tenantId, mount.volumeId)) : Effect.void
          ),
          Effect.catchTag("NotFound", gone)
        ), { discard: true })
      return { id: agentId, deleted: true as const }
    })

  const setMetadata = (tenantId: string, agentId: string, input: AgentSchemas.AgentMetadataInput) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      // Written to the agent's row, as an upsert writes them: not settings a turn reads.
      if (Option.isNone(yield* store.updateDetails(agentId, { name: input.name, type: input.type }))) {
        // Deleted or expired since it was read.
        return yield* new ApiError.NotFound({ error: `no agent ${agentId}` })
      }
      return new AgentSchemas.AgentMetadata({
        id: agentId,
        name: input.name ?? agent.name,
        type: input.type ?? agent.type ?? AgentViews.defaultType
      })
    })

  const mounts = (tenantId: string, agentId: string) =>
    Effect.map(live(tenantId, agentId), (agent): ReadonlyArray<AgentSchemas.Mount> => agent.config.mounts ?? [])

  /** The request's record once `read` finds it settled or the wait (at most 25 s) ends. */
  const recordOf = <E>(
    agentId: string,
    requestId: string,
    read: Effect.Effect<RequestRow, E>,
    wait: Duration.Duration
  ) =>
    Effect.gen(function*() {
      const settled = (row: RequestRow) => row.state === "completed"
      const limit = Duration.min(wait, AgentEvents.longPollLimit)
      if (Duration.toMillis(limit) === 0) return toRecord(yield* read)
      return toRecord(yield* events.awaitSettled(agentId, requestId, read, settled, limit, identity))
    })

  // The agent is checked (the tenant's, not expired) with every read of the request, in the same statement.
  const request = (tenantId: string, agentId: string, requestId: string, wait: Duration.Duration) =>
    Effect.suspend(() => {
      let traceparent: string | undefined
      return recordOf(
        agentId,
        requestId,
        Effect.flatMap(
          store.requestOf(tenantId, agentId, requestId),
          (found) => liveRequestOf(agentId, requestId, found)
        ).pipe(Effect.tap((row) => {
          traceparent = traceparentOf(row)
        })),
        wait
      ).pipe(Effect.flatMap((record) => withTrace(tenantId, agentId, record, traceparent)))
    })

  const traceparentOf = (row: RequestRow) => (row.input as { readonly traceparent?: string }).traceparent

  /** The record with its trace context, when the tenant exports telemetry (see TraceExport). */
  const withTrace = (
    tenantId: string,
    agentId: string,
    record: Run.RequestRecord,
    traceparent: string | undefined
  ) =>
    Effect.map(
      traces.contextOf({ tenantId, agentId, requestId: record.id, traceparent }),
      Option.match({
        onNone: () => record,
        onSome: (trace) => new Run.RequestRecord({ ...record, trace: new Run.TraceContext(trace) })
      })
    )

  /**
   * So is the caller's credential, once: as the wait begins. A wait let in runs to its end, on every node alike
   * (the owner answers from the settled row, without a read); reads after the first read as the tenant.
   */
  const requestAs = (caller: Caller, agentId: string, requestId: string, wait: Duration.Duration) =>
    Effect.suspend(() => {
      let read: { readonly tenantId: string; readonly traceparent: string | undefined } | undefined
      const first = Effect.flatMap(
        store.requestFor(caller.tenant, agentId, requestId),
        (found): Effect.Effect<RequestRow, ApiError.Unauthorized | ApiError.NotFound | ApiError.Gone> =>
          Option.isNone(found)
            ? Effect.fail(caller.refused)
            : Effect.tap(liveRequestOf(agentId, requestId, found.value), (row) => {
              // Found live, so the agent was found: its tenant came with it.
              read = Option.getOrUndefined(
                Option.map(found.value, (agent) => ({ tenantId: agent.tenantId, traceparent: traceparentOf(row) }))
              )
            })
      )
      return recordOf(
        agentId,
        requestId,
        Effect.suspend(() =>
          read === undefined
            ? first
            : Effect.flatMap(store.requestOf(read.tenantId, agentId, requestId), (found) =>
              liveRequestOf(agentId, requestId, found))
        ),
        wait
      ).pipe(
        Effect.flatMap((record) =>
          read === undefined ? Effect.succeed(record) : withTrace(read.tenantId, agentId, record, read.traceparent)
        )
      )
    })

  /** A status request: answered at once, from the owner's view of the agent. */
  const statusRequest = (tenantId: string, agentId: string) =>
    Effect.gen(function*() {
      yield* live(tenantId, agentId)
      const current = yield* status(agentId)
      return new Run.RequestRecord({
        id: Ids.make("req"),
        method: "status",
        state: "completed",
        fingerprint: fingerprint({ method: "status" }),
        startedAt: Math.floor(Date.now() / 1000),
        endedAt: Math.floor(Date.now() / 1000),
        outcome: new Run.RunOutcome({ result: current })
      })
    })

  const state = (tenantId: string, agentId: string) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      const current = yield* status(agentId)
      const requests = yield* store.recentRequests(agentId, 10)
      return new Session.SessionState({
        cursor: current.cursor,
        requests: requests.map(toRecord),
        resume: AgentViews.resumeOf(agent)
      })
    })

  const history = (
    tenantId: string,
    agentId: string,
    page: { readonly before?: number | undefined; readonly limit?: number | undefined } = {}
  ) => Effect.zipRight(live(tenantId, agentId), AgentViews.historyPage(store, agentId, page))

  const wholeHistory = (tenantId: string, agentId: string) =>
    Effect.zipRight(live(tenantId, agentId), AgentViews.wholeHistory(store, agentId))

  const poll = (tenantId: string, agentId: string, cursor: number, wait: Duration.Duration) =>
    Effect.zipRight(live(tenantId, agentId), events.poll(agentId, cursor, wait))

  const eventBody = (
    tenantId: string,
    agentId: string,
    cursor: Option.Option<number>,
    options: { readonly snapshot: boolean; readonly ready: unknown }
  ) => Effect.zipRight(live(tenantId, agentId), events.eventBody(agentId, cursor, options))

  const connectionBody = (
    tenantId: string,
    agentId: string,
    cursor: Option.Option<number>,
    options: AgentEvents.ConnectionOptions
  ) => Effect.zipRight(live(tenantId, agentId), events.connectionBody(agentId, cursor, options))

  const mcp = (tenantId: string, agentId: string, connection: string, message: Application.JsonRpcMessage) =>
    Effect.zipRight(
      live(tenantId, agentId),
      makeClient(agentId).Mcp({ connection, message }).pipe(
        AgentEvents.fromOwner,
        Effect.catchTags({
          ConnectionUnknown: (error) => Effect.fail(new ApiError.NotFound({ error: error.message })),
          ConnectionReplaced: (error) => Effect.fail(new ApiError.ApplicationReplaced({ error: error.message })),
          CallEnded: (error) => Effect.fail(new ApiError.Conflict({ error: error.message })),
          MailboxFull: (error) => Effect.die(error),
          AlreadyProcessingMessage: (error) => Effect.die(error),
          PersistenceError: (error) => Effect.die(error)
        })
      )
    )

  return Agents.of({
    create: method("create", setup.create),
    upsert: method("upsert", setup.upsert),
    fork: method("fork", setup.fork),
    credentials: method("credentials", credentials),
    authenticateToken: method("authenticateToken", authenticateToken),
    prompt: method("prompt", prompt),
    promptAs: method("promptAs", prompts.promptAs),
    upload: method("upload", upload),
    continueRun: method("continueRun", continueRun),
    execute: method("execute", execute),
    abort: method("abort", abort),
    configure: method("configure", setup.configure),
    applyDefinition: method("applyDefinition", setup.applyDefinition),
    statusRequest: method("statusRequest", statusRequest),
    detail: method("detail", views.detail),
    list: method("list", list),
    remove: method("remove", remove),
    setMetadata: method("setMetadata", setMetadata),
    mounts: method("mounts", mounts),
    request: method("request", request),
    requestAs: method("requestAs", requestAs),
    state: method("state", state),
    history: method("history", history),
    wholeHistory: method("wholeHistory", wholeHistory),
    eventBody: method("eventBody", eventBody),
    connectionBody: method("connectionBody", connectionBody),
    mcp: method("mcp", mcp),
    inputs: method("inputs", inputs),
    inbox: method("inbox", inbox),
    answer: method("answer", answer),
    poll: method("poll", poll)
  })
})

export const layer: Layer.Layer<
  Agents,
  never,
  | Ledger.Ledger
  | AgentEvents.AgentEvents
  | Sharding.Sharding
  | AgentStore
  | Inputs.InputStore
  | UsageLog.UsageLog
  | Volumes.Volumes
  | Tools
  | Definitions
  | AgentTokens.AgentTokens
  | Listing.Listing
  | TraceExport.TraceExport
> = Layer.effect(Agents, make).pipe(Layer.provide(Prompts.layer))
