/**
 * What sets an agent up and changes its settings: create (idempotent by key),
 * upsert by key, fork, configure and applying a definition. Everything is
 * checked before anything is written; settings of a live agent change through
 * its entity, once per request id.
 */
import { Agent as AgentSchemas, ApiError, CanonicalJson, type Definition, type Run } from "@agent-runtime/domain"
import { Volumes } from "@agent-runtime/files"
import { Listing } from "@agent-runtime/models"
import { Ids } from "@agent-runtime/store"
import { Effect, Option } from "effect"
import {
  applyChanges,
  type DeclaredTools,
  declaredTools,
  definitionSettings as toSettings,
  entityClient,
  fingerprint,
  toRecord
} from "../Agent.ts"
import { type AgentConfig, type AgentRow, AgentStore, findLive } from "../AgentStore.ts"
import * as AgentTokens from "../AgentTokens.ts"
import { Definitions } from "../Definitions.ts"
import { answerOf, conflictOf, Prompts, requestFor } from "../Prompts.ts"
import * as Workspace from "../Workspace.ts"

/**
 * The record an abort or configure is answered: the entity answers the record under the request id, which
 * is another request's when the id was used before for another method or body (it then applies nothing).
 */
export const ownRecord = (method: "abort" | "configure", sent: string) => (record: Run.RequestRecord) =>
  record.method !== method || record.fingerprint !== sent
    ? Effect.fail(conflictOf(record.id))
    : Effect.succeed(record)

/** What a new agent's settings are made from (a stateless run's too). */
export type NewSettings = Pick<
  AgentSchemas.AgentInput,
  | "definition"
  | "model"
  | "systemPrompt"
  | "systemPromptAppend"
  | "thinkingLevel"
  | "keyScope"
  | "modelHeaders"
  | "subject"
  | "context"
  | "builtins"
  | "delegate"
  | "fileTools"
  | "spendLimit"
  | "runLimits"
