/**
 * What the API asks of agents: create (idempotent by key), read, list,
 * delete, prompt, request records, events, state and history. Work goes to
 * the agent's entity; reads of settled data come from the journal.
 */
import {
  Agent as AgentSchemas,
  ApiError,
  type Application,
  CanonicalJson,
  Common,
  type Definition,
  Input,
  Run,
  Session
} from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import { Listing, UsageLog } from "@agent-runtime/models"
import { Ids } from "@agent-runtime/store"
import type { Statement } from "@effect/sql"
import { Context, Duration, Effect, Either, Layer, Option, type Scope, type Stream } from "effect"
import {
  Agent,
  applyChanges,
  type AttachedFile,
  definitionSettings as toSettings,
  fingerprint,
  type PromptRequest,
  requestOf,
  toRecord
} from "./Agent.ts"
import { PersistenceError } from "./AgentError.ts"
import * as AgentEvents from "./AgentEvents.ts"
import {
  type AgentConfig,
  type AgentRow,
  AgentStore,
  findLive,
  liveOf,
  liveRequestOf,
  type RequestRow
} from "./AgentStore.ts"
import * as AgentTokens from "./AgentTokens.ts"
import * as ApplicationConnection from "./ApplicationConnection.ts"
import { Definitions } from "./Definitions.ts"
import type * as EventLog from "./EventLog.ts"
import * as HistoryPage from "./HistoryPage.ts"
import * as Inputs from "./Inputs.ts"
import { Tools } from "./Tools.ts"
import * as Workspace from "./Workspace.ts"

/** Why a prompt is refused. */
export type PromptError =
  | ApiError.NotFound
  | ApiError.Gone
  | ApiError.SpendLimit
  | ApiError.IdempotencyConflict
  | ApiError.ApplicationNotConnected
  | ApiError.InvalidRequest
  | ApiError.TooLarge

/** Who asks, when its credential is checked in the statement that reads what it asks for. */
export interface Caller {
  /** A query for the tenant of the credential presented (`tenant_id`): no row when it is not valid. */
  readonly tenant: Statement.Fragment
  /** The answer when it is not valid. */
  readonly refused: ApiError.Unauthorized
}

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
    | ApiError.IdempotencyConflict
    | ApiError.ApplicationNotConnected
  >
  /** A turn on the history as it is, without a new user message. */
  readonly continueRun: (
    tenantId: string,
    agentId: string,
    requestId: Option.Option<string>,
    allowDisconnected?: boolean
  ) => Effect.Effect<
    Run.RequestRecord,
    | ApiError.NotFound
    | ApiError.Gone
    | ApiError.SpendLimit
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
 * A service method: a span named after it, and a journal failure as a defect. The API answers those 503
 * when the database cannot be reached (see DatabaseHealth), else 500.
 */
const method =
  <Args extends ReadonlyArray<any>, A, E, R>(name: string, f: (...args: Args) => Effect.Effect<A, E, R>) =>
  (...args: Args): Effect.Effect<A, Exclude<E, PersistenceError>, R> =>
    f(...args).pipe(
      Effect.catchIf((error): error is Extract<E, PersistenceError> => error instanceof PersistenceError, Effect.die),
      Effect.withSpan(`Agents.${name}`)
    ) as Effect.Effect<A, Exclude<E, PersistenceError>, R>

