/**
 * The agent entity's behaviour. Message handlers only record and answer;
 * one runner fiber per agent takes accepted requests in arrival order and
 * runs them, so Status and event reads are answered while a turn runs. On
 * start the entity rebuilds history and unfinished work from the journal;
 * a turn cut short by a crash or a move is run again from its start, and
 * says so with turn_resumed (turn_recovered when the runner that began it,
 * restarted under the same address, goes on with it).
 */
import { Input } from "@agent-runtime/domain"
import { IdentityTokens } from "@agent-runtime/identity"
import { UsageLog } from "@agent-runtime/models"
import { DatabaseHealth } from "@agent-runtime/store"
import { Entity, ShardingConfig } from "@effect/cluster"
import {
  Cause,
  Chunk,
  Deferred,
  Duration,
  Effect,
  ExecutionStrategy,
  Exit,
  Fiber,
  Layer,
  Option,
  ParseResult,
  Queue,
  Schedule,
  Scope,
  Stream
} from "effect"
import { Agent, applyChanges, toRecord, watchKeepAlive } from "./Agent.ts"
import { type ApplicationConnected, Draining, Fenced, PersistenceError } from "./AgentError.ts"
import { type AgentConfig, AgentStore, type RequestRow, type Write, writeAll } from "./AgentStore.ts"
import * as ApplicationConnection from "./ApplicationConnection.ts"
import { Drain } from "./Drain.ts"
import * as EventLog from "./EventLog.ts"
import * as Inputs from "./Inputs.ts"
import * as RunEvents from "./RunEvents.ts"
import * as RunnerReports from "./RunnerReports.ts"
import * as Turn from "./Turn.ts"

/** How long a moving agent's turn may take to finish its step before it is cut (and resumed as after a crash). */
const handOnTimeout = Duration.seconds(30)

/**
 * How long the runner is busy before it asks the cluster to keep the entity alive. The keep-alive is a
 * persisted message (two writes and a reply); a turn shorter than this does without it: if its node is lost,
 * the wake-up sweep finds its open request once the runner's lease has run out, about as soon as the
 * cluster would have redelivered the keep-alive.
 */
const keepAliveAfter = Duration.seconds(1)

/** At most one warning this often for a journal statement waiting out an outage. */
const journalWarningInterval = 60_000

/**
 * Whether the journal refused a statement for good: PostgreSQL refused its data, or a row read back did not
 * decode. Trying it again would fail the same way.
 */
const refused = (error: PersistenceError) => DatabaseHealth.isPermanent(error) || ParseResult.isParseError(error.cause)

/** How many settled request ids the entity remembers, so a late message cannot queue one again. */
const rememberedSettled = 1024