>

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const definitions = yield* Definitions
  const tokens = yield* AgentTokens.AgentTokens
  const listing = yield* Listing.Listing
  const makeClient = yield* entityClient
  const volumes = yield* Volumes.Volumes
  const prompts = yield* Prompts
  const live = (tenantId: string, id: string) => findLive(store, tenantId, id)

  /**
   * The settings a new agent (or a stateless run) starts with: its own over its definition's latest revision,
   * the tenant's default model when neither names one, a spend limit counted from now.
   */
  const configFor = (tenantId: string, settings: NewSettings) =>
    Effect.gen(function*() {
      const definition = settings.definition === undefined
        ? undefined
        : yield* definitionSettings(tenantId, settings.definition)
      const own = (["model", "thinkingLevel", "fileTools"] as const).filter((field) => settings[field] !== undefined)
      const model = settings.model ?? definition?.model
      return applyChanges({
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
        ...(settings.runLimits === undefined ? {} : { runLimits: settings.runLimits }),
        ...(settings.spendLimit === undefined
          ? {}
          : { spendLimit: { usd: settings.spendLimit.usd, since: Math.floor(Date.now() / 1000) } }),
        ...(own.length === 0 || definition === undefined ? {} : { own })
      }, definition === undefined ? {} : { definition })
    })

  const create = (tenantId: string, input: AgentSchemas.AgentInput, idempotencyKey: Option.Option<string>) =>
    Effect.gen(function*() {
      const { prompt, ...settings } = input
      const inputFingerprint = fingerprint(input)
      const key = Option.getOrNull(idempotencyKey)
      const existing = key === null ? Option.none() : yield* store.findByKey(tenantId, key)
      let agent: AgentRow
      if (Option.isSome(existing)) {
        // Another body under the key reconfigures the agent, as the camelRun client's upsert expects; the
        // same body is a retry and changes nothing.
        if (existing.value.inputFingerprint !== inputFingerprint) {
          return yield* reconfigure(tenantId, existing.value, input, inputFingerprint)
        }
        agent = existing.value
      } else {
        const config = yield* configFor(tenantId, settings)
        if (settings.mounts !== undefined) yield* Workspace.validate(volumes, tenantId, settings.mounts)
        // Its own workspace, made in the agent's transaction, unless its mounts say otherwise.
        const workspaceId = settings.mounts === undefined ? Ids.volume() : undefined
        const mounts = settings.mounts ?? [
          new AgentSchemas.Mount({ volumeId: workspaceId!, path: Workspace.workspacePath, mode: "rw" })
        ]
        const id = Ids.agent()
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
            ttlSeconds,
            declaredTools: settings.mcp === undefined ? undefined : declaredTools(settings.mcp)
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
        : yield* prompts.first(
          agent,
          prompt,
          key === null ? Ids.make("req") : yield* firstPromptId(agent, inputFingerprint)
        )
      return new AgentSchemas.AgentCreated({
        id: agent.id,
        token: tokens.issue(agent.id),
        expiresAt: agent.expiresAt,
        ...(first === undefined ? {} : { prompt: first })
      })
    })

  /**
   * The id a keyed agent's first prompt gets when its body names none: `req_initial` for the body that made
   * the agent, `req_<digest>` for a body that reconfigured it (see `reconfigure`), so a retry of either body
   * finds its prompt instead of sending another.
   */
  const firstPromptId = (agent: AgentRow, inputFingerprint: string) =>
    Effect.map(
      store.getRequest(agent.id, `req_${inputFingerprint}`),
      (found) => Option.isSome(found) ? `req_${inputFingerprint}` : "req_initial"
    )

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
    Effect.flatMap(
      store.findByKey(tenantId, key),
      Option.match({
        onNone: () => create(tenantId, input, Option.some(key)),
        onSome: (agent) => reconfigure(tenantId, agent, input)
      })
    )

  /**
   * The keyed agent's settings set to `input` (left out: as a new agent would have them), its name, type and
   * lifetime too, and its first prompt sent. From POST /v1/agents (`inputFingerprint` given), a retry of the
   * same body is told by it afterwards, and a prompt without a request id is sent once per body.
   */
  const reconfigure = (
    tenantId: string,
    agent: AgentRow,
    input: AgentSchemas.AgentInput,
    inputFingerprint?: string
  ) =>
    Effect.gen(function*() {
      const { prompt, ...settings } = input
      yield* checkCreationOnly(agent, settings)
      if (settings.mounts !== undefined) yield* Workspace.validate(volumes, tenantId, settings.mounts)
      // A prompt under a request id another request used would be refused after the settings were applied.
      if (prompt?.requestId !== undefined) {
        const found = yield* store.getRequest(agent.id, prompt.requestId)
        if (Option.isSome(found)) yield* answerOf(found.value, requestFor(prompt, prompt.requestId, "prompt"))
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
        ...(settings.mounts === undefined ? {} : { mounts: settings.mounts }),
        runLimits: settings.runLimits ?? null
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
      // Left out, the application's tools stay: they are its to list when it connects.
      const tools = settings.mcp === undefined ? undefined : declaredTools(settings.mcp)
      const toolsChange = tools !== undefined && tools.hash !== agent.toolsHash
      let reconfigured: { readonly id: string } | undefined
      if (toolsChange || !CanonicalJson.equals(applyChanges(agent.config, changes), agent.config)) {
        reconfigured = { id: Ids.make("upsert") }
        yield* Effect.orDie(
          makeClient(agent.id).Configure({
            requestId: reconfigured.id,
            fingerprint: fingerprint({ changes, tools }),
            changes,
            ...(toolsChange ? { tools } : {})
          })
        )
      }
      // Name, type and lifetime are the agent's row, not settings its turns read: written as given (left out,
      // as a new keyed agent would have them), the lifetime counted from now.
      const expiresAt = yield* store.updateDetails(agent.id, {
        name: settings.name ?? agent.id,
        type: settings.type ?? null,
        ttlSeconds: settings.ttlSeconds ?? null,
        inputFingerprint
      })
      const first = prompt === undefined
        ? undefined
        : yield* prompts.first(
          agent,
          prompt,
          inputFingerprint === undefined ? Ids.make("req") : `req_${inputFingerprint}`
        )
      return new AgentSchemas.AgentCreated({
        id: agent.id,
        token: tokens.issue(agent.id),
        expiresAt: Option.getOrElse(expiresAt, () => agent.expiresAt),
        ...(reconfigured === undefined ? {} : { reconfigured }),
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
      const id = Ids.agent()
      // Its own copy (copy-on-write) of each workspace of the source; volumes the source shares stay shared.
      const copies = new Map<string, string>()
      for (const mount of source.config.mounts ?? []) {
        const volume = yield* volumes.get(tenantId, mount.volumeId).pipe(
          Effect.asSome,
          Effect.catchTag("NotFound", () => Effect.succeedNone)
        )
        if (Option.isSome(volume) && volume.value.agentId === sourceId) copies.set(mount.volumeId, Ids.volume())
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
    changes: Record<string, unknown>,
    tools?: DeclaredTools
  ) =>
    makeClient(agentId).Configure({
      requestId: requestId ?? Ids.make("req"),
      fingerprint: sent,
      changes,
      ...(tools === undefined ? {} : { tools })
    }).pipe(
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
      const { mcp, ...settings } = rest
      const changes = {
        ...settings,
        // A new budget counts from now.
        ...(spendLimit === undefined
          ? {}
          : { spendLimit: spendLimit === null ? null : { usd: spendLimit.usd, since: Math.floor(Date.now() / 1000) } })
      }
      return yield* sendConfigure(agentId, requestId, sent, changes, mcp === undefined ? undefined : declaredTools(mcp))
    })

  /** A definition's revision as a configure applies it: what it supplies, never its secrets. */
  const definitionSettings = (tenantId: string, id: string, revision?: number) =>
    definitions.resolve(tenantId, id, revision).pipe(
      Effect.catchTag("NotFound", (missing) => new ApiError.InvalidRequest({ error: `definition: ${missing.error}` })),
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

  return { configFor, create, upsert, fork, configure, applyDefinition }
})