/** How long a run needing the application waits for it to connect before it is refused. */
const connectWait = 2_000

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const tools = yield* Tools
  const definitions = yield* Definitions
  const tokens = yield* AgentTokens.AgentTokens
  const events = yield* AgentEvents.AgentEvents
  const listing = yield* Listing.Listing
  const usage = yield* UsageLog.UsageLog
  const makeClient = yield* Agent.client
  const volumes = yield* Volumes.Volumes

  const live = (tenantId: string, id: string) => findLive(store, tenantId, id)

  /** `live` for a caller whose credential the same read checks: refused first. */
  const liveAs = (caller: Caller, id: string) =>
    Effect.flatMap(
      store.findFor(caller.tenant, id),
      (found): Effect.Effect<AgentRow, ApiError.Unauthorized | ApiError.NotFound | ApiError.Gone> =>
        Option.isNone(found) ? Effect.fail(caller.refused) : liveOf(id, found.value)
    )

  const resumeOf = (agent: AgentRow) =>
    agent.resumeFailures === 0 || agent.resumeAfter === null
      ? null
      : new AgentSchemas.AgentResume({ failures: agent.resumeFailures, after: agent.resumeAfter })

  const summary = (agent: AgentRow, running: boolean) =>
    new AgentSchemas.AgentSummary({
      id: agent.id,
      key: agent.key,
      name: agent.name,
      type: agent.type ?? "agent",
      model: agent.config.model,
      connected: agent.connection !== null,
      running,
      expiresAt: agent.expiresAt,
      resume: resumeOf(agent)
    })

  /** New prompts are refused with 402 once the agent's spend limit is reached. */
  const checkBudget = (agent: AgentRow) =>
    Effect.gen(function*() {
      const limit = agent.config.spendLimit
      if (limit === undefined) return
      const spent = yield* usage.spent(agent.id, { since: limit.since })
      if (spent >= limit.usd) {
        return yield* new ApiError.SpendLimit({
          error: `the agent's spend limit of ${limit.usd} USD is reached (spent ${spent.toFixed(6)} USD)`
        })
      }
    })

  const spendLimitOf = (agent: AgentRow) =>
    agent.config.spendLimit === undefined
      ? Effect.succeed(null)
      : Effect.map(
        usage.spent(agent.id, { since: agent.config.spendLimit.since }),
        (spent) => new AgentSchemas.SpendLimit({ usd: agent.config.spendLimit!.usd, spent })
      )

  /** The request a prompt asks for. */
  const promptRequest = (
    input: Run.PromptInput,
    requestId: string,
    method: "prompt" | "continue" | "execute",
    code?: string
  ): PromptRequest => ({
    requestId,
    method,
    // Whether it may run without the application is no part of what the request asks.
    fingerprint: fingerprint({ ...input, allowDisconnected: undefined, requestId, code }),
    text: input.text,
    ...(code === undefined ? {} : { code }),
    ...(input.actor === undefined ? {} : { actor: input.actor }),
    ...(input.from === undefined ? {} : { from: input.from }),
    ...(input.whileRunning === undefined ? {} : { whileRunning: input.whileRunning }),
    ...(input.metadata === undefined ? {} : { metadata: input.metadata }),
    ...(input.spendLimit === undefined ? {} : { spendLimit: { usd: input.spendLimit.usd } }),
    ...(input.allowDisconnected === true ? { allowDisconnected: true } : {})
  })

  /** A request id used before for another request: another method, or another body. */
  const conflictOf = (requestId: string) =>
    new ApiError.IdempotencyConflict({ error: `request id ${requestId} was used for another request` })

  /**
   * The answer to a recorded request: its record. Its owner queues it on hearing the row announced (see
   * Arrivals). A request id recorded before for another request is a conflict: a continue and a prompt of
   * no text have the same digest, so the method is compared too.
   */
  const answerOf = (request: RequestRow, prompt: PromptRequest) =>
    request.fingerprint !== prompt.fingerprint || request.method !== (prompt.method ?? "prompt")
      ? Effect.fail(conflictOf(request.id))
      : Effect.succeed(toRecord(request))

  /**
   * The record an abort or configure is answered: the entity answers the record under the request id, which
   * is another request's when the id was used before for another method or body (it then applies nothing).
   */
  const ownRecord = (method: "abort" | "configure", sent: string) => (record: Run.RequestRecord) =>
    record.method !== method || record.fingerprint !== sent
      ? Effect.fail(conflictOf(record.id))
      : Effect.succeed(record)

  /** How a prompt's row is announced to its owner. */
  const announceOf = (prompt: PromptRequest) => ({ whileRunning: prompt.whileRunning })

  const sendPrompt = <E = never>(
    agent: AgentRow,
    input: Run.PromptInput,
    defaultRequestId: string,
    method: "prompt" | "continue" | "execute" = "prompt",
    code?: string,
    /** The prompt's files, once checked and saved (see `attach`): after every other check, before sending. */
    attached?: (requestId: string) => Effect.Effect<ReadonlyArray<AttachedFile>, E>
  ) => {
    const prompt = promptRequest(input, input.requestId ?? defaultRequestId, method, code)
    return Effect.gen(function*() {
      yield* checkBudget(agent)
      if (input.allowDisconnected !== true) yield* checkConnected(agent)
      const files = attached === undefined ? undefined : yield* attached(prompt.requestId)
      const request = yield* store.insertRequest(
        requestOf(agent.id, files === undefined ? prompt : { ...prompt, files }),
        announceOf(prompt)
      )
      return yield* answerOf(request, prompt)
    })
  }

  /**
   * A prompt's files as the agent sees them: each {path} checked against its mounts, each inline file
   * saved under uploads/<requestId>/ in its workspace. Everything is checked before the first is saved.
   */
  const attach = (agent: AgentRow, requestId: string, files: ReadonlyArray<Run.PromptFile>) =>
    Effect.gen(function*() {
      const mounts = agent.config.mounts ?? []
      const invalid = (error: string) => new ApiError.InvalidRequest({ error: `invalid request: files: ${error}` })
      const inline = Run.inlineBytes(files)
      if (inline > Run.maxInlineFileBytes) {
        return yield* new ApiError.TooLarge({
          error: `inline files come to ${inline} bytes; at most ${Run.maxInlineFileBytes} across a message`
        })
      }
      const decoded = files.map((file, index) =>
        "data" in file ? { file, index, bytes: Buffer.from(file.data, "base64") } : { file, index, bytes: undefined }
      )
      const names = new Set<string>()
      const planned = yield* Effect.forEach(decoded, ({ bytes, file, index }) =>
        Effect.gen(function*() {
          if (bytes === undefined) {
            const path = (file as Run.PromptFilePath).path
            const resolved = Workspace.resolve(mounts, path)
            if (Either.isLeft(resolved)) return yield* invalid(resolved.left)
            const found = yield* volumes.stat(agent.tenantId, resolved.right.volumeId, resolved.right.path).pipe(
              Effect.mapError(() => new ApiError.NotFound({ error: `files: no file ${resolved.right.shown}` }))
            )
            return { shown: resolved.right.shown, contentType: found.contentType, size: found.size, save: undefined }
          }
          const inlineFile = file as Run.PromptFileData
          if (!/^[A-Za-z0-9+/]*={0,2}$/.test(inlineFile.data.replace(/\s/g, ""))) {
            return yield* invalid(`file ${index + 1}: data is not base64`)
          }
          const name = inlineFile.name ?? `file-${index + 1}`
          if (names.has(name)) return yield* invalid(`two files are named ${name}`)
          names.add(name)
          const resolved = Workspace.uploadPath(mounts, requestId, name)
          if (Either.isLeft(resolved)) return yield* invalid(`file ${index + 1}: ${resolved.left}`)
          return {
            shown: resolved.right.shown,
            contentType: inlineFile.contentType,
            size: bytes.length,
            save: { resolved: resolved.right, bytes }
          }
        }))
      return yield* Effect.forEach(planned, (entry) =>
        entry.save === undefined
          ? Effect.succeed({ path: entry.shown, contentType: entry.contentType, size: entry.size })
          : Effect.map(
            volumes.write(agent.tenantId, entry.save.resolved.volumeId, entry.save.resolved.path, entry.save.bytes, {
              contentType: entry.contentType,
              by: "prompt"
            }).pipe(unconditional),
            (saved) => ({ path: entry.shown, contentType: saved.contentType, size: saved.size })
          ))
    })

  /** A write without `ifVersion` never meets another version. */
  const unconditional = <A, E extends { readonly _tag: string }, R>(self: Effect.Effect<A, E, R>) =>
    Effect.catchIf(self, (error): error is Extract<E, ApiError.Conflict> => error._tag === "Conflict", Effect.die)

  const bringsFiles = (
    input: Run.PromptInput
  ): input is Run.PromptInput & { readonly files: ReadonlyArray<Run.PromptFile> } =>
    input.files !== undefined && input.files.length > 0

  const attachOf = (agent: AgentRow, input: Run.PromptInput) =>
    bringsFiles(input) ? (requestId: string) => attach(agent, requestId, input.files) : undefined

  const upload = (
    tenantId: string,
    agentId: string,
    requestId: string,
    name: string,
    bytes: Uint8Array,
    contentType: string | undefined
  ) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      const resolved = Workspace.uploadPath(agent.config.mounts ?? [], requestId, name)
      if (Either.isLeft(resolved)) {
        return yield* new ApiError.InvalidRequest({ error: `invalid request: ${resolved.left}` })
      }
      const saved = yield* volumes.write(tenantId, resolved.right.volumeId, resolved.right.path, bytes, {
        contentType,
        by: "upload"
      }).pipe(unconditional)
      return new Session.Upload({ ...saved, path: resolved.right.shown })
    })

  /**
   * A run of an agent whose tools need its application waits a moment for a connection (one may be
   * reconnecting), then is refused; a retry once connected runs, since nothing was recorded.
   */
  const checkConnected = (agent: AgentRow) =>
    Effect.gen(function*() {
      if ((agent.applicationTools ?? []).length === 0) return
      const connected = yield* makeClient(agent.id).AwaitConnected({ waitMillis: connectWait }).pipe(
        Effect.timeout(AgentEvents.ownerAnswerLimit),
        Effect.orDie
      )
      if (!connected) {
        return yield* new ApiError.ApplicationNotConnected({
          error: "the agent's tools need its application and none is connected; connect it or send " +
            "allowDisconnected: true"
        })
      }
    })

  /** A refusal of the prompt sent with a create or upsert, reported in the answer: the agent is made regardless. */
  const refused = (code: string, status: number) => (refusal: { readonly error: string }) =>
    Effect.succeed(
      new AgentSchemas.PromptRefused({ error: new Run.RunError({ code, message: refusal.error, status }) })
    )

  /** The prompt sent with a create or upsert: refused (not failed) for what a prompt alone would be refused. */
  const firstPrompt = (agent: AgentRow, input: Run.PromptInput, defaultRequestId: string) =>
    sendPrompt(agent, input, defaultRequestId, "prompt", undefined, attachOf(agent, input)).pipe(
      Effect.catchTags({
        InvalidRequest: refused("INVALID_REQUEST", 400),
        NotFound: refused("NOT_FOUND", 404),
        TooLarge: refused("TOO_LARGE", 413),
        SpendLimit: refused("SPEND_LIMIT", 402),
        ApplicationNotConnected: refused("APPLICATION_NOT_CONNECTED", 409)
      })
    )

  const create = (tenantId: string, input: AgentSchemas.AgentInput, idempotencyKey: Option.Option<string>) =>
    Effect.gen(function*() {
      const { prompt, ...settings } = input
      const inputFingerprint = fingerprint(input)
      const key = Option.getOrNull(idempotencyKey)
      const existing = key === null ? Option.none() : yield* store.findByKey(tenantId, key)
      let agent: AgentRow
      if (Option.isSome(existing)) {
        if (existing.value.inputFingerprint !== inputFingerprint) {
          return yield* new ApiError.IdempotencyConflict({
            error: `Idempotency-Key ${key} was used with another body`
          })
        }
        agent = existing.value
      } else {
        const definition = settings.definition === undefined
          ? undefined
          : yield* definitionSettings(tenantId, settings.definition)
        const own = (["model", "thinkingLevel", "fileTools"] as const).filter((field) => settings[field] !== undefined)
        const model = settings.model ?? definition?.model
        const config: AgentConfig = applyChanges({
          model: model ?? (yield* listing.defaultModel(tenantId, Option.fromNullable(settings.keyScope))),
          ...(settings.systemPrompt === undefined ? {} : { systemPrompt: settings.systemPrompt }),
          ...(settings.systemPromptAppend === undefined ? {} : { systemPromptAppend: settings.systemPromptAppend }),
          ...(settings.thinkingLevel === undefined ? {} : { thinkingLevel: settings.thinkingLevel }),
          ...(settings.keyScope === undefined ? {} : { keyScope: settings.keyScope }),
          ...(settings.modelHeaders === undefined ? {} : { modelHeaders: settings.modelHeaders }),
          ...(settings.subject === undefined ? {} : { subject: settings.subject }),
          ...(settings.context === undefined ? {} : { context: settings.context }),
          ...(settings.builtins === undefined ? {} : { builtins: settings.builtins }),
          ...(settings.delegate === undefined ? {} : { delegate: settings.delegate }),
          ...(settings.fileTools === undefined ? {} : { fileTools: settings.fileTools }),
          ...(settings.spendLimit === undefined
            ? {}
            : { spendLimit: { usd: settings.spendLimit.usd, since: Math.floor(Date.now() / 1000) } }),
          ...(own.length === 0 || definition === undefined ? {} : { own })
        }, definition === undefined ? {} : { definition })
        if (settings.mounts !== undefined) yield* Workspace.validate(volumes, tenantId, settings.mounts)
        // Its own workspace, made in the agent's transaction, unless its mounts say otherwise.
        const workspaceId = settings.mounts === undefined ? Ids.make("vol") : undefined
        const mounts = settings.mounts ?? [
          new AgentSchemas.Mount({ volumeId: workspaceId!, path: Workspace.workspacePath, mode: "rw" })
        ]
        const id = Ids.make("client")
        const ttlSeconds = settings.ttlSeconds !== undefined
          ? settings.ttlSeconds
          : key === null
          ? AgentSchemas.defaultTtlSeconds
          : null
        const inserted = yield* store.insertAgent(
          {
            id,
            tenantId,
            key,
            name: settings.name ?? id,
            type: settings.type ?? null,
            config: { ...config, mounts },
            inputFingerprint,
            ttlSeconds
          },
          // The starting history, journaled like any other; a compactionSummary stands in for all before it.
          (settings.initialMessages ?? []).map((message, index) => ({
            index,
            requestId: null,
            message: { timestamp: Date.now(), ...message }
          })),
          workspaceId === undefined ? Effect.void : volumes.create(tenantId, { id: workspaceId, agentId: id })
        )
        // Another request with this key won the race: it is still creating the agent.
        if (Option.isNone(inserted)) {
          return yield* new ApiError.IdempotencyInProgress({
            error: `the first request with Idempotency-Key ${key} still runs`
          })
        }
        agent = inserted.value
      }
      const first = prompt === undefined
        ? undefined
        : yield* firstPrompt(agent, prompt, key === null ? Ids.make("req") : "req_initial")
      return new AgentSchemas.AgentCreated({
        id: agent.id,
        token: tokens.issue(agent.id),
        expiresAt: agent.expiresAt,
        ...(first === undefined ? {} : { prompt: first })
      })
    })

  /**
   * Settings only a new agent takes (subject, context, initialMessages): given again to an upsert they must be
   * the agent's, else it is refused, naming the field. Left out, they say nothing.
   */
  const checkCreationOnly = (agent: AgentRow, settings: Omit<AgentSchemas.AgentInput, "prompt">) =>
    Effect.gen(function*() {
      const differs = (field: string) =>
        new ApiError.InvalidRequest({
          error: `invalid request: ${field}: set only when the agent is made; agent ${agent.id} has another`
        })
      if (settings.subject !== undefined && settings.subject !== agent.config.subject) {
        return yield* differs("subject")
      }
      if (settings.context !== undefined && !CanonicalJson.equals(settings.context, agent.config.context)) {
        return yield* differs("context")
      }
      const given = settings.initialMessages
      if (given !== undefined) {
        // The starting history is what was journaled without a request; each message got a timestamp then,
        // unless it had one.
        const initial = (yield* store.messages(agent.id)).filter((row) => row.requestId === null)
        const same = initial.length === given.length && initial.every((row, index) => {
          const kept = row.message as { readonly timestamp?: unknown }
          return CanonicalJson.equals({ timestamp: kept.timestamp, ...given[index] }, kept)
        })
        if (!same) return yield* differs("initialMessages")
      }
    })

  /**
   * The keyed agent, with the given settings applied; made when no live agent has the key. Everything is
   * checked before anything is written: the creation-only fields, the mounts, the definition.
   */
  const upsert = (tenantId: string, key: string, input: AgentSchemas.AgentInput) =>
    Effect.gen(function*() {
      const existing = yield* store.findByKey(tenantId, key)
      if (Option.isNone(existing)) return yield* create(tenantId, input, Option.some(key))
      const agent = existing.value
      const { prompt, ...settings } = input
      yield* checkCreationOnly(agent, settings)
      if (settings.mounts !== undefined) yield* Workspace.validate(volumes, tenantId, settings.mounts)
      // A prompt under a request id another request used would be refused after the settings were applied.
      if (prompt?.requestId !== undefined) {
        const found = yield* store.getRequest(agent.id, prompt.requestId)
        if (Option.isSome(found)) yield* answerOf(found.value, promptRequest(prompt, prompt.requestId, "prompt"))
      }
      const limit = agent.config.spendLimit
      const common = {
        ...(settings.model === undefined ? {} : { model: settings.model }),
        keyScope: settings.keyScope ?? null,
        modelHeaders: settings.modelHeaders ?? null,
        // The budget the agent has goes on counting when named again (a retry resets nothing); another is a
        // new budget from now, as a configure sets it.
        ...(settings.spendLimit !== undefined && limit !== undefined && settings.spendLimit.usd === limit.usd
          ? {}
          : {
            spendLimit: settings.spendLimit === undefined
              ? null
              : { usd: settings.spendLimit.usd, since: Math.floor(Date.now() / 1000) }
          }),
        // Left out, the mounts stay: the default, a new workspace, is only for a new agent.
        ...(settings.mounts === undefined ? {} : { mounts: settings.mounts })
      }
      // With a definition, the settings it supplies come from its latest revision; those given here are the
      // agent's own, and a systemPromptAppend left out stays.
      const changes = settings.definition === undefined
        ? {
          ...common,
          systemPrompt: settings.systemPrompt ?? null,
          systemPromptAppend: settings.systemPromptAppend ?? null,
          thinkingLevel: settings.thinkingLevel ?? null,
          builtins: settings.builtins ?? null,
          delegate: settings.delegate ?? null,
          fileTools: settings.fileTools ?? null,
          definition: null
        }
        : {
          definition: yield* definitionSettings(tenantId, settings.definition),
          ...common,
          ...(settings.systemPromptAppend === undefined ? {} : { systemPromptAppend: settings.systemPromptAppend }),
          ...(settings.thinkingLevel === undefined ? {} : { thinkingLevel: settings.thinkingLevel }),
          ...(settings.fileTools === undefined ? {} : { fileTools: settings.fileTools })
        }
      // The configure's id names this call, not its content: a change back to earlier settings is new work,
      // never taken for a retry of the first. What keeps a retry from doing work twice is that it finds the
      // settings already as it names them, and so sends nothing.
      if (!CanonicalJson.equals(applyChanges(agent.config, changes), agent.config)) {
        yield* Effect.orDie(
          makeClient(agent.id).Configure({
            requestId: Ids.make("upsert"),
            fingerprint: fingerprint(changes),
            changes
          })
        )
      }
      // Name, type and lifetime are the agent's row, not settings its turns read: written as given (left out,
      // as a new keyed agent would have them), the lifetime counted from now.
      const expiresAt = yield* store.updateDetails(agent.id, {
        name: settings.name ?? agent.id,
        type: settings.type ?? null,
        ttlSeconds: settings.ttlSeconds ?? null
      })
      const first = prompt === undefined ? undefined : yield* firstPrompt(agent, prompt, Ids.make("req"))
      return new AgentSchemas.AgentCreated({
        id: agent.id,
        token: tokens.issue(agent.id),
        expiresAt: Option.getOrElse(expiresAt, () => agent.expiresAt),
        ...(first === undefined ? {} : { prompt: first })
      })
    })

  /**
   * A new agent with the source's settings and a copy of its history up to
   * `atMessage` (an index or a request id), rounded to the end of that turn,
   * or up to the last finished turn; never into a turn still running. The
   * same key returns the same fork.
   */
  const fork = (tenantId: string, sourceId: string, input: AgentSchemas.ForkInput) =>
    Effect.gen(function*() {
      const source = yield* live(tenantId, sourceId)
      const key = input.key ?? `fork-${Ids.make("k").slice(2)}`
      const existing = yield* store.findByKey(tenantId, key)
      if (Option.isSome(existing)) {
        const forkedFrom = existing.value.config.forkedFrom
        if (forkedFrom?.agentId !== sourceId) {
          return yield* new ApiError.IdempotencyConflict({
            error: `key ${key} names an agent that is not a fork of ${sourceId}`
          })
        }
        return new AgentSchemas.ForkCreated({
          id: existing.value.id,
          token: tokens.issue(existing.value.id),
          expiresAt: existing.value.expiresAt,
          forkedFrom: new AgentSchemas.ForkedFrom({ agentId: sourceId, atMessage: forkedFrom.atMessage })
        })
      }
      const messages = yield* store.messages(sourceId)
      const completed = yield* store.completedRequests(sourceId)
      const finished = (requestId: string | null) => requestId === null || completed.has(requestId)
      // The last index of each finished turn: where a copy may end.
      const turnEnds = messages.filter((row, i) =>
        finished(row.requestId) && (messages[i + 1]?.requestId !== row.requestId || row.requestId === null)
      ).map((row) => row.index)
      const wanted = input.atMessage === undefined
        ? Number.POSITIVE_INFINITY
        : typeof input.atMessage === "number"
        ? input.atMessage
        : messages.findLast((row) => row.requestId === input.atMessage)?.index
      if (wanted === undefined) {
        return yield* new ApiError.NotFound({ error: `no request ${input.atMessage} in history` })
      }
      // The end of the finished turn holding `wanted`, else the last finished turn before it.
      const holding = messages.find((row) => row.index === wanted)
      const end = holding !== undefined && finished(holding.requestId)
        ? turnEnds.find((index) => index >= wanted) ?? -1
        : turnEnds.findLast((index) => index < wanted) ?? -1
      const config: AgentConfig = {
        ...source.config,
        ...(input.systemPromptAppend === undefined ? {} : { systemPromptAppend: input.systemPromptAppend }),
        ...(input.modelHeaders === undefined ? {} : { modelHeaders: input.modelHeaders }),
        ...(input.subject === undefined ? {} : { subject: input.subject }),
        ...(input.context === undefined ? {} : { context: input.context }),
        forkedFrom: { agentId: sourceId, atMessage: end }
      }
      const id = Ids.make("client")
      // Its own copy (copy-on-write) of each workspace of the source; volumes the source shares stay shared.
      const copies = new Map<string, string>()
      for (const mount of source.config.mounts ?? []) {
        const volume = yield* Effect.option(volumes.get(tenantId, mount.volumeId))
        if (Option.isSome(volume) && volume.value.agentId === sourceId) copies.set(mount.volumeId, Ids.make("vol"))
      }
      const mounts = source.config.mounts?.map((mount) =>
        copies.has(mount.volumeId) ? new AgentSchemas.Mount({ ...mount, volumeId: copies.get(mount.volumeId)! }) : mount
      )
      const inserted = yield* store.insertAgent(
        {
          id,
          tenantId,
          key,
          name: input.name ?? id,
          type: source.type,
          config: mounts === undefined ? config : { ...config, mounts },
          inputFingerprint: fingerprint(input),
          ttlSeconds: input.ttlSeconds !== undefined
            ? input.ttlSeconds
            : input.key === undefined
            ? AgentSchemas.defaultTtlSeconds
            : null
        },
        messages.filter((row) => row.index <= end).map((row) => ({
          index: row.index,
          requestId: null,
          message: row.message
        })),
        Effect.forEach(
          copies,
          ([from, to]) => volumes.fork(tenantId, from, { id: to, agentId: id }),
          { discard: true }
        )
      )
      if (Option.isNone(inserted)) {
        return yield* new ApiError.IdempotencyConflict({ error: `key ${key} was just taken by another agent` })
      }
      const agent = inserted.value
      return new AgentSchemas.ForkCreated({
        id: agent.id,
        token: tokens.issue(agent.id),
        expiresAt: agent.expiresAt,
        forkedFrom: new AgentSchemas.ForkedFrom({ agentId: sourceId, atMessage: end })
      })
    })

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

  const promptTo = (agent: AgentRow, input: Run.PromptInput, requestId = Ids.make("req")) =>
    sendPrompt(agent, input, requestId, "prompt", undefined, attachOf(agent, input))

  const prompt = (tenantId: string, agentId: string, input: Run.PromptInput) =>
    Effect.flatMap(live(tenantId, agentId), (agent) => promptTo(agent, input))

  /**
   * One statement checks the credential and the agent and records the prompt, when the agent has nothing a
   * prompt must check first and the prompt brings no files; otherwise the agent that statement read is
   * checked, and the prompt recorded after.
   */
  const promptAs = (caller: Caller, agentId: string, input: Run.PromptInput) => {
    const requestId = input.requestId ?? Ids.make("req")
    if (bringsFiles(input)) {
      return Effect.flatMap(liveAs(caller, agentId), (agent) => promptTo(agent, input, requestId))
    }
    const prompt = promptRequest(input, requestId, "prompt")
    return Effect.flatMap(
      store.acceptFor(caller.tenant, requestOf(agentId, prompt), {
        allowDisconnected: input.allowDisconnected === true,
        announce: announceOf(prompt)
      }),
      (found): Effect.Effect<Run.RequestRecord, ApiError.Unauthorized | PromptError | PersistenceError> =>
        Option.isNone(found)
          ? Effect.fail(caller.refused)
          : Option.isSome(found.value.request)
          ? answerOf(found.value.request.value, prompt)
          : Effect.flatMap(liveOf(agentId, found.value.agent), (agent) => promptTo(agent, input, requestId))
    )
  }

  /** A turn on the history as it is, without a new user message. */
  const continueRun = (
    tenantId: string,
    agentId: string,
    requestId: Option.Option<string>,
    allowDisconnected?: boolean
  ) =>
    Effect.flatMap(live(tenantId, agentId), (agent) =>
      sendPrompt(
        agent,
        new Run.PromptInput({
          text: "",
          ...(Option.isSome(requestId) ? { requestId: requestId.value } : {}),
          ...(allowDisconnected === undefined ? {} : { allowDisconnected })
        }),
        Ids.make("req"),
        "continue"
      ))

  /** Code run with the agent's tools, without the model; queued like a prompt. */
  const execute = (tenantId: string, agentId: string, input: Run.ExecuteInput) =>
    Effect.flatMap(live(tenantId, agentId), (agent) => {
      const { code, ...rest } = input
      return sendPrompt(agent, new Run.PromptInput({ ...rest, text: "" }), Ids.make("req"), "execute", code)
    })

  const abort = (tenantId: string, agentId: string, requestId: Option.Option<string>) => {
    const sent = fingerprint({ method: "abort" })
    return Effect.flatMap(
      live(tenantId, agentId),
      () =>
        makeClient(agentId).Abort({ requestId: Option.getOrElse(requestId, () => Ids.make("req")), fingerprint: sent })
          .pipe(Effect.orDie, Effect.flatMap(ownRecord("abort", sent)))
    )
  }

  /**
   * The settled record of a configure recorded before under `requestId` with the same body (`sent`, its
   * digest), a conflict when it was another request; None when none is settled under it yet.
   */
  const configured = (agentId: string, requestId: string | undefined, sent: string) =>
    requestId === undefined
      ? Effect.succeed(Option.none<Run.RequestRecord>())
      : Effect.flatMap(store.getRequest(agentId, requestId), (found) =>
        Option.isNone(found)
          ? Effect.succeed(Option.none<Run.RequestRecord>())
          : Effect.map(
            ownRecord("configure", sent)(toRecord(found.value)),
            (record) => record.state === "completed" ? Option.some(record) : Option.none()
          ))

  /** Sends a configure to the agent's entity, which applies it once under its request id. */
  const sendConfigure = (
    agentId: string,
    requestId: string | undefined,
    sent: string,
    changes: Record<string, unknown>
  ) =>
    makeClient(agentId).Configure({ requestId: requestId ?? Ids.make("req"), fingerprint: sent, changes }).pipe(
      Effect.orDie,
      Effect.flatMap(ownRecord("configure", sent))
    )

  /**
   * Settings changed at once, through the agent's entity. The request id is checked first: a retry (the same
   * body) is answered its record, another body or method is a conflict, and neither checks or changes
   * anything. Then everything is checked (mounts as at creation) before the entity is sent anything.
   */
  const configure = (tenantId: string, agentId: string, input: AgentSchemas.ConfigureInput) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      const { requestId, spendLimit, ...rest } = input
      // The body's digest, not the changes': a new budget's start differs with each retry.
      const sent = fingerprint({ ...rest, spendLimit })
      const earlier = yield* configured(agentId, requestId, sent)
      if (Option.isSome(earlier)) return earlier.value
      if (agent.config.definition !== undefined && input.builtins !== undefined) {
        return yield* new ApiError.InvalidRequest({
          error: "builtins: an agent made from a definition has its definition's builtins; change the definition"
        })
      }
      if (input.mounts !== undefined) yield* Workspace.validate(volumes, tenantId, input.mounts)
      const changes = {
        ...rest,
        // A new budget counts from now.
        ...(spendLimit === undefined
          ? {}
          : { spendLimit: spendLimit === null ? null : { usd: spendLimit.usd, since: Math.floor(Date.now() / 1000) } })
      }
      return yield* sendConfigure(agentId, requestId, sent, changes)
    })

  /** A definition's revision as a configure applies it: what it supplies, never its secrets. */
  const definitionSettings = (tenantId: string, id: string, revision?: number) =>
    definitions.resolve(tenantId, id, revision).pipe(
      Effect.mapError((missing) => new ApiError.InvalidRequest({ error: `definition: ${missing.error}` })),
      Effect.map(toSettings)
    )

  const applyDefinition = (tenantId: string, agentId: string, input: Definition.DefinitionApply) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      const current = agent.config.definition
      if (current === undefined) {
        return yield* new ApiError.InvalidRequest({ error: `agent ${agentId} was not made from a definition` })
      }
      // The body's digest: without a revision, the latest one may differ when it is retried.
      const sent = fingerprint({ definition: { revision: input.revision } })
      const earlier = yield* configured(agentId, input.requestId, sent)
      if (Option.isSome(earlier)) return earlier.value
      const changes = { definition: yield* definitionSettings(tenantId, current.id, input.revision) }
      return yield* sendConfigure(agentId, input.requestId, sent, changes)
    })

  const status = events.status

  const inputStore = yield* Inputs.InputStore

  const inputs = (tenantId: string, agentId: string, state?: Input.InputState) =>
    Effect.zipRight(
      live(tenantId, agentId),
      Effect.map(inputStore.list(agentId, state), (rows) => new Input.InputList({ data: rows.map(Inputs.toInput) }))
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

  const detail = (tenantId: string, agentId: string) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      const state = yield* status(agentId)
      const requests = yield* store.recentRequests(agentId, 20)
      const declared = agent.applicationTools ?? []
      return new AgentSchemas.AgentDetail({
        ...summary(agent, state.running),
        connected: state.connected,
        tools: declared.map((tool) =>
          new AgentSchemas.ToolDefinition({
            name: tool.name,
            description: tool.description,
            parameters: tool.parameters,
            ...(tool.exposure === undefined ? {} : { exposure: tool.exposure }),
            ...(tool.executionMode === undefined ? {} : { executionMode: tool.executionMode })
          })
        ),
        toolSources: (yield* tools.forAgent(
          { tenantId, agentId, config: agent.config, origin: "status" },
          agent.applicationTools === null
            ? undefined
            : {
              // Described here, called only by the agent's owner.
              tools: ApplicationConnection.asTools(declared, () => Effect.succeed(ApplicationConnection.notConnected)),
              connected: state.connected
            },
          // Described as this node has them: a source it has not listed yet shows as unlisted.
          { wait: false }
        )).sources,
        definition: agent.config.definition === undefined
          ? null
          : new AgentSchemas.DefinitionRef(agent.config.definition),
        mounts: agent.config.mounts ?? [],
        systemPrompt: agent.config.systemPrompt ?? "",
        ...(agent.config.fileTools === false ? { fileTools: false as const } : {}),
        ...(agent.config.systemPromptAppend === undefined
          ? {}
          : { systemPromptAppend: agent.config.systemPromptAppend }),
        keyScope: agent.config.keyScope ?? null,
        modelHeaders: agent.config.modelHeaders ?? null,
        builtins: (agent.config.builtins ?? []) as Array<AgentSchemas.Builtin>,
        spendLimit: yield* spendLimitOf(agent),
        cursor: state.cursor,
        events: (yield* events.recent(agentId, state.cursor)).map((entry) => new Session.EventEntry(entry)),
        requests: requests.map(toRecord),
        busy: state.running,
        activeRun: state.activeRequest,
        queuedRuns: state.queued
      })
    })

  const list = (tenantId: string, params: Common.PageParams) =>
    Effect.map(
      store.list(tenantId, params.after, Common.pageQueryLimit(params)),
      (rows) => Common.toPage(rows.map((agent) => summary(agent, false)), params)
    )

  /** Removes the agent, and its own workspaces with it (volumes it only mounts stay). */
  const remove = (tenantId: string, agentId: string) =>
    Effect.gen(function*() {
      const agent = yield* store.find(tenantId, agentId)
      if (!(yield* store.remove(tenantId, agentId)) || Option.isNone(agent)) {
        return yield* new ApiError.NotFound({ error: `no agent ${agentId}` })
      }
      yield* Effect.forEach(agent.value.config.mounts ?? [], (mount) =>
        Effect.flatMap(
          Effect.option(volumes.get(tenantId, mount.volumeId)),
          (volume) =>
            Option.isSome(volume) && volume.value.agentId === agentId
              ? Effect.ignore(volumes.remove(tenantId, mount.volumeId))
              : Effect.void
        ), { discard: true })
      return { id: agentId, deleted: true as const }
    })

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
      return toRecord(yield* events.awaitSettled(agentId, requestId, read, settled, limit))
    })

  // The agent is checked (the tenant's, not expired) with every read of the request, in the same statement.
  const request = (tenantId: string, agentId: string, requestId: string, wait: Duration.Duration) =>
    recordOf(
      agentId,
      requestId,
      Effect.flatMap(
        store.requestOf(tenantId, agentId, requestId),
        (found) => liveRequestOf(agentId, requestId, found)
      ),
      wait
    )

  // So is the caller's credential.
  const requestAs = (caller: Caller, agentId: string, requestId: string, wait: Duration.Duration) =>
    recordOf(
      agentId,
      requestId,
      Effect.flatMap(
        store.requestFor(caller.tenant, agentId, requestId),
        (found): Effect.Effect<RequestRow, ApiError.Unauthorized | ApiError.NotFound | ApiError.Gone> =>
          Option.isNone(found)
            ? Effect.fail(caller.refused)
            : liveRequestOf(agentId, requestId, found.value)
      ),
      wait
    )

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
        resume: resumeOf(agent)
      })
    })

  /**
   * A page of history, oldest first, ending before `before`: whole turns of
   * about `limit` messages, at most about 4 MB, unless one turn alone is
   * larger (then the page starts inside it and says `split`).
   */
  const history = (
    tenantId: string,
    agentId: string,
    page: { readonly before?: number | undefined; readonly limit?: number | undefined } = {}
  ) =>
    Effect.gen(function*() {
      yield* live(tenantId, agentId)
      const total = yield* store.messageCount(agentId)
      const rows = yield* store.messagesBefore(agentId, Math.min(page.before ?? total, total))
      const { split, start } = HistoryPage.start(rows, { limit: page.limit })
      const entries = rows.slice(start)
      return new Session.HistoryPage({
        entries: entries.map((row) =>
          new Session.HistoryEntry({ index: row.index, message: row.message as Session.HistoryMessage })
        ),
        next: start > 0 ? entries[0]?.index ?? null : null,
        total,
        split
      })
    })

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
    create: method("create", create),
    upsert: method("upsert", upsert),
    fork: method("fork", fork),
    credentials: method("credentials", credentials),
    authenticateToken: method("authenticateToken", authenticateToken),
    prompt: method("prompt", prompt),
    promptAs: method("promptAs", promptAs),
    upload: method("upload", upload),
    continueRun: method("continueRun", continueRun),
    execute: method("execute", execute),
    abort: method("abort", abort),
    configure: method("configure", configure),
    applyDefinition: method("applyDefinition", applyDefinition),
    statusRequest: method("statusRequest", statusRequest),
    detail: method("detail", detail),
    list: method("list", list),
    remove: method("remove", remove),
    request: method("request", request),
    requestAs: method("requestAs", requestAs),
    state: method("state", state),
    history: method("history", history),
    eventBody: method("eventBody", eventBody),
    connectionBody: method("connectionBody", connectionBody),
    mcp: method("mcp", mcp),
    inputs: method("inputs", inputs),
    answer: method("answer", answer),
    poll: method("poll", poll)
  })
})

export const layer = Layer.effect(Agents, make)
