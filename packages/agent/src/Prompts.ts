/**
 * The prompt path: what is checked before a prompt (or a continue, or an
 * execute) is recorded, and how. The spend limit, then the application's
 * connection when the agent's tools need it, then the prompt's files (each
 * checked, then saved), then the request row, recorded once under its id and
 * announced to the agent's owner as it commits (see Arrivals). A request id
 * used before for another body or method is a conflict and records nothing.
 */
import { Ledger } from "@agent-runtime/billing"
import { Agent as AgentSchemas, ApiError, Run, Session } from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import { UsageLog } from "@agent-runtime/models"
import { Ids } from "@agent-runtime/store"
import { TraceParent } from "@agent-runtime/telemetry"
import type { Statement } from "@effect/sql"
import { Context, Effect, Either, FiberRef, Layer, Option } from "effect"
import { type AttachedFile, entityClient, fingerprint, type PromptRequest, requestOf, toRecord } from "./Agent.ts"
import type { PersistenceError } from "./AgentError.ts"
import * as AgentEvents from "./AgentEvents.ts"
import { type AgentRow, AgentStore, liveOf, type RequestRow } from "./AgentStore.ts"
import * as StructuredOutput from "./StructuredOutput.ts"
import * as Workspace from "./Workspace.ts"

/** Why a prompt is refused. */
export type PromptError =
  | ApiError.NotFound
  | ApiError.Gone
  | ApiError.SpendLimit
  | ApiError.InsufficientCredit
  | ApiError.PaymentRequired
  | ApiError.IdempotencyConflict
  | ApiError.ApplicationNotConnected
  | ApiError.InvalidRequest
  | ApiError.TooLarge

/** Why a run without files (a continue, an execute) is refused. */
export type RunRefused =
  | ApiError.SpendLimit
  | ApiError.InsufficientCredit
  | ApiError.PaymentRequired
  | ApiError.IdempotencyConflict
  | ApiError.ApplicationNotConnected

/** Who asks, when its credential is checked in the statement that reads what it asks for. */
export interface Caller {
  /** A query for the tenant of the credential presented (`tenant_id`): no row when it is not valid. */
  readonly tenant: Statement.Fragment
  /** The answer when it is not valid. */
  readonly refused: ApiError.Unauthorized
}

/** What a request runs: a prompt, a turn on the history as it is, or code with the agent's tools. */
export type Method = "prompt" | "continue" | "execute"

export class Prompts extends Context.Tag("@agent-runtime/agent/Prompts")<Prompts, {
  /** Sends a prompt to a live agent, its files attached; under `requestId` when the input names none. */
  readonly prompt: (
    agent: AgentRow,
    input: Run.PromptInput,
    requestId?: string
  ) => Effect.Effect<Run.RequestRecord, PromptError | PersistenceError>
  /**
   * One statement checks the caller's credential and the agent and records the prompt, when the agent has
   * nothing a prompt must check first and the prompt brings no files; otherwise the agent that statement
   * read is checked, and the prompt recorded after.
   */
  readonly promptAs: (
    caller: Caller,
    agentId: string,
    input: Run.PromptInput
  ) => Effect.Effect<Run.RequestRecord, ApiError.Unauthorized | PromptError | PersistenceError>
  /**
   * The prompt sent with a create or upsert: refused (not failed) for what a prompt alone would be refused,
   * as the agent is made regardless; only a request id used for another request fails it.
   */
  readonly first: (
    agent: AgentRow,
    input: Run.PromptInput,
    defaultRequestId: string
  ) => Effect.Effect<Run.RequestRecord | AgentSchemas.PromptRefused, ApiError.IdempotencyConflict | PersistenceError>
  /** A turn on the history as it is, without a new user message. */
  readonly continueRun: (
    agent: AgentRow,
    input: Run.ContinueInput
  ) => Effect.Effect<Run.RequestRecord, RunRefused | PersistenceError>
  /** Code run with the agent's tools, without the model; queued like a prompt. */
  readonly execute: (
    agent: AgentRow,
    input: Run.ExecuteInput
  ) => Effect.Effect<Run.RequestRecord, RunRefused | PersistenceError>
  /** Puts a file in the agent's workspace under uploads/<requestId>/<name>, to attach to that prompt. */
  readonly upload: (
    agent: AgentRow,
    requestId: string,
    name: string,
    bytes: Uint8Array,
    contentType: string | undefined
  ) => Effect.Effect<
    Session.Upload,
    ApiError.NotFound | ApiError.InvalidRequest | ApiError.TooLarge | PersistenceError
  >
}>() {}

