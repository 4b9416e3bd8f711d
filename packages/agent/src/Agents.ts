/**
 * What the API asks of agents: create (idempotent by key), read, list,
 * delete, prompt, request records, events, state and history. Work goes to
 * the agent's entity; reads of settled data come from the journal.
 */
import { Agent as AgentSchemas, ApiError, CanonicalJson, Common, Run, Session } from "@agent-runtime/domain"
import { Listing, UsageLog } from "@agent-runtime/models"
import { DatabaseHealth, Ids, SealedSecret } from "@agent-runtime/store"
import { Duration, Effect, Option, Schedule, Stream } from "effect"
import * as Crypto from "node:crypto"
import { Agent, applyChanges, type PromptPayload, type ReplayGap } from "./Agent.ts"
import { toRecord } from "./AgentRuntime.ts"
import * as EventLog from "./EventLog.ts"
import * as Sse from "./Sse.ts"
import { type AgentConfig, type AgentRow, AgentStore } from "./AgentStore.ts"
import { Drain } from "./Drain.ts"
import { Tools } from "./Tools.ts"

export const agentTokenPrefix = "aat_"

/**
 * A stable digest of a request body: the same key or request id with another body is a conflict. The
 * canonical encoding covers the whole body, nested objects too, whatever order its keys came in.
 */
export const fingerprint = (value: unknown) =>
  Crypto.createHash("sha256").update(CanonicalJson.encode(value)).digest("hex").slice(0, 32)

const longPollLimit = Duration.seconds(25)
/** How long the agent's owner may take to answer a read; past it the caller is told to retry (503). */
const ownerAnswerLimit = Duration.seconds(5)
/**
 * A remote event stream silent this long (the owner sends a keep-alive every
 * `Agent.watchKeepAlive`) is taken as lost: its request may have met an
 * owner that was letting the agent go. It is read again from the last id.
 */
const followIdleLimit = Duration.seconds(6)

const ownerUnavailable = () =>
  new ApiError.Unavailable({ error: "the agent's runner did not answer in time; retry", retryAfter: 1 })

/** A read from the agent's owner, bounded: an owner that is stopping or cut off must not hold the caller. */
const fromOwner = <A, E, R>(effect: Effect.Effect<A, E, R>, limit: Duration.DurationInput = ownerAnswerLimit) =>
  Effect.timeoutFail(effect, { duration: limit, onTimeout: ownerUnavailable })
const defaultHistoryLimit = 50
const maxHistoryPageBytes = 4 * 1024 * 1024