// One client for the runner, not one per entity: the runner's messages to itself (Wake) go through it.
export const layer = Layer.unwrapEffect(Effect.map(Agent.client, (makeClient) =>
  Agent.toLayer(
    Effect.gen(function*() {
      const address = yield* Entity.CurrentAddress
      const agentId = address.entityId
      const store = yield* AgentStore
      const inputStore = yield* Inputs.InputStore
      const usage = yield* UsageLog.UsageLog
      const identity = yield* IdentityTokens.IdentityTokens
      const drain = yield* Drain
      const shardingConfig = yield* ShardingConfig.ShardingConfig
      const runnerAddress = Option.match(shardingConfig.runnerAddress, {
        onNone: () => "local",
        onSome: RunnerReports.addressOf
      })
      /**
       * A journal read or write, tried again while the database cannot be reached: a turn waits out an outage
       * instead of failing, and a message handler never dies of one (the cluster would restart the entity).
       * Every journal statement may run twice: each is idempotent or guarded by its state. The cluster stops
       * the waiting when it moves the agent, and a stale owner's write then fails with Fenced. A statement
       * PostgreSQL refused for its data (`refused`) would fail the same way for ever: it is not tried again,
       * and what was doing it ends with the error (a turn: its request completes with it). An outage is
       * logged when it begins and then at most once a minute per statement, with how often it failed.
       */
      const journal = <A, E>(effect: Effect.Effect<A, E>) =>
        Effect.suspend(() => {
          let failures = 0
          let warnedAt = 0
          return effect.pipe(
            Effect.tapError((error) => {
              if (!(error instanceof PersistenceError)) return Effect.void
              if (refused(error)) {
                return Effect.logError("the journal refused a write; it is not tried again", error.cause).pipe(
                  Effect.annotateLogs({ agentId })
                )
              }
              failures++
              if (Date.now() - warnedAt < journalWarningInterval) return Effect.void
              warnedAt = Date.now()
              return Effect.logWarning("the journal cannot be reached; trying again", error.cause).pipe(
                Effect.annotateLogs({ agentId, failures })
              )
            }),
            Effect.retry({
              schedule: Schedule.spaced("500 millis"),
              while: (error) => error instanceof PersistenceError && !refused(error)
            }),
            Effect.orDie
          )
        })
      const entityScope = yield* Effect.scope
      const localLogs = yield* EventLog.LocalLogs

      /**
       * Claims the agent for this node: a new epoch, which every journal write below carries, so if the
       * cluster ever let another node claim it, our writes are refused instead of mixing two turns. The term
       * has its own event log, in a fresh block of ids above any earlier owner's.
       */
      const claimTerm = Effect.gen(function*() {
        const ownership = yield* journal(store.claim(agentId, runnerAddress))
        const scope = yield* Scope.fork(entityScope, ExecutionStrategy.sequential)
        const log = yield* EventLog.make({
          agentId,
          startCursor: yield* journal(store.reserveEvents(agentId)),
          continuesFrom: ownership.continuesFrom ?? undefined,
          inherited: ownership.inherited ?? undefined
        }).pipe(Scope.extend(scope))
        yield* localLogs.register(agentId, log).pipe(Scope.extend(scope))
        return { ownership, epoch: ownership.epoch, log, scope }
      })
      let term = yield* claimTerm
      /** Set when this instance's runner stopped: another runner claimed the agent (Fenced), or it failed. */
      let superseded = false
      /**
       * When another runner's claim was found. This instance claims the agent again only a shard lease later,
       * if the cluster still routes its messages here: by then a runner that lost its shards while cut off has
       * noticed and let this entity go, so two runners never take the agent from each other in turn.
       */
      let fencedAt: number | undefined
      /**
       * This instance stops serving the agent until a message makes it claim the agent again (see `reclaim`).
       * Its log closes now: watchers reading it here reconnect and reach the agent wherever the cluster places
       * it, rather than following a log no event will reach (a superseded instance can outlive its turn).
       */
      const supersede = (fenced: boolean) =>
        Effect.suspend(() => {
          superseded = true
          if (fenced) fencedAt ??= Date.now()
          return Scope.close(term.scope, Exit.void)
        })
      const fencedNow = (write: Write) =>
        journal(store.fenced(agentId, term.epoch, write)).pipe(
          Effect.tapDefect((cause) =>
            Cause.defects(cause).pipe(Chunk.some((defect) => defect instanceof Fenced)) ? supersede(true) : Effect.void
          )
        )

      /**
       * A turn's start and its messages are held back to go with the turn's next journal write, in the same
       * statement: with nothing outside the node between them (the turn makes everything held durable before
       * it calls the model or a tool, see `durable`), a crash loses all of them or none, as one write would.
       * Events told after a held write wait for it, so a watcher never hears of a message the journal lost.
       */
      let heldStart: Write | undefined
      const heldMessages = new Map<number, Write>()
      let heldEvents: Array<unknown> = []
      /** Held writes on their way to the database: events told meanwhile wait for them too. */
      let flushing = 0
      const holding = () => heldStart !== undefined || heldMessages.size > 0 || flushing > 0
      const publishAll = (events: ReadonlyArray<unknown>) =>
        Effect.forEach(events, (data) => term.log.publish(data), { discard: true })

      /**
       * Journals `write` (when given) with everything held, in one statement; in two when the turn's start is
       * held, as `write` may change the same request (PostgreSQL changes a row once per statement). Then the
       * events that waited are told.
       */
      const fenced = (write?: Write) =>
        Effect.suspend(() => {
          if (!holding() && heldEvents.length === 0) return write === undefined ? Effect.void : fencedNow(write)
          const held = [...(heldStart === undefined ? [] : [heldStart]), ...heldMessages.values()]
          const statements = held.length === 0
            ? write === undefined ? [] : [write]
            : write === undefined
            ? [writeAll(held)]
            : heldStart === undefined
            ? [writeAll([...held, write])]
            : [writeAll(held), write]
          const waited = heldEvents
          heldStart = undefined
          heldMessages.clear()
          heldEvents = []
          flushing++
          return Effect.forEach(statements, fencedNow, { discard: true }).pipe(
            Effect.zipRight(publishAll(waited)),
            Effect.ensuring(Effect.suspend(() => {
              flushing--
              if (holding() || heldEvents.length === 0) return Effect.void
              // Told while these were written, with nothing held since: they need wait no longer.
              const since = heldEvents
              heldEvents = []
              return publishAll(since)
            }))
          )
        })
      const loadAgent = Effect.map(
        journal(store.findById(agentId)),
        Option.getOrThrowWith(() => new Error(`agent ${agentId} does not exist`))
      )
      const loadHistory = Effect.map(
        journal(store.messages(agentId)),
        (rows) => rows.map((row) => row.message as Turn.StoredMessage)
      )
      const agent = { ...yield* loadAgent }
      const history: Array<Turn.StoredMessage> = yield* loadHistory
      /** Bookkeeping of the connection (which serves, the tools it listed): worth a warning, never a failure. */
      const noted = (what: string) => <E, R>(effect: Effect.Effect<void, E, R>) =>
        Effect.catchAllCause(effect, (cause) =>
          Effect.logWarning(`could not record the application's ${what}`, cause).pipe(Effect.annotateLogs({ agentId })))
      const application = yield* ApplicationConnection.make({
        agentId,
        toolsHash: () =>
          agent.toolsHash,
        saveTools: (tools, hash) =>
          fenced(store.setApplicationTools(agentId, tools, hash)).pipe(
            Effect.zipRight(Effect.sync(() =>
              Object.assign(agent, { applicationTools: tools, toolsHash: hash })
            )),
            noted("tools")
          ),
        saveConnection: (connection) => noted("connection")(fenced(store.setConnection(agentId, connection))),
        identity: ({ actor, origin }) =>
          identity.sign({
            audience: ApplicationConnection.audience(agentId),
            subject: agent.config.subject,
            actor,
            context: agent.config.context,
            tenantId: agent.tenantId,
            agentId,
            origin
          }).pipe(
            Effect.asSome,
            Effect.catchAll((error) =>
              Effect.as(
                Effect.logWarning("could not sign an identity token; the call goes without one", error),
                Option.none()
              )
            )
          )
      })
      // A draining node tells the application: no new calls come on its connection.
      yield* Effect.forkScoped(Effect.zipRight(drain.begun, application.drain))
      // Stopped on purpose (drain, rebalance, idle): the next owner's log goes on from this one's, without a gap.
      // Open work is announced so another node wakes it; a draining runner announces only once its shards are
      // gone (layerReleaseAnnouncements), since a wake-up sent now would meet this runner on its way out.
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          const cursor = yield* term.log.cursor
          yield* store.release(agentId, term.epoch, cursor, yield* term.log.buffered)
          if (drain.isDraining()) drain.released(agentId)
          else yield* store.announceReleased([agentId])
        }).pipe(Effect.ignore)
      )

      /** The cluster is moving the agent (rebalance, drain): the running turn stops after its step. */
      let releasing = false
      /** Accepted requests not yet run, in arrival order. */
      const pending: Array<RequestRow> = []
      /** Steered prompts waiting for the running turn's next step, and those it took. */
      let steering: Array<RequestRow> = []
      let taken: Array<RequestRow> = []
      let activeTurn: Fiber.RuntimeFiber<Turn.TurnOutcome> | undefined
      let aborting = false
      const wakeup = yield* Queue.sliding<void>(1)
      let active: string | null = null
      let activeBegan: number | undefined

      /**
       * Requests this instance settled, most recent last: a row read before it settled (by a Wake, or a
       * Prompt racing the runner) must not run it again.
       */
      const settled = new Set<string>()
      const remember = (id: string) => {
        settled.add(id)
        if (settled.size > rememberedSettled) settled.delete(settled.values().next().value!)
      }

      const enqueue = (row: RequestRow) => {
        const known = (open: RequestRow) => open.id === row.id
        if (
          row.state === "completed" || settled.has(row.id) || active === row.id || pending.some(known) ||
          steering.some(known) || taken.some(known)
        ) return false
        pending.push(row)
        pending.sort((a, b) => a.seq - b.seq)
        return true
      }

      /** Queues the journal's open requests this instance does not know yet, but `except`. */
      const loadOpenWorkBut = (except: string | undefined) =>
        Effect.gen(function*() {
          let added = false
          for (const row of yield* journal(store.openRequests(agentId))) {
            if (row.id !== except) added = enqueue(row) || added
          }
          if (added) yield* Queue.offer(wakeup, void 0)
        })
      const loadOpenWork = loadOpenWorkBut(undefined)

      /** The assistant message streaming now, rebuilt from its deltas, for snapshots. */
      let partial: { role: "assistant"; content: Array<Record<string, unknown>> } | undefined
      const track = (event: Record<string, any>) => {
        if (event.type === "message_start" && event.message?.role === "assistant") {
          partial = { role: "assistant", content: [] }
        } else if (event.type === "message_end" || event.type === "message_retracted") partial = undefined
        else if (event.type === "message_update" && partial !== undefined) {
          const delta = event.assistantMessageEvent
          const field = delta.type === "text_delta" ? "text" : delta.type === "thinking_delta" ? "thinking" : undefined
          if (field !== undefined) {
            const part = partial.content[delta.contentIndex] ??= { type: field, [field]: "" }
            part[field] = String(part[field] ?? "") + delta.delta
          }
        }
      }

      const frame = (requestId: string) => (event: Record<string, unknown>) =>
        Effect.suspend(() => {
          track(event)
          const data = { type: "event", requestId, event }
          if (holding()) {
            heldEvents.push(data)
            return Effect.void
          }
          return Effect.asVoid(term.log.publish(data))
        })

      /**
       * Whether a spend limit is reached: the agent's, its run's, or (for a sub-agent) those of each agent
       * and run above it. A limit counts what the sub-agents below it spent.
       */
      const overBudget = (id: string, config: AgentConfig, row: RequestRow): Effect.Effect<boolean> =>
        Effect.gen(function*() {
          const delegates = (config.builtins ?? []).includes("delegate")
          const limit = config.spendLimit
          if (limit !== undefined) {
            const subAgents = delegates ? yield* journal(store.subAgents(id)) : []
            if ((yield* usage.spent(id, { since: limit.since, subAgents })) >= limit.usd) return true
          }
          const runLimit = (row.input as { spendLimit?: { usd: number } }).spendLimit
          if (runLimit !== undefined) {
            const subAgents = delegates ? yield* journal(store.subAgents(id, row.id)) : []
            if ((yield* usage.spent(id, { requestId: row.id, subAgents })) >= runLimit.usd) return true
          }
          for (const above of config.delegation?.ancestors ?? []) {
            const [parent, run] = yield* journal(Effect.all([
              store.findById(above.agentId),
              store.getRequest(above.agentId, above.requestId)
            ]))
            if (Option.isNone(parent) || Option.isNone(run)) continue
            // Its own sub-agents are checked from its chain: only its limits here, not its ancestors again.
            const { delegation: _chain, ...own } = parent.value.config
            if (yield* overBudget(above.agentId, own, run.value)) return true
          }
          return false
        })

      const runOne = (row: RequestRow) =>
        Effect.gen(function*() {
          active = row.id
          const input = row.input as unknown as
            & { readonly text?: string; readonly actor?: string; readonly suspension?: string }
            & Pick<Turn.TurnInput, "metadata" | "from" | "files">
          const resumed = row.state === "running"
          const began = row.beganIndex ?? history.length
          let unjournaled: Array<Turn.Steered> = []
          if (resumed) {
            // The turn's prompts (its own, and those steered into it) whose user message the lost node had not
            // written yet: a turn cut right after it began, or right after it took a steered prompt.
            const inHistory = new Set(
              history.slice(began).flatMap((message) =>
                message.role === "user" && message.requestId !== undefined ? [message.requestId] : []
              )
            )
            const prompts = [
              ...(row.method === "continue" || row.method === "execute" || row.method === "resume" ? [] : [row]),
              ...yield* journal(store.steeredInto(agentId, row.id))
            ]
            unjournaled = prompts.flatMap((prompt) =>
              inHistory.has(prompt.id) ? [] : [{ requestId: prompt.id, ...(prompt.input as any) }]
            )
            // Another node began this turn: continue from what it journaled.
            yield* fenced(store.markResumed(agentId, row.id, RunEvents.started(agent.tenantId, row)))
            // This runner's own turn (its process restarted under the same address, or its entity was started
            // again here) is recovered; one another runner began is resumed.
            const recovered = term.ownership.previousOwner === runnerAddress
            yield* Effect.logInfo(recovered ? "turn recovered here" : "turn resumed here").pipe(Effect.annotateLogs({
              agentId,
              requestId: row.id,
              from: term.ownership.previousOwner ?? "a runner that let it go",
              why: row.handoff ?? "its runner was lost"
            }))
            yield* frame(row.id)({
              type: recovered ? "turn_recovered" : "turn_resumed",
              index: history.length,
              ...(row.handoff === null ? {} : { handoff: row.handoff })
            })
          } else {
            // Journaled with the user message, before the model is called (see heldStart).
            heldStart = store.markRunning(agentId, row.id, history.length, RunEvents.started(agent.tenantId, row))
          }
          activeBegan = began
          aborting = false
          const declared = agent.applicationTools ?? []
          const turn = yield* Effect.fork(Turn.run(
            {
              tenantId: agent.tenantId,
              agentId,
              config: agent.config,
              requestId: row.id,
              // A resume goes on from the answers, without a new user message.
              continue: row.method === "continue" || row.method === "resume",
              suspension: input.suspension,
              resume: resumed ? { began, unjournaled } : undefined,
              text: input.text ?? "",
              code: (row.input as { code?: string }).code,
              metadata: input.metadata,
              from: input.from,
              files: input.files,
              actor: input.actor,
              origin: row.method,
              application: declared.length === 0 ? undefined : {
                tools: application.tools(declared, {
                  requestId: row.id,
                  actor: input.actor ?? input.from?.id,
                  origin: row.method,
                  waitForConnection: (row.input as { allowDisconnected?: boolean }).allowDisconnected !== true
                }),
                connected: application.connected()
              }
            },
            {
              takeSteered: Effect.suspend(() => {
                const now = steering
                steering = []
                taken = taken.concat(now)
                return now.length === 0
                  ? Effect.succeed([])
                  : Effect.as(
                    fenced(store.markSteered(agentId, now.map((steered) => steered.id), row.id)),
                    now.map((steered) => ({ requestId: steered.id, ...(steered.input as any) }))
                  )
              }),
              toolStarted: (toolCallId, tool) => fenced(store.startToolCall(agentId, row.id, toolCallId, tool)),
              toolFinished: (toolCallId, result) => fenced(store.finishToolCall(agentId, toolCallId, result)),
              sentToolCalls: journal(store.toolCalls(agentId, row.id)),
              aborting: () => aborting,
              handingOff: () => releasing || drain.isDraining(),
              overBudget: overBudget(agentId, agent.config, row),
              emit: frame(row.id),
              append: (index, message) =>
                Effect.sync(() => {
                  heldMessages.set(index, store.appendMessage(agentId, index, row.id, message))
                  history[index] = message
                }),
              durable: fenced(),
              historySize: () => history.length,
              history: () => history,
              askInputs: (asks) =>
                Effect.gen(function*() {
                  const asker = input.actor ?? input.from?.id
                  const humanInput = agent.config.humanInput
                  yield* fenced(inputStore.ask(agent.tenantId, agentId, row.id, asks, {
                    audience: asker === undefined ? [] : [asker],
                    approvers: humanInput?.approvers ?? [],
                    lifetimeSeconds: humanInput?.expiresInSeconds ?? Input.defaultInputLifetimeSeconds
                  }))
                  // In the order the calls were made.
                  const found = new Map(
                    (yield* journal(inputStore.forRequest(agentId, row.id))).map((input) => [input.toolCallId, input])
                  )
                  const rows = asks.flatMap((ask) => found.get(ask.toolCallId) ?? [])
                  for (const asked of rows) {
                    yield* frame(row.id)({
                      type: "input_required",
                      input: {
                        id: asked.id,
                        kind: asked.kind,
                        message: asked.message,
                        detail: asked.detail,
                        expiresAt: asked.expiresAt,
                        toolCallId: asked.toolCallId
                      }
                    })
                  }
                  return rows.map(Inputs.toInput)
                }),
              inputsFor: (toolCallIds, supersede) =>
                Effect.gen(function*() {
                  if (supersede) yield* afterSettled(yield* journal(inputStore.supersede(agentId, toolCallIds)))
                  const found = yield* journal(inputStore.forCalls(agentId, toolCallIds))
                  return new Map([...found].map(([toolCallId, row]) => [toolCallId, Inputs.toInput(row)]))
                })
            }
          ))
          activeTurn = turn
          const exit = yield* Fiber.await(turn)
          if (Exit.isFailure(exit) && DatabaseHealth.isUnreachable(exit.cause)) {
            // The database went away under the turn (a key lookup, a usage record): the turn is not failed for
            // it. The runner stops, and the agent's work resumes from the journal once the database is back.
            return yield* Effect.orDie(Effect.failCause(exit.cause))
          }
          if (Exit.isSuccess(exit) && exit.value.handoff === true) {
            // Stopped between steps for the next owner, which continues it under the same request id.
            yield* fenced(store.markHandoff(agentId, row.id, "drain"))
            taken = []
            yield* Effect.logInfo("turn handed on").pipe(Effect.annotateLogs({ agentId, requestId: row.id }))
            return
          }
          const stored = Exit.match(exit, {
            onSuccess: (outcome): Record<string, unknown> => ({
              // A resumed turn says whether a tool call's effect is unknown; otherwise nothing was lost.
              result: resumed ? { ...outcome.result, resumed: true } : outcome.result,
              ...(resumed || outcome.uncertain === true ? { uncertain: outcome.uncertain === true } : {}),
              ...(outcome.code === undefined ? {} : { code: outcome.code, error: outcome.result.error })
            }),
            onFailure: (cause) =>
              aborting && Cause.isInterruptedOnly(cause)
                ? { result: { messages: history.length, error: "aborted" }, error: "aborted", code: "aborted" }
                : { error: `the runtime could not run the turn: ${Cause.pretty(cause).split("\n")[0]}` }
          })
          yield* settle(row, stored)
          if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
            yield* Effect.logError("the turn failed", exit.cause).pipe(
              Effect.annotateLogs({ agentId, requestId: row.id })
            )
            // The turn failed midway (a write the journal refused, say): history goes on from what was kept.
            history.splice(0, history.length, ...yield* loadHistory)
          }
          // Steered prompts the turn took (here or on a node before) end with it; those it did not reach
          // run as their own turns.
          // Read back only when there can be any: taken here, or by the node that began a resumed turn.
          const steeredHere = resumed || taken.length > 0 ? yield* journal(store.steeredInto(agentId, row.id)) : []
          for (const steered of steeredHere) {
            yield* settle(steered, stored, row.id)
          }
          taken = []
          pending.unshift(...steering)
          pending.sort((a, b) => a.seq - b.seq)
          steering = []
        }).pipe(Effect.ensuring(Effect.sync(() => {
          active = null
          activeTurn = undefined
        })))

      /** Inputs that settled are told to watchers; a suspension they settled resumes as a queued request. */
      const afterSettled = (settled: Inputs.Settled) =>
        Effect.gen(function*() {
          for (const row of settled.changed) {
            yield* frame(row.requestId)({
              type: "input_resolved",
              inputId: row.id,
              toolCallId: row.toolCallId,
              kind: row.kind,
              state: row.state
            })
          }
          let added = false
          for (const row of settled.resumes) added = enqueue(row) || added
          if (added) yield* Queue.offer(wakeup, void 0)
        })

      /** Ends a request with its outcome and tells watchers. */
      const settle = (row: RequestRow, outcome: Record<string, unknown>, steeredInto?: string) =>
        Effect.gen(function*() {
          const report = RunEvents.ended(agent.tenantId, row, outcome, usage.runUsage(agentId, row.id), steeredInto)
          yield* fenced(store.complete(agentId, row.id, outcome, report, steeredInto))
          remember(row.id)
          // Only a queued or running request is settled here, so the outcome written is this one.
          yield* term.log.publish({ type: "response", id: row.id, outcome: toRecord({ ...row, outcome }).outcome })
        })

      /** Records a request that takes effect at once (abort, configure) and settles it. */
      const immediate = (
        payload: { readonly requestId: string; readonly fingerprint: string },
        method: string,
        input: Record<string, unknown>,
        apply: Effect.Effect<Record<string, unknown>>
      ) =>
        Effect.gen(function*() {
          const row = yield* journal(store.insertRequest({
            agentId,
            id: payload.requestId,
            method,
            fingerprint: payload.fingerprint,
            input
          }))
          if (row.state === "completed" || row.fingerprint !== payload.fingerprint) return toRecord(row)
          yield* settle(row, { result: yield* apply })
          return toRecord(Option.getOrThrow(yield* journal(store.getRequest(agentId, row.id))))
        })

      /**
       * Before a turn starts: an application connection still in its handshake (initialize, tools/list) is
       * waited for, up to ApplicationConnection.initializingWait, so the turn gets the tools it lists; after
       * that the turn runs with the tools listed before, and the log says why.
       */
      const awaitApplication = (row: RequestRow) =>
        Effect.gen(function*() {
          if (yield* application.awaitInitialized(ApplicationConnection.initializingWait)) return
          yield* Effect.logWarning(
            "the application's connection did not finish its handshake in time; the turn runs with the tools it " +
              "listed before"
          ).pipe(Effect.annotateLogs({
            agentId,
            requestId: row.id,
            waited: Duration.format(ApplicationConnection.initializingWait)
          }))
        })

      // The runner: one request at a time, in arrival order. The entity is kept alive while the runner stays
      // busy (see keepAliveAfter); the cluster keeps that as a message, so when the node is lost, the next owner
      // of the shard starts the agent at once and it picks the work up. A node letting the agent go on purpose
      // ends the keep-alive (it would hold the shard until the termination timeout) and announces the release
      // instead (see release).
      const runnerBody = Effect.gen(function*() {
        while (true) {
          yield* Queue.take(wakeup)
          const keepingAlive = yield* Effect.fork(Effect.delay(Entity.keepAlive(true), keepAliveAfter))
          // A draining node starts nothing new: open work stays journaled for the next owner.
          while (pending.length > 0 && !drain.isDraining() && !releasing) {
            // Its turn gets the tools of an application still in its handshake; an abort meanwhile cancels it.
            yield* awaitApplication(pending[0]!)
            if (pending.length > 0 && !drain.isDraining() && !releasing) yield* drain.track(runOne(pending.shift()!))
          }
          yield* Fiber.interrupt(keepingAlive)
          yield* Entity.keepAlive(false)
        }
      }).pipe(
        // The runner never just stops: when another runner claimed the agent (Fenced), or a bug ended it, the
        // next message routed here claims the agent again and runs its open work from the journal; a Wake makes
        // sure there is one. Should the cluster place the agent elsewhere now, the Wake wakes it there instead.
        Effect.catchAllDefect((defect) =>
          (defect instanceof Fenced
            ? Effect.logWarning("another runner claimed the agent; this one claims it again if it still owns it")
            : DatabaseHealth.isUnreachable(defect)
            ? Effect.logWarning("the database went away under a turn; it resumes from the journal once it is back")
            : Effect.logError("the agent's runner failed; it starts again from the journal", Cause.die(defect))).pipe(
              Effect.annotateLogs({ agentId, epoch: term.epoch }),
              Effect.zipRight(supersede(defect instanceof Fenced)),
              Effect.zipRight(
                makeClient(agentId).Wake().pipe(
                  Effect.timeout("5 seconds"),
                  // Until one is answered: the journal may still be out of reach.
                  Effect.retry({ schedule: Schedule.spaced("1 second"), times: 120 }),
                  Effect.ignore,
                  Effect.forkDaemon
                )
              )
            )
        )
      )
      // Kept to start the runner again after a reclaim, from a message handler.
      const runner = Effect.provide(runnerBody, yield* Effect.context<Effect.Effect.Context<typeof runnerBody>>())
      yield* Effect.forkScoped(runner)
      // Runs before the runner is interrupted (finalizers run in reverse): a turn moved with its shard
      // finishes its current step and hands on, rather than being cut and resumed as after a crash.
      yield* Effect.addFinalizer(() =>
        Effect.suspend(() => {
          releasing = true
          return Effect.repeat(Effect.sync(() => active), {
            until: (running) => running === null,
            schedule: Schedule.spaced("50 millis")
          }).pipe(Effect.timeout(handOnTimeout), Effect.ignore)
        })
      )
      /**
       * A message reached this instance after another runner claimed the agent: the cluster places the agent
       * here, so this node claims it again (a new term, its log in a fresh block of ids; watchers of the old
       * one reconnect), reloads it from the journal and runs its open work, a cut turn resumed.
       */
      const reclaim = Effect.gen(function*() {
        // A runner that failed for another reason (its database went away; it was paused past its lease) may
        // find another runner claimed the agent meanwhile: that is a fence too, and it waits as after one.
        if (fencedAt === undefined && (yield* journal(store.epochOf(agentId))) !== term.epoch) fencedAt = Date.now()
        if (fencedAt !== undefined) {
          yield* Effect.sleep(
            Math.max(0, fencedAt + Duration.toMillis(shardingConfig.shardLockExpiration) - Date.now())
          )
        }
        yield* Scope.close(term.scope, Exit.void)
        term = yield* claimTerm
        Object.assign(agent, yield* loadAgent)
        history.splice(0, history.length, ...yield* loadHistory)
        // What the stopped runner held back was never journaled: the journal, just read, is what there is.
        heldStart = undefined
        heldMessages.clear()
        heldEvents = []
        pending.length = 0
        steering = []
        taken = []
        superseded = false
        fencedAt = undefined
        yield* Effect.logInfo("claimed the agent again").pipe(Effect.annotateLogs({ agentId, epoch: term.epoch }))
        yield* Effect.forkIn(runner, entityScope)
        yield* loadOpenWork
      })
      const reclaiming = yield* Effect.makeSemaphore(1)
      const current = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.zipRight(reclaiming.withPermits(1)(Effect.suspend(() => superseded ? reclaim : Effect.void)), effect)
      yield* loadOpenWork

      return {
        Prompt: ({ payload }) =>
          current(Effect.gen(function*() {
            // A row recorded before this term's claim may have run under an earlier owner since its sender
            // wrote it (a delivery tried again across a move): its state is read again. One recorded after the
            // claim can only have run here, which this instance remembers.
            const row = payload.request.startedAt > term.ownership.claimedAt
              ? payload.request
              : Option.getOrElse(yield* journal(store.getRequest(agentId, payload.request.id)), () => payload.request)
            const steers = payload.whileRunning === "steer" && active !== null && active !== row.id &&
              row.state === "queued" && !settled.has(row.id)
            if (steers) {
              // The row may be queued already: a Wake, or this instance starting, read it before this message.
              const queued = pending.findIndex((open) => open.id === row.id)
              if (queued !== -1) pending.splice(queued, 1)
              if (!steering.some((open) => open.id === row.id) && !taken.some((open) => open.id === row.id)) {
                steering.push(row)
              }
            } else if (enqueue(row)) {
              yield* Queue.offer(wakeup, void 0)
            }
            return toRecord(row)
          })),
        Abort: ({ payload }) =>
          current(immediate(
            payload,
            "abort",
            {},
            Effect.gen(function*() {
              // Prompts accepted before the abort may not have reached this queue yet (see Arrivals).
              yield* loadOpenWorkBut(payload.requestId)
              const cancelled = [...pending, ...steering]
              pending.length = 0
              steering = []
              for (const row of cancelled) {
                yield* settle(row, { error: "cancelled by an abort request", code: "cancelled" })
              }
              const stopped = active
              if (activeTurn !== undefined) {
                aborting = true
                yield* Fiber.interrupt(activeTurn)
              }
              // A turn waiting on a person ends too: its inputs are cancelled, and no answer resumes it.
              const inputs = yield* journal(inputStore.cancel(agentId))
              yield* afterSettled(inputs)
              return {
                cancelled: cancelled.map((row) => row.id),
                aborted: stopped,
                inputs: inputs.changed.map((row) => row.id)
              }
            })
          )),
        Configure: ({ payload }) =>
          current(immediate(
            payload,
            "configure",
            { changes: payload.changes },
            Effect.gen(function*() {
              agent.config = applyChanges(agent.config, payload.changes)
              yield* fenced(store.updateConfig(agentId, agent.config))
              return { config: agent.config }
            })
          )),
        Answer: ({ payload }) =>
          current(Effect.gen(function*() {
            const settled = yield* inputStore.answer(agentId, payload.answers, payload.by).pipe(
              Effect.retry({
                schedule: Schedule.spaced("500 millis"),
                while: (error) => error instanceof PersistenceError
              }),
              Effect.catchIf((error): error is PersistenceError => error instanceof PersistenceError, Effect.die)
            )
            yield* afterSettled(settled)
            // The resume of each suspension answered, also when this answer repeats one given before (an answer
            // whose reply was lost): it is run if it is not already.
            const resumes: Array<RequestRow> = []
            for (const suspension of new Set(settled.inputs.map((row) => row.requestId))) {
              const found = yield* journal(store.getRequest(agentId, Inputs.resumeRequestId(suspension)))
              if (Option.isSome(found)) resumes.push(found.value)
            }
            let added = false
            for (const row of resumes) added = enqueue(row) || added
            if (added) yield* Queue.offer(wakeup, void 0)
            return { inputs: settled.inputs.map(Inputs.toInput), requests: resumes.map(toRecord) }
          })),
        ExpireInputs: () => current(Effect.flatMap(journal(inputStore.expire(agentId)), afterSettled)),
        Wake: () => current(loadOpenWork),
        Status: () =>
          current(Effect.map(term.log.cursor, (cursor) => ({
            cursor,
            running: active !== null,
            connected: application.connected(),
            activeRequest: active,
            queued: pending.map((row) => row.id)
          }))),
        Snapshot: () =>
          current(Effect.map(term.log.cursor, (cursor) => {
            const began = active === null ? history.length : (activeBegan ?? history.length)
            return {
              cursor,
              requestId: active,
              turn: [...history.slice(began), ...(partial === undefined ? [] : [partial])]
            }
          })),
        Watch: ({ payload }) =>
          Stream.unwrapScoped(
            Effect.map(
              current(Effect.suspend(() => term.log.subscribe(Option.fromNullable(payload.cursor)))),
              (entries) =>
                entries.pipe(
                  Stream.map((entry) => ({ id: entry.id, data: entry.data })),
                  // A lagging watcher's stream just ends; the client reconnects from its cursor. So does
                  // every stream when the node closes its streams to hand the agent on.
                  Stream.catchAll(() => Stream.empty),
                  Stream.merge(Stream.as(Stream.tick(watchKeepAlive), { id: -1, data: null }), {
                    haltStrategy: "left"
                  }),
                  Stream.interruptWhen(drain.closed)
                )
            )
          ),
        Connect: ({ payload }) =>
          Stream.unwrap(
            Effect.suspend(() =>
              drain.isDraining()
                ? Effect.fail<ApplicationConnected | Draining>(new Draining())
                : current(application.connect(payload))
            )
          ).pipe(
            // A draining node ends its streams; the application reconnects to the agent's next owner.
            Stream.interruptWhen(drain.closed)
          ),
        Mcp: ({ payload }) => current(application.receive(payload.connection, payload.message)),
        Heartbeat: ({ payload }) => application.heartbeat(payload.connection),
        AwaitConnected: ({ payload }) => application.awaitConnected(Duration.millis(payload.waitMillis)),
        AwaitResponse: ({ payload }) =>
          current(Effect.gen(function*() {
            // Settled ones are remembered before their response is told, while still the active request.
            const open = (id: string) =>
              !settled.has(id) &&
              (active === id || [pending, steering, taken].some((rows) => rows.some((row) => row.id === id)))
            // Listening before looking, so a response told in between is heard.
            const heard = yield* Deferred.make<boolean>()
            const { stop } = yield* Effect.orDie(term.log.listen(Option.none(), {
              entry: (entry) => {
                const frame = entry.data as { type?: string; id?: string } | null
                if (frame?.type === "response" && frame.id === payload.requestId) {
                  Deferred.unsafeDone(heard, Exit.succeed(true))
                }
              },
              close: () => Deferred.unsafeDone(heard, Exit.succeed(false))
            }))
            if (!open(payload.requestId)) {
              stop()
              return true
            }
            return yield* Deferred.await(heard).pipe(
              Effect.timeoutTo({
                duration: Duration.millis(payload.waitMillis),
                onSuccess: (responded: boolean) => responded,
                onTimeout: () => false
              }),
              Effect.raceFirst(Effect.as(drain.closed, false)),
              Effect.ensuring(Effect.sync(stop))
            )
          })),
        Poll: ({ payload }) =>
          current(Effect.raceFirst(
            Effect.suspend(() => term.log.poll(payload.cursor, `${payload.waitMillis} millis`)),
            Effect.zipRight(drain.closed, Effect.suspend(() => term.log.poll(payload.cursor, 0)))
          ))
      }
    }),
    { concurrency: "unbounded", maxIdleTime: "5 minutes" }
  )))

/**
 * Announces the agents a draining runner let go with open work, when this
 * layer closes: after the cluster runner it sits under has released its
 * shards, so the wake-ups other nodes send reach the next owners.
 */
export const layerReleaseAnnouncements = Layer.scopedDiscard(
  Effect.gen(function*() {
    const drain = yield* Drain
    const store = yield* AgentStore
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => store.announceReleased(drain.releasedAgents())).pipe(
        Effect.catchAllCause((cause) =>
          Effect.logWarning("announcing released agents failed; the other nodes' sweep wakes them", cause)
        )
      )
    )
  })
)