/** How long a run needing the application waits for it to connect before it is refused. */
const connectWait = 2_000

/** The request a prompt asks for. */
export const requestFor = (
  input: Run.PromptInput,
  requestId: string,
  method: Method,
  execution?: Execution
): PromptRequest => ({
  requestId,
  method,
  // Whether it may run without the application is no part of what the request asks.
  fingerprint: fingerprint({
    ...input,
    allowDisconnected: undefined,
    requestId,
    code: execution?.code,
    timeoutMs: execution?.timeoutMs
  }),
  text: input.text,
  ...(execution === undefined ? {} : { code: execution.code }),
  ...(execution?.timeoutMs === undefined ? {} : { timeoutMs: execution.timeoutMs }),
  ...(input.actor === undefined ? {} : { actor: input.actor }),
  ...(input.from === undefined ? {} : { from: input.from }),
  ...(input.whileRunning === undefined ? {} : { whileRunning: input.whileRunning }),
  ...(input.metadata === undefined ? {} : { metadata: input.metadata }),
  ...(input.spendLimit === undefined ? {} : { spendLimit: { usd: input.spendLimit.usd } }),
  ...(input.allowDisconnected === true ? { allowDisconnected: true } : {}),
  ...(input.output === undefined ? {} : { output: { schema: input.output.schema } })
})

/**
 * The request with the caller's `traceparent`, when its HTTP request carried one: its run continues that
 * trace. Not part of the fingerprint: a retry under another span is the same request.
 */
const withCallerTrace = (prompt: PromptRequest): Effect.Effect<PromptRequest> =>
  Effect.map(
    FiberRef.get(TraceParent.fromCaller),
    (traceparent) => traceparent === undefined ? prompt : { ...prompt, traceparent }
  )

/** An execute request's code, and how long it may run. */
export interface Execution {
  readonly code: string
  readonly timeoutMs?: number | undefined
}

/** A request id used before for another request: another method, or another body. */
export const conflictOf = (requestId: string) =>
  new ApiError.IdempotencyConflict({ error: `request id ${requestId} was used for another request` })

/**
 * The answer to a recorded request: its record. A request id recorded before for another request is a
 * conflict: a continue and a prompt of no text have the same digest, so the method is compared too.
 */
export const answerOf = (request: RequestRow, prompt: PromptRequest) =>
  request.fingerprint !== prompt.fingerprint || request.method !== (prompt.method ?? "prompt")
    ? Effect.fail(conflictOf(request.id))
    : Effect.succeed(toRecord(request))

/** How a prompt's row is announced to its owner. */
const announceOf = (prompt: PromptRequest) => ({ whileRunning: prompt.whileRunning })

/**
 * A structured prompt's schema must compile, starts its own turn (it cannot steer another), and needs the
 * final_output name free among the application's tools.
 */
const checkOutput = (input: Run.PromptInput, agent?: AgentRow) => {
  if (input.output === undefined) return Effect.void
  const invalid = (error: string) => Effect.fail(new ApiError.InvalidRequest({ error: `invalid request: ${error}` }))
  const problem = StructuredOutput.problemOf(input.output.schema)
  if (problem !== undefined) return invalid(problem)
  if (input.whileRunning === "steer") return invalid("output cannot be combined with whileRunning: steer")
  if (agent?.applicationTools?.some((tool) => tool.name === StructuredOutput.toolName) === true) {
    return invalid(`output: the agent's application serves a tool named ${StructuredOutput.toolName}`)
  }
  return Effect.void
}

/** Prompts that take the path reading the agent first: those with files, and structured ones (see checkOutput). */
const readsAgentFirst = (input: Run.PromptInput) => bringsFiles(input) || input.output !== undefined

const bringsFiles = (
  input: Run.PromptInput
): input is Run.PromptInput & { readonly files: ReadonlyArray<Run.PromptFile> } =>
  input.files !== undefined && input.files.length > 0

/** A write without `ifVersion` never meets another version. */
const unconditional = <A, E extends { readonly _tag: string }, R>(self: Effect.Effect<A, E, R>) =>
  Effect.catchIf(self, (error): error is Extract<E, ApiError.Conflict> => error._tag === "Conflict", Effect.die)