export class Agents extends Effect.Service<Agents>()("@agent-runtime/agent/Agents", {
  effect: Effect.gen(function*() {
    const store = yield* AgentStore
    const tools = yield* Tools
    const drain = yield* Drain
    const sealer = yield* SealedSecret.Sealer
    const listing = yield* Listing.Listing
    const usage = yield* UsageLog.UsageLog
    const makeClient = yield* Agent.client
    const localLogs = yield* EventLog.LocalLogs
    const health = yield* DatabaseHealth.DatabaseHealth

    // Streams served here end, with `event: reconnect`, when the node drains or loses its database: the
    // watcher reconnects to a node that can serve it rather than waiting on a quiet one.
    const streamsEnd = Effect.raceFirst(drain.closed, health.lost)
    const onStreamsEnd = (end: () => void) => {
      const offDrain = drain.onClose(end)
      const offLost = health.onLost(end)
      return () => {
        offDrain()
        offLost()
      }
    }

    /** Agent tokens are derived, not stored: the credentials route can show them again. */
    const tokenFor = (agentId: string) => `${agentTokenPrefix}${agentId}.${sealer.sign("agent-token", agentId)}`

    /** The agent a token names, if the token is genuine. */
    const agentOfToken = (token: string) => {
      if (!token.startsWith(agentTokenPrefix)) return Option.none<string>()
      const [agentId, mac] = token.slice(agentTokenPrefix.length).split(".")
      if (agentId === undefined || mac === undefined) return Option.none<string>()
      const expected = Buffer.from(sealer.sign("agent-token", agentId))
      const given = Buffer.from(mac)
      return expected.length === given.length && Crypto.timingSafeEqual(expected, given)
        ? Option.some(agentId)
        : Option.none<string>()
    }

    const live = (tenantId: string, id: string) =>
      Effect.gen(function*() {
        const agent = yield* Effect.orDie(store.find(tenantId, id))
        if (Option.isNone(agent)) return yield* new ApiError.NotFound({ error: `no agent ${id}` })
        if (agent.value.expiresAt !== null && agent.value.expiresAt * 1000 <= Date.now()) {
          return yield* new ApiError.Gone({ error: `agent ${id} expired` })
        }
        return agent.value
      })

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
        connected: false,
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

    const sendPrompt = (
      agent: AgentRow,
      input: Run.PromptInput,
      defaultRequestId: string,
      method: "prompt" | "continue" = "prompt"
    ) => {
      const requestId = input.requestId ?? defaultRequestId
      const payload: PromptPayload = {
        requestId,
        method,
        fingerprint: fingerprint({ ...input, requestId }),
        text: input.text,
        ...(input.actor === undefined ? {} : { actor: input.actor }),
        ...(input.from === undefined ? {} : { from: input.from }),
        ...(input.whileRunning === undefined ? {} : { whileRunning: input.whileRunning }),
        ...(input.metadata === undefined ? {} : { metadata: input.metadata }),
        ...(input.spendLimit === undefined ? {} : { spendLimit: { usd: input.spendLimit.usd } })
      }
      return Effect.gen(function*() {
        yield* checkBudget(agent)
        const accepted = yield* Effect.orDie(makeClient(agent.id).Prompt(payload))
        if (accepted.fingerprint !== payload.fingerprint) {
          return yield* new ApiError.IdempotencyConflict({
            error: `request id ${requestId} was used for another request`
          })
        }
        // A repeated request id gets the cluster's stored reply from its first delivery: answer how it stands now.
        const current = yield* Effect.orDie(store.getRequest(agent.id, requestId))
        return Option.match(current, { onNone: () => accepted, onSome: toRecord })
      })
    }

    /** The prompt sent with a create or upsert: a refusal is reported in the answer, the agent is made regardless. */
    const firstPrompt = (agent: AgentRow, input: Run.PromptInput, defaultRequestId: string) =>
      sendPrompt(agent, input, defaultRequestId).pipe(
        Effect.catchTag("SpendLimit", (refusal) =>
          Effect.succeed(
            new AgentSchemas.PromptRefused({
              error: new Run.RunError({ code: "SPEND_LIMIT", message: refusal.error, status: 402 })
            })
          ))
      )

    const create = (tenantId: string, input: AgentSchemas.AgentInput, idempotencyKey: Option.Option<string>) =>
      Effect.gen(function*() {
        const { prompt, ...settings } = input
        const inputFingerprint = fingerprint(input)
        const key = Option.getOrNull(idempotencyKey)
        const existing = key === null ? Option.none() : yield* Effect.orDie(store.findByKey(tenantId, key))
        let agent: AgentRow
        if (Option.isSome(existing)) {
          if (existing.value.inputFingerprint !== inputFingerprint) {
            return yield* new ApiError.IdempotencyConflict({
              error: `Idempotency-Key ${key} was used with another body`
            })
          }
          agent = existing.value
        } else {
          const config: AgentConfig = {
            model: settings.model ?? (yield* listing.defaultModel(tenantId, Option.fromNullable(settings.keyScope))),
            ...(settings.systemPrompt === undefined ? {} : { systemPrompt: settings.systemPrompt }),
            ...(settings.systemPromptAppend === undefined ? {} : { systemPromptAppend: settings.systemPromptAppend }),
            ...(settings.thinkingLevel === undefined ? {} : { thinkingLevel: settings.thinkingLevel }),
            ...(settings.keyScope === undefined ? {} : { keyScope: settings.keyScope }),
            ...(settings.modelHeaders === undefined ? {} : { modelHeaders: settings.modelHeaders }),
            ...(settings.subject === undefined ? {} : { subject: settings.subject }),
            ...(settings.builtins === undefined ? {} : { builtins: settings.builtins }),
            ...(settings.spendLimit === undefined
              ? {}
              : { spendLimit: { usd: settings.spendLimit.usd, since: Math.floor(Date.now() / 1000) } })
          }
          const id = Ids.make("client")
          const ttlSeconds = settings.ttlSeconds !== undefined
            ? settings.ttlSeconds
            : key === null
            ? AgentSchemas.defaultTtlSeconds
            : null
          const inserted = yield* store.insertAgent({
            id,
            tenantId,
            key,
            name: settings.name ?? id,
            type: settings.type ?? null,
            config,
            inputFingerprint,
            ttlSeconds
          }).pipe(
            Effect.map(Option.some),
            // Another request with this key won the race: it is still creating the agent.
            Effect.catchAll((error) =>
              String(error.cause ?? error).includes("agents_key")
                ? Effect.fail(
                  new ApiError.IdempotencyInProgress({ error: `the first request with Idempotency-Key ${key} still runs` })
                )
                : Effect.die(error)
            )
          )
          agent = Option.getOrThrow(inserted)
          // The starting history, journaled like any other; a compactionSummary stands in for all before it.
          yield* Effect.forEach(
            settings.initialMessages ?? [],
            (message, index) =>
              Effect.orDie(store.appendMessage(agent.id, index, null, { timestamp: Date.now(), ...message })),
            { discard: true }
          )
        }
        const first = prompt === undefined
          ? undefined
          : yield* firstPrompt(agent, prompt, key === null ? Ids.make("req") : "req_initial")
        return new AgentSchemas.AgentCreated({
          id: agent.id,
          token: tokenFor(agent.id),
          expiresAt: agent.expiresAt,
          ...(first === undefined ? {} : { prompt: first })
        })
      })

    /** The keyed agent, with the given settings applied; made when no live agent has the key. */
    const upsert = (tenantId: string, key: string, input: AgentSchemas.AgentInput) =>
      Effect.gen(function*() {
        const existing = yield* Effect.orDie(store.findByKey(tenantId, key))
        if (Option.isNone(existing)) return yield* create(tenantId, input, Option.some(key))
        const agent = existing.value
        const { prompt, ...settings } = input
        const changes = {
          ...(settings.model === undefined ? {} : { model: settings.model }),
          systemPrompt: settings.systemPrompt ?? null,
          systemPromptAppend: settings.systemPromptAppend ?? null,
          thinkingLevel: settings.thinkingLevel ?? null,
          keyScope: settings.keyScope ?? null,
          modelHeaders: settings.modelHeaders ?? null,
          builtins: settings.builtins ?? null
        }
        // The configure's id names this call, not its content: a change back to earlier settings is new work,
        // never taken for a retry of the first. What keeps a retry from doing work twice is that it finds the
        // settings already as it names them, and so sends nothing.
        if (!CanonicalJson.equals(applyChanges(agent.config, changes), agent.config)) {
          yield* Effect.orDie(makeClient(agent.id).Configure({
            requestId: Ids.make("upsert"),
            fingerprint: fingerprint(changes),
            changes
          }))
        }
        const first = prompt === undefined ? undefined : yield* firstPrompt(agent, prompt, Ids.make("req"))
        return new AgentSchemas.AgentCreated({
          id: agent.id,
          token: tokenFor(agent.id),
          expiresAt: agent.expiresAt,
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
        const existing = yield* Effect.orDie(store.findByKey(tenantId, key))
        if (Option.isSome(existing)) {
          const forkedFrom = existing.value.config.forkedFrom
          if (forkedFrom?.agentId !== sourceId) {
            return yield* new ApiError.IdempotencyConflict({ error: `key ${key} names an agent that is not a fork of ${sourceId}` })
          }
          return new AgentSchemas.ForkCreated({
            id: existing.value.id,
            token: tokenFor(existing.value.id),
            expiresAt: existing.value.expiresAt,
            forkedFrom: new AgentSchemas.ForkedFrom({ agentId: sourceId, atMessage: forkedFrom.atMessage })
          })
        }
        const messages = yield* Effect.orDie(store.messages(sourceId))
        const completed = yield* Effect.orDie(store.completedRequests(sourceId))
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
        if (wanted === undefined) return yield* new ApiError.NotFound({ error: `no request ${input.atMessage} in history` })
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
          forkedFrom: { agentId: sourceId, atMessage: end }
        }
        const id = Ids.make("client")
        const agent = yield* store.insertAgent({
          id,
          tenantId,
          key,
          name: input.name ?? id,
          type: source.type,
          config,
          inputFingerprint: fingerprint(input),
          ttlSeconds: input.ttlSeconds !== undefined
            ? input.ttlSeconds
            : input.key === undefined
            ? AgentSchemas.defaultTtlSeconds
            : null
        }).pipe(Effect.orDie)
        yield* Effect.forEach(
          messages.filter((row) => row.index <= end),
          (row) => Effect.orDie(store.appendMessage(id, row.index, null, row.message)),
          { discard: true }
        )
        return new AgentSchemas.ForkCreated({
          id: agent.id,
          token: tokenFor(agent.id),
          expiresAt: agent.expiresAt,
          forkedFrom: new AgentSchemas.ForkedFrom({ agentId: sourceId, atMessage: end })
        })
      })

    /** Credentials of a keyed agent, by key or id. */
    const credentials = (tenantId: string, keyOrId: string) =>
      Effect.gen(function*() {
        const byId = yield* Effect.orDie(store.find(tenantId, keyOrId))
        const agent = Option.isSome(byId) ? byId : yield* Effect.orDie(store.findByKey(tenantId, keyOrId))
        if (Option.isNone(agent)) return yield* new ApiError.NotFound({ error: `no agent ${keyOrId}` })
        if (agent.value.key === null) {
          return yield* new ApiError.AgentKeyless({ error: `agent ${agent.value.id} was made without a key` })
        }
        return new AgentSchemas.AgentCredentials({
          id: agent.value.id,
          token: tokenFor(agent.value.id),
          expiresAt: agent.value.expiresAt
        })
      })

    /** The tenant of a live agent named by a genuine token. */
    const authenticateToken = (token: string, agentId: string) =>
      Effect.gen(function*() {
        const named = agentOfToken(token)
        if (Option.isNone(named) || named.value !== agentId) return Option.none<{ tenantId: string; agentId: string }>()
        const agent = yield* Effect.orDie(store.findById(agentId))
        return Option.map(agent, (agent) => ({ tenantId: agent.tenantId, agentId: agent.id }))
      })

    const prompt = (tenantId: string, agentId: string, input: Run.PromptInput) =>
      Effect.flatMap(live(tenantId, agentId), (agent) => sendPrompt(agent, input, Ids.make("req")))

    /** A turn on the history as it is, without a new user message. */
    const continueRun = (tenantId: string, agentId: string, requestId: Option.Option<string>) =>
      Effect.flatMap(live(tenantId, agentId), (agent) =>
        sendPrompt(
          agent,
          new Run.PromptInput({ text: "", ...(Option.isSome(requestId) ? { requestId: requestId.value } : {}) }),
          Ids.make("req"),
          "continue"
        ))

    const abort = (tenantId: string, agentId: string, requestId: Option.Option<string>) =>
      Effect.flatMap(live(tenantId, agentId), () =>
        Effect.orDie(makeClient(agentId).Abort({
          requestId: Option.getOrElse(requestId, () => Ids.make("req")),
          fingerprint: fingerprint({ method: "abort" })
        })))

    const configure = (tenantId: string, agentId: string, input: AgentSchemas.ConfigureInput) =>
      Effect.flatMap(live(tenantId, agentId), () => {
        const { requestId, spendLimit, ...rest } = input
        const changes = {
          ...rest,
          // A new budget counts from now.
          ...(spendLimit === undefined
            ? {}
            : { spendLimit: spendLimit === null ? null : { usd: spendLimit.usd, since: Math.floor(Date.now() / 1000) } })
        }
        return Effect.orDie(makeClient(agentId).Configure({
          requestId: requestId ?? Ids.make("req"),
          fingerprint: fingerprint(changes),
          changes
        }))
      })

    const status = (agentId: string) => fromOwner(Effect.orDie(makeClient(agentId).Status()))

    const detail = (tenantId: string, agentId: string) =>
      Effect.gen(function*() {
        const agent = yield* live(tenantId, agentId)
        const state = yield* status(agentId)
        const requests = yield* Effect.orDie(store.recentRequests(agentId, 20))
        return new AgentSchemas.AgentDetail({
          ...summary(agent, state.running),
          tools: [],
          toolSources: tools.forAgent(agent.config).sources,
          mounts: [],
          systemPrompt: agent.config.systemPrompt ?? "",
          ...(agent.config.systemPromptAppend === undefined ? {} : { systemPromptAppend: agent.config.systemPromptAppend }),
          keyScope: agent.config.keyScope ?? null,
          modelHeaders: agent.config.modelHeaders ?? null,
          builtins: (agent.config.builtins ?? []) as Array<AgentSchemas.Builtin>,
          spendLimit: yield* spendLimitOf(agent),
          cursor: state.cursor,
          events: [],
          requests: requests.map(toRecord),
          busy: state.running,
          activeRun: state.activeRequest,
          queuedRuns: state.queued
        })
      })

    const list = (tenantId: string, params: Common.PageParams) =>
      Effect.gen(function*() {
        const size = params.limit ?? Common.defaultPageSize
        const rows = yield* Effect.orDie(store.list(tenantId, params.after, size + 1))
        const data = rows.slice(0, size).map((agent) => summary(agent, false))
        return { data, next: rows.length > size ? data[data.length - 1]!.id : null }
      })

    const remove = (tenantId: string, agentId: string) =>
      Effect.flatMap(Effect.orDie(store.remove(tenantId, agentId)), Common.deleted(agentId, `no agent ${agentId}`))

    /** The record of a request; with `wait` it answers once the request settles or the wait (at most 25 s) ends. */
    const request = (tenantId: string, agentId: string, requestId: string, wait: Duration.Duration) =>
      Effect.gen(function*() {
        yield* live(tenantId, agentId)
        const read = Effect.orDie(store.getRequest(agentId, requestId)).pipe(
          Effect.flatMap(Option.match({
            onNone: () => Effect.fail(new ApiError.NotFound({ error: `no request ${requestId}` })),
            onSome: Effect.succeed
          }))
        )
        const limit = Duration.min(wait, longPollLimit)
        if (Duration.toMillis(limit) === 0) return toRecord(yield* read)
        const deadline = Date.now() + Duration.toMillis(limit)
        const settled = Effect.gen(function*() {
          while (true) {
            // Watch from the current cursor before reading, so the response frame cannot slip in between.
            const owner = yield* Effect.option(status(agentId))
            const current = yield* read
            const left = deadline - Date.now()
            if (current.state === "completed" || left <= 0) return toRecord(current)
            // The owner does not answer now (stopping, or its shard between runners): read again shortly.
            if (Option.isNone(owner)) {
              yield* Effect.sleep("500 millis")
              continue
            }
            yield* Effect.scoped(
              Effect.flatMap(watch(tenantId, agentId, Option.some(owner.value.cursor), true), (events) =>
                events.pipe(
                  Stream.filter((entry) => {
                    const data = entry.data as { type?: string; id?: string }
                    return data.type === "response" && data.id === requestId
                  }),
                  Stream.take(1),
                  Stream.runDrain
                ))
            ).pipe(
              Effect.timeout(Duration.millis(left)),
              // The stream also ends when the agent moves (a drain): read again and watch its next owner.
              Effect.catchAllCause(() => Effect.sleep("1 second"))
            )
          }
        })
        // An owner that does not answer (paused, or its shard between runners) ends the wait on time; a node
        // letting its streams go answers what it has at once, so its listener can close.
        const answered = Effect.raceFirst(settled, Effect.zipRight(drain.closed, Effect.map(read, toRecord)))
        return yield* Effect.timeoutTo(answered, {
          duration: limit,
          onSuccess: Effect.succeed,
          onTimeout: () => Effect.map(read, toRecord)
        }).pipe(Effect.flatten)
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
        const requests = yield* Effect.orDie(store.recentRequests(agentId, 10))
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
        const total = yield* Effect.orDie(store.messageCount(agentId))
        const rows = yield* Effect.orDie(store.messagesBefore(agentId, Math.min(page.before ?? total, total)))
        const limit = page.limit ?? defaultHistoryLimit
        let start = rows.length
        let bytes = 0
        let split = false
        // Walk back whole messages until the page is full, then on to the start of the turn it is in.
        while (start > 0) {
          const row = rows[start - 1]!
          const full = rows.length - start >= limit
          if (full && rows[start]?.turnStart) break
          if (bytes + row.bytes > maxHistoryPageBytes && start < rows.length) {
            split = !(rows[start]?.turnStart ?? true)
            break
          }
          bytes += row.bytes
          start--
        }
        const entries = rows.slice(start)
        return new Session.HistoryPage({
          entries: entries.map((row) => new Session.HistoryEntry({ index: row.index, message: row.message as Session.HistoryMessage })),
          next: start > 0 ? entries[0]?.index ?? null : null,
          total,
          split
        })
      })

    /**
     * The events of an agent owned elsewhere, read through the cluster, from
     * `cursor` on (from the owner's cursor now when none is given, fixed
     * before reading, so a re-read after a move cannot pass over anything).
     * When the owner ends the stream because the agent moves (a drain, a
     * rebalance), or the stream goes silent past `followIdleLimit`, it is
     * read again from the last id, on the agent's next owner once it has one,
     * which goes on from the same ids. A cursor the next owner cannot serve
     * (after a crash) fails the stream: the client reconnects and is told.
     */
    const followRemote = (agentId: string, cursor: Option.Option<number>) => {
      let last = cursor
      const once = Effect.gen(function*() {
        const from = Option.isSome(last) ? last.value : (yield* status(agentId)).cursor
        last = Option.some(from)
        return makeClient(agentId).Watch({ cursor: from }).pipe(
          Stream.timeoutFail(ownerUnavailable, followIdleLimit),
          Stream.filter((entry) => entry.id > Option.getOrElse(last, () => -1)),
          Stream.map((entry) => {
            last = Option.some(entry.id)
            return { ...entry, json: JSON.stringify(entry.data) }
          }),
          // A stream that went silent is read again; a gap ends the follow, and the client reconnects.
          Stream.catchTag("Unavailable", () => Stream.empty),
          Stream.catchTags({
            MailboxFull: (error) => Stream.die(error),
            AlreadyProcessingMessage: (error) => Stream.die(error),
            PersistenceError: (error) => Stream.die(error)
          })
        )
      })
      const loop = (): Stream.Stream<EventLog.Entry, ApiError.Unavailable | ReplayGap> =>
        Stream.concat(
          Stream.unwrap(once),
          Stream.suspend(() => Stream.concat(Stream.drain(Stream.fromEffect(Effect.sleep("100 millis"))), loop()))
        )
      return loop()
    }

    const watch = (tenantId: string, agentId: string, cursor: Option.Option<number>, snapshot: boolean) =>
      Effect.map(watchFrom(tenantId, agentId, cursor, snapshot), (entries) =>
        // A draining node ends its streams, so its agents can move at once.
        Stream.interruptWhen(entries, streamsEnd))

    const watchFrom = (tenantId: string, agentId: string, cursor: Option.Option<number>, snapshot: boolean) =>
      Effect.gen(function*() {
        yield* live(tenantId, agentId)
        const client = makeClient(agentId)
        const behind = Option.isSome(cursor)
          ? yield* client.Poll({ cursor: cursor.value, waitMillis: 0 }).pipe(
            Effect.as(false),
            Effect.catchTag("ReplayGap", () => Effect.succeed(true)),
            Effect.orDie
          )
          : false
        if (behind && !snapshot) {
          return yield* new ApiError.ReplayGap({
            error: "the cursor is behind the replay buffer; read state (or ask for a snapshot) and continue from its cursor"
          })
        }
        if (!behind) {
          const local = localLogs.get(agentId)
          if (Option.isSome(local)) {
            // Owned here: read the log itself, its JSON already made once for every watcher.
            const entries = yield* local.value.subscribe(cursor).pipe(Effect.orDie)
            return Stream.catchAll(entries, () => Stream.empty)
          }
          return followRemote(agentId, cursor)
        }
        const taken = yield* Effect.orDie(client.Snapshot())
        const data = { type: "snapshot", cursor: taken.cursor, requestId: taken.requestId, turn: taken.turn }
        return Stream.make({ id: taken.cursor, data, json: JSON.stringify(data) }).pipe(
          Stream.concat(followRemote(agentId, Option.some(taken.cursor)))
        )
      })

    const poll = (tenantId: string, agentId: string, cursor: number, wait: Duration.Duration) =>
      Effect.flatMap(live(tenantId, agentId), () =>
        makeClient(agentId).Poll({ cursor, waitMillis: Duration.toMillis(Duration.min(wait, longPollLimit)) }).pipe(
          Effect.catchAllDefect(Effect.die),
          (polled) => fromOwner(polled, Duration.sum(Duration.min(wait, longPollLimit), ownerAnswerLimit)),
          // A node letting its streams go answers what it has at once.
          (polled) => Effect.raceFirst(polled, Effect.zipRight(drain.closed, Effect.succeed({ cursor, events: [] }))),
          Effect.catchTag("ReplayGap", (gap) =>
            Effect.fail(
              new ApiError.ReplayGap({
                error: `cursor ${gap.cursor} is behind the replay buffer (oldest ${gap.oldest}); read state and continue from its cursor`
              })
            )),
          Effect.catchAll((error) => Effect.die(error))
        ))

    /**
     * The body of an SSE response: written straight from the agent's log when
     * this node owns it, else the cluster stream from the owner.
     */
    const eventBody = (
      tenantId: string,
      agentId: string,
      cursor: Option.Option<number>,
      options: { readonly snapshot: boolean; readonly ready: unknown }
    ) =>
      Effect.gen(function*() {
        yield* live(tenantId, agentId)
        const local = localLogs.get(agentId)
        if (Option.isSome(local)) {
          const written = yield* Effect.either(
            Sse.toNodeStream({ ready: options.ready, log: local.value, cursor, endWhen: onStreamsEnd })
          )
          if (written._tag === "Right") return { _tag: "Node", body: written.right } as const
        }
        const entries = yield* watch(tenantId, agentId, cursor, options.snapshot)
        return {
          _tag: "Stream",
          body: Sse.toStream({ ready: options.ready, entries })
        } as const
      })

    /**
     * Sends the agent's owner a Wake, so it loads its open work. Bounded: a
     * shard that has no owner yet makes the send wait, and a runner letting
     * the agent go may never answer.
     */
    const sendWake = (agentId: string) => makeClient(agentId).Wake().pipe(Effect.timeout(ownerAnswerLimit))

    /** Wakes one agent on its owner; a failure counts toward its resume backoff. */
    const wake = (agentId: string, resumeFailures = 0) =>
      sendWake(agentId).pipe(
        Effect.matchCauseEffect({
          onSuccess: () => resumeFailures > 0 ? Effect.ignore(store.resumeSucceeded(agentId)) : Effect.void,
          onFailure: (cause) =>
            Effect.zipRight(
              Effect.logWarning("waking an agent's unfinished work failed", cause).pipe(
                Effect.annotateLogs({ agentId, failures: resumeFailures + 1 })
              ),
              Effect.ignore(store.resumeFailed(agentId))
            )
        })
      )

    /**
     * Wakes agents whose unfinished work no live runner holds, so accepted
     * requests go on after a restart or a lost runner. A wake-up that fails
     * is retried later, doubling the wait up to an hour, never given up.
     */
    /**
     * Wakes an agent another runner let go with open work, on its next owner.
     * The announcement comes while the old runner still holds the shard, so
     * the first sends may meet it: tried again shortly, for about two leases,
     * after which the periodic sweep (`wakeOpenWork`) stands behind it. A
     * draining node wakes nothing: it is letting its own agents go.
     */
    const wakeReleased = (agentId: string, leaseSeconds: number) =>
      Effect.suspend(() => drain.isDraining() ? Effect.void : sendWake(agentId)).pipe(
        Effect.retry({ schedule: Schedule.spaced("500 millis"), times: Math.ceil(leaseSeconds * 4) }),
        Effect.catchAllCause((cause) =>
          Effect.logInfo("a released agent did not wake yet; the periodic sweep will", cause).pipe(
            Effect.annotateLogs({ agentId })
          )
        )
      )

    const wakeOpenWork = (leaseSeconds: number) =>
      Effect.flatMap(
        Effect.suspend(() => drain.isDraining() ? Effect.succeed([]) : Effect.orDie(store.agentsToWake(leaseSeconds))),
        (agents) =>
          Effect.forEach(agents, ({ agentId, resumeFailures }) => wake(agentId, resumeFailures), {
            concurrency: 16,
            discard: true
          })
      )

    return {
      create,
      upsert,
      fork,
      credentials,
      authenticateToken,
      prompt,
      continueRun,
      abort,
      configure,
      statusRequest,
      detail,
      list,
      remove,
      request,
      state,
      history,
      watch,
      eventBody,
      poll,
      wake,
      wakeReleased,
      wakeOpenWork
    } as const
  })
}) {}