/** A refusal of the prompt sent with a create or upsert, reported in the answer. */
const refused = (code: string, status: number) => (refusal: { readonly error: string }) =>
  Effect.succeed(new AgentSchemas.PromptRefused({ error: new Run.RunError({ code, message: refusal.error, status }) }))

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const volumes = yield* Volumes.Volumes
  const usage = yield* UsageLog.UsageLog
  const ledger = yield* Ledger.Ledger
  const makeClient = yield* entityClient

  /** New prompts are refused with 402 once the tenant's prepaid credit or the agent's spend limit is spent. */
  const checkBudget = (agent: AgentRow) =>
    Effect.gen(function*() {
      yield* ledger.admit(agent.tenantId)
      const limit = agent.config.spendLimit
      if (limit === undefined) return
      const spent = yield* usage.spent(agent.id, { since: limit.since })
      if (spent >= limit.usd) {
        return yield* new ApiError.SpendLimit({
          error: `the agent's spend limit of ${limit.usd} USD is reached (spent ${spent.toFixed(6)} USD)`
        })
      }
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

  /** A file of a prompt: a {path} in the agent's mounts, or inline bytes to save under uploads/<requestId>/. */
  const plan = (agent: AgentRow, requestId: string, names: Set<string>) =>
  (
    { bytes, file, index }: { file: Run.PromptFile; index: number; bytes: Buffer | undefined }
  ) =>
    Effect.gen(function*() {
      const mounts = agent.config.mounts ?? []
      const invalid = (error: string) => new ApiError.InvalidRequest({ error: `invalid request: files: ${error}` })
      if (bytes === undefined) {
        const path = (file as Run.PromptFilePath).path
        const resolved = Workspace.resolve(mounts, path)
        if (Either.isLeft(resolved)) return yield* invalid(resolved.left)
        const missing = () => Effect.fail(new ApiError.NotFound({ error: `files: no file ${resolved.right.shown}` }))
        const found = yield* volumes.stat(agent.tenantId, resolved.right.volumeId, resolved.right.path).pipe(
          Effect.catchTags({ NotFound: missing, InvalidRequest: missing })
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
    })

  /**
   * A prompt's files as the agent sees them: each {path} checked against its mounts, each inline file
   * saved under uploads/<requestId>/ in its workspace. Everything is checked before the first is saved.
   */
  const attach = (agent: AgentRow, requestId: string, files: ReadonlyArray<Run.PromptFile>) =>
    Effect.gen(function*() {
      const inline = Run.inlineBytes(files)
      if (inline > Run.maxInlineFileBytes) {
        return yield* new ApiError.TooLarge({
          error: `inline files come to ${inline} bytes; at most ${Run.maxInlineFileBytes} across a message`
        })
      }
      const decoded = files.map((file, index) => ({
        file,
        index,
        bytes: "data" in file ? Buffer.from(file.data, "base64") : undefined
      }))
      const planned = yield* Effect.forEach(decoded, plan(agent, requestId, new Set()))
      return yield* Effect.forEach(planned, (entry) =>
        entry.save === undefined
          ? Effect.succeed({ path: entry.shown, contentType: entry.contentType, size: entry.size })
          : Effect.map(
            volumes.write(agent.tenantId, entry.save.resolved.volumeId, entry.save.resolved.path, entry.save.bytes, {
              contentType: entry.contentType,
              by: "prompt"
            }).pipe(unconditional),
            (saved): AttachedFile => ({ path: entry.shown, contentType: saved.contentType, size: saved.size })
          ))
    })

  const attachOf = (agent: AgentRow, input: Run.PromptInput) =>
    bringsFiles(input) ? (requestId: string) => attach(agent, requestId, input.files) : undefined

  const send = <E = never>(
    agent: AgentRow,
    input: Run.PromptInput,
    defaultRequestId: string,
    method: Method = "prompt",
    execution?: Execution,
    /** The prompt's files, once checked and saved (see `attach`): after every other check, before sending. */
    attached?: (requestId: string) => Effect.Effect<ReadonlyArray<AttachedFile>, E>
  ) => {
    const prompt = requestFor(input, input.requestId ?? defaultRequestId, method, execution)
    return Effect.gen(function*() {
      yield* checkBudget(agent)
      if (input.allowDisconnected !== true) yield* checkConnected(agent)
      const files = attached === undefined ? undefined : yield* attached(prompt.requestId)
      const request = yield* store.insertRequest(
        requestOf(agent.id, yield* withCallerTrace(files === undefined ? prompt : { ...prompt, files })),
        announceOf(prompt)
      )
      return yield* answerOf(request, prompt)
    })
  }

  const prompt = (agent: AgentRow, input: Run.PromptInput, requestId = Ids.make("req")) =>
    Effect.zipRight(
      checkOutput(input, agent),
      send(agent, input, requestId, "prompt", undefined, attachOf(agent, input))
    )

  const promptAs = (caller: Caller, agentId: string, input: Run.PromptInput) => {
    const requestId = input.requestId ?? Ids.make("req")
    if (readsAgentFirst(input)) {
      return Effect.flatMap(
        store.findFor(caller.tenant, agentId),
        (found): Effect.Effect<Run.RequestRecord, ApiError.Unauthorized | PromptError | PersistenceError> =>
          Option.isNone(found)
            ? Effect.fail(caller.refused)
            : Effect.flatMap(liveOf(agentId, found.value), (agent) => prompt(agent, input, requestId))
      )
    }
    const request = requestFor(input, requestId, "prompt")
    return Effect.flatMap(
      Effect.flatMap(withCallerTrace(request), (traced) =>
        store.acceptFor(caller.tenant, requestOf(agentId, traced), {
          allowDisconnected: input.allowDisconnected === true,
          announce: announceOf(request)
        })),
      (found): Effect.Effect<Run.RequestRecord, ApiError.Unauthorized | PromptError | PersistenceError> =>
        Option.isNone(found)
          ? Effect.fail(caller.refused)
          : Option.isSome(found.value.request)
          ? answerOf(found.value.request.value, request)
          : Effect.flatMap(liveOf(agentId, found.value.agent), (agent) => prompt(agent, input, requestId))
    )
  }

  const first = (agent: AgentRow, input: Run.PromptInput, defaultRequestId: string) =>
    Effect.zipRight(
      checkOutput(input, agent),
      send(agent, input, defaultRequestId, "prompt", undefined, attachOf(agent, input))
    ).pipe(
      Effect.catchTags({
        InvalidRequest: refused("INVALID_REQUEST", 400),
        NotFound: refused("NOT_FOUND", 404),
        TooLarge: refused("TOO_LARGE", 413),
        SpendLimit: refused("SPEND_LIMIT", 402),
        InsufficientCredit: refused("INSUFFICIENT_CREDIT", 402),
        PaymentRequired: refused("PAYMENT_REQUIRED", 402),
        ApplicationNotConnected: refused("APPLICATION_NOT_CONNECTED", 409)
      })
    )

  const continueRun = (agent: AgentRow, input: Run.ContinueInput) =>
    send(
      agent,
      new Run.PromptInput({
        text: "",
        ...(input.requestId === undefined ? {} : { requestId: input.requestId }),
        ...(input.actor === undefined ? {} : { actor: input.actor }),
        ...(input.allowDisconnected === undefined ? {} : { allowDisconnected: input.allowDisconnected })
      }),
      Ids.make("req"),
      "continue"
    )

  const execute = (agent: AgentRow, input: Run.ExecuteInput) => {
    const { code, timeoutMs, ...rest } = input
    return send(agent, new Run.PromptInput({ ...rest, text: "" }), Ids.make("req"), "execute", { code, timeoutMs })
  }

  const upload = (
    agent: AgentRow,
    requestId: string,
    name: string,
    bytes: Uint8Array,
    contentType: string | undefined
  ) =>
    Effect.gen(function*() {
      const resolved = Workspace.uploadPath(agent.config.mounts ?? [], requestId, name)
      if (Either.isLeft(resolved)) {
        return yield* new ApiError.InvalidRequest({ error: `invalid request: ${resolved.left}` })
      }
      const saved = yield* volumes.write(agent.tenantId, resolved.right.volumeId, resolved.right.path, bytes, {
        contentType,
        by: "upload"
      }).pipe(unconditional)
      return new Session.Upload({ ...saved, path: resolved.right.shown })
    })

  return Prompts.of({ prompt, promptAs, first, continueRun, execute, upload })
})

export const layer: Layer.Layer<
  Prompts,
  never,
  AgentStore | Volumes.Volumes | UsageLog.UsageLog | Ledger.Ledger | Effect.Effect.Context<typeof entityClient>
> = Layer.effect(Prompts, make)
