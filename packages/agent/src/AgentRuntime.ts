/**
 * The agent entity's behaviour. Message handlers only record and answer;
 * one runner fiber per agent takes accepted requests in arrival order and
 * runs them, so Status and event reads are answered while a turn runs. On
 * start the entity rebuilds history and unfinished work from the journal;
 * a turn cut short by a crash or a move is run again from its start, and
 * says so with turn_resumed (turn_recovered when the runner that began it,
 * restarted under the same address, goes on with it).
 */
import { Ledger } from "@agent-runtime/billing"
import { Volumes } from "@agent-runtime/files"
import { IdentityTokens } from "@agent-runtime/identity"
import { ModelClient, UsageLog } from "@agent-runtime/models"
import { DatabaseHealth } from "@agent-runtime/store"
import { NodeSpans, TraceExport } from "@agent-runtime/telemetry"
import { Entity, Sharding, ShardingConfig } from "@effect/cluster"
import {
  Cause,
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Option,
  Queue,
  Runtime,
  Schedule,
  Stream,
  Tracer
} from "effect"
import type { AnswerPayload, PromptPayload } from "./Agent.ts"
import { Agent, applyChanges, entityClient, StatelessRun, toRecord, watchKeepAlive } from "./Agent.ts"
import { type ApplicationConnected, Draining, Fenced, PersistenceError } from "./AgentError.ts"
import { AgentStore, type RequestRow } from "./AgentStore.ts"
import * as ApplicationConnection from "./ApplicationConnection.ts"
import { Drain } from "./Drain.ts"
import type * as EventLog from "./EventLog.ts"
import * as Inputs from "./Inputs.ts"
import {
  afterSettled,
  immediate,
  type Instance,
  loadAgent,
  loadHistory,
  loadOpenWork,
  offer,
  reloadHistory,
  Requests,
  settle,
  Streaming
} from "./internal/instance.ts"
import { awaitApplication, runRequest } from "./internal/runRequest.ts"
import { turnScheduler } from "./internal/turnScheduler.ts"
import * as Journal from "./Journal.ts"
import { LocalAgents } from "./LocalAgents.ts"
import * as RunnerReports from "./RunnerReports.ts"
import * as Tools from "./Tools.ts"

/** How long a moving agent's turn may take to finish its step before it is cut (and resumed as after a crash). */
const handOnTimeout = Duration.seconds(30)

/**
 * How long the runner is busy before it asks the cluster to keep the entity alive. The keep-alive is a
 * persisted message (two writes and a reply); a turn shorter than this does without it: if its node is lost,
 * the wake-up sweep finds its open request once the runner's lease has run out, about as soon as the
 * cluster would have redelivered the keep-alive.
 */
const keepAliveAfter = Duration.seconds(1)

/** How long an agent waits for its next message before the cluster lets its instance go. */
const agentMaxIdleTime = Duration.minutes(5)

/** How long an abort waits for a turn that was still being set up (it reads the database) to end. */
const abortSetupWait = 5_000

/** The application connection of an instance: its bookkeeping journaled, its calls signed. */
const connectApplication = (
  instance: Omit<Instance, "application">
) =>
  Effect.gen(function*() {
    const { agent, agentId, journal, store } = instance
    const identity = yield* IdentityTokens.IdentityTokens
    /** Bookkeeping of the connection (which serves, the tools it listed): worth a warning, never a failure. */
    const noted = (what: string) => <E, R>(effect: Effect.Effect<void, E, R>) =>
      Effect.catchAllCause(effect, (cause) =>
        Effect.logWarning(`could not record the application's ${what}`, cause).pipe(Effect.annotateLogs({ agentId })))
    return yield* ApplicationConnection.make({
      agentId,
      toolsHash: () =>
        agent.toolsHash,
      saveTools: (tools, hash) =>
        journal.write(store.setApplicationTools(agentId, tools, hash)).pipe(
          Effect.zipRight(Effect.sync(() =>
            Object.assign(agent, { applicationTools: tools, toolsHash: hash })
          )),
          noted("tools")
        ),
      saveConnection: (connection) => noted("connection")(journal.write(store.setConnection(agentId, connection))),
      identity: ({ actor, origin }) => {
        const claims: IdentityTokens.Claims = {
          audience: ApplicationConnection.audience(agentId),
          subject: agent.config.subject,
          actor,
          context: agent.config.context,
          tenantId: agent.tenantId,
          agentId,
          origin
        }
        const payload = IdentityTokens.payloadOf(claims)
        return identity.sign(claims).pipe(
          Effect.map((token): Record<string, unknown> => ({ ...payload, token })),
          Effect.catchAll((error) =>
            Effect.as(
              Effect.logWarning("could not sign an identity token; the call carries the claims without one", error),
              payload
            )
          )
        )
      }
    })
  })

/** Starts an instance: claims the agent, reads it and its history, and opens its application connection. */
const start = Effect.gen(function*() {
  const agentId = (yield* Entity.CurrentAddress).entityId
  const shardingConfig = yield* ShardingConfig.ShardingConfig
  const runnerAddress = Option.match(shardingConfig.runnerAddress, {
    onNone: () => "local",
    onSome: RunnerReports.addressOf
  })
  const store = yield* AgentStore
  const journal = yield* Journal.make({ agentId, runnerAddress })
  const loaded = { agentId, journal, store }
  const state: Omit<Instance, "application"> = {
    ...loaded,
    runnerAddress,
    inputStore: yield* Inputs.InputStore,
    usage: yield* UsageLog.UsageLog,
    ledger: yield* Ledger.Ledger,
    drain: yield* Drain,
    traces: yield* TraceExport.TraceExport,
    agent: { ...yield* loadAgent(loaded) },
    history: yield* loadHistory(loaded),
    requests: new Requests(),
    streaming: new Streaming(),
    wakeup: yield* Queue.sliding<void>(1),
    turn: { releasing: false, aborting: false, fiber: undefined }
  }
  const instance: Instance = { ...state, application: yield* connectApplication(state) }
  return instance
})

/**
 * A turn's services: the three its type names, its parent span and whether the node exports spans. Each
 * span, fork and provided service inside a turn copies and compares the whole context, some 75 services on a
 * node; a turn takes the rest when its agent starts.
 */
const turnContext = Context.pick(
  Volumes.Volumes,
  ModelClient.ModelClient,
  Tools.Tools,
  Tracer.ParentSpan,
  NodeSpans.Exporting
)

const alone = <A, E>(
  turn: Effect.Effect<A, E, Volumes.Volumes | ModelClient.ModelClient | Tools.Tools>
): Effect.Effect<A, E, Volumes.Volumes | ModelClient.ModelClient | Tools.Tools> =>
  // In place of the context, not merged into it (which `Effect.provide` would do).
  Effect.mapInputContext(turn, turnContext)

/**
 * Keeps the entity alive while the runner stays busy past keepAliveAfter: `busy` when a spell of work begins,
 * `idle` when it ends. A timer rather than a fiber per spell: most spells are one short turn, which ends
 * before the keep-alive is asked and has none to end. Once asked, it is asked until it is recorded: a
 * keep-alive lost to a database outage let the cluster reap a busy entity as idle (a stateless run's after
 * 10 s), and a release that failed with it left its work to no one. Ends with the scope (the runner).
 */
const keepAliveWhileBusy = Effect.gen(function*() {
  const entity = yield* Effect.runtime<Sharding.Sharding | Entity.CurrentAddress>()
  const runFork = Runtime.runFork(entity)
  const ask = Effect.suspend(() => Entity.keepAlive(true)).pipe(
    Effect.sandbox,
    Effect.retry(Schedule.spaced("1 second"))
  )
  let timer: ReturnType<typeof setTimeout> | undefined
  let asking: Fiber.RuntimeFiber<unknown, unknown> | undefined
  /** Cancels the timer, and stops the asking if it began (true then). */
  const cancel = Effect.suspend(() => {
    clearTimeout(timer)
    timer = undefined
    const fiber = asking
    asking = undefined
    return fiber === undefined ? Effect.succeed(false) : Effect.as(Fiber.interrupt(fiber), true)
  })
  yield* Effect.addFinalizer(() => cancel)
  return {
    busy: () => {
      timer = setTimeout(() => {
        timer = undefined
        asking = runFork(ask)
      }, Duration.toMillis(keepAliveAfter))
    },
    // The runner's loop runs in a turn's context (see `runner`): the entity's is given where it is needed.
    idle: Effect.flatMap(
      cancel,
      (asked) => asked ? Effect.provide(Entity.keepAlive(false), entity.context) : Effect.void
    )
  }
})

/**
 * The runner: one request at a time, in arrival order. The entity is kept alive while the runner stays
 * busy (see keepAliveAfter); the cluster keeps that as a message, so when the node is lost, the next owner
 * of the shard starts the agent at once and it picks the work up. A node letting the agent go on purpose
 * ends the keep-alive (it would hold the shard until the termination timeout) and announces the release
 * instead (see the release finalizer).
 *
 * The runner never just stops: when another runner claimed the agent (Fenced), or a bug ended it, the next
 * message routed here claims the agent again and runs its open work from the journal; a Wake makes sure
 * there is one. Should the cluster place the agent elsewhere now, the Wake wakes it there instead.
 */
const runner = (instance: Instance, wake: Effect.Effect<unknown, unknown>) => {
  const { agentId, drain, journal, requests, turn } = instance
  const canStart = () => requests.pending.length > 0 && !drain.isDraining() && !turn.releasing
  const serving = (keeper: Effect.Effect.Success<typeof keepAliveWhileBusy>) =>
    Effect.gen(function*() {
      while (true) {
        yield* Queue.take(instance.wakeup)
        keeper.busy()
        // A draining node starts nothing new: open work stays journaled for the next owner.
        while (canStart()) {
          // Its turn gets the tools of an application still in its handshake; an abort meanwhile cancels it.
          yield* awaitApplication(instance, requests.pending[0]!)
          if (canStart()) yield* drain.track(runRequest(instance, requests.pending.shift()!))
        }
        yield* keeper.idle
      }
    })
  return Effect.gen(function*() {
    // The keep-alive keeps the tracer as it is.
    const keeper = yield* keepAliveWhileBusy
    // Set once for the loop rather than around each turn (each a set and a restore, a dozen steps): the turns
    // run in their own context, on their scheduler, and without spans while the node exports none.
    return yield* NodeSpans.untracedUnlessExporting(serving(keeper)).pipe(Effect.withScheduler(turnScheduler), alone)
  }).pipe(
    Effect.scoped,
    Effect.catchAllDefect((defect) =>
      (defect instanceof Fenced
        ? Effect.logWarning("another runner claimed the agent; this one claims it again if it still owns it")
        : DatabaseHealth.isUnreachable(defect)
        ? Effect.logWarning("the database went away under a turn; it resumes from the journal once it is back")
        : Effect.logError("the agent's runner failed; it starts again from the journal", Cause.die(defect))).pipe(
          Effect.annotateLogs({ agentId, epoch: journal.term().epoch }),
          Effect.zipRight(journal.supersede(defect instanceof Fenced)),
          Effect.zipRight(
            wake.pipe(
              Effect.timeout("5 seconds"),
              // Until one is answered: the journal may still be out of reach, and a Wake cut short by this
              // instance stopping (its shards let go while the database was away) must reach the next one.
              Effect.sandbox,
              Effect.retry({ schedule: Schedule.spaced("1 second"), times: 120 }),
              Effect.ignore,
              Effect.forkDaemon
            )
          )
        )
    )
  )
}

/** Whether `requestId` was answered (its response told) within `waitMillis`; true at once when not open. */
const awaitResponse = (instance: Instance, requestId: string, waitMillis: number) =>
  Effect.gen(function*() {
    // Listening before looking, so a response told in between is heard. Settled ones are remembered before
    // their response is told, while still the active request.
    const heard = yield* Deferred.make<boolean>()
    const { stop } = yield* Effect.orDie(
      instance.journal.term().log.listen(Option.none(), {
        entry: (entry) => {
          const frame = entry.data as { type?: string; id?: string } | null
          if (frame?.type === "response" && frame.id === requestId) Deferred.unsafeDone(heard, Exit.succeed(true))
        },
        close: () => Deferred.unsafeDone(heard, Exit.succeed(false))
      })
    )
    if (!instance.requests.isOpen(requestId)) {
      stop()
      return true
    }
    return yield* Deferred.await(heard).pipe(
      Effect.timeoutTo({
        duration: Duration.millis(waitMillis),
        onSuccess: (responded: boolean) => responded,
        onTimeout: () => false
      }),
      Effect.raceFirst(Effect.as(instance.drain.closed, false)),
      Effect.ensuring(Effect.sync(stop))
    )
  })

/**
 * An abort: prompts queued or steered are cancelled, the running turn is interrupted (its calls answered as
 * aborted), and a turn waiting on a person ends too: its inputs are cancelled, and no answer resumes it.
 */
const abort = (instance: Instance, requestId: string) =>
  Effect.gen(function*() {
    const { requests } = instance
    // Prompts accepted before the abort may not have reached this queue yet (see Arrivals).
    yield* loadOpenWork(instance, requestId)
    const cancelled = [...requests.pending, ...requests.steering]
    requests.pending.length = 0
    requests.steering = []
    for (const row of cancelled) {
      yield* settle(instance, row, { error: "cancelled by an abort request", code: "cancelled" })
    }
    const stopped = requests.active
    if (stopped !== null) {
      instance.turn.aborting = true
      // A turn still being set up has no fiber yet: it is interrupted as it starts, and answered here once
      // it has ended.
      if (instance.turn.fiber !== undefined) yield* Fiber.interrupt(instance.turn.fiber)
      else yield* awaitResponse(instance, stopped, abortSetupWait)
    }
    const inputs = yield* instance.journal.retrying(instance.inputStore.cancel(instance.agentId))
    yield* afterSettled(instance, inputs)
    return { cancelled: cancelled.map((row) => row.id), aborted: stopped, inputs: inputs.changed.map((row) => row.id) }
  })

/**
 * Answers to inputs: they settle, and the resume of each suspension answered is queued, also when this
 * answer repeats one given before (an answer whose reply was lost): it is run if it is not already.
 */
const answer = (instance: Instance, payload: typeof AnswerPayload.Type) =>
  Effect.gen(function*() {
    const { agentId, journal, store } = instance
    const settled = yield* instance.inputStore.answer(agentId, payload.answers, payload.by).pipe(
      Effect.retry({ schedule: Schedule.spaced("500 millis"), while: (error) => error instanceof PersistenceError }),
      Effect.catchIf((error): error is PersistenceError => error instanceof PersistenceError, Effect.die)
    )
    yield* afterSettled(instance, settled)
    const resumes: Array<RequestRow> = []
    for (const suspension of new Set(settled.inputs.map((row) => row.requestId))) {
      const found = yield* journal.retrying(store.getRequest(agentId, Inputs.resumeRequestId(suspension)))
      if (Option.isSome(found)) resumes.push(found.value)
    }
    yield* offer(instance, resumes)
    return { inputs: settled.inputs.map(Inputs.toInput), requests: resumes.map(toRecord) }
  })

/** A prompt reached the instance: queued, or steered into the running turn. Yields its row as known now. */
const prompt = (instance: Instance, payload: typeof PromptPayload.Type) =>
  Effect.gen(function*() {
    const { agentId, journal, requests, store } = instance
    // A row recorded before this term's claim may have run under an earlier owner since its sender wrote it
    // (a delivery tried again across a move): its state is read again. One recorded after the claim can only
    // have run here, which this instance remembers.
    const row = payload.request.startedAt > journal.term().ownership.claimedAt
      ? payload.request
      : Option.getOrElse(yield* journal.retrying(store.getRequest(agentId, payload.request.id)), () => payload.request)
    const steers = payload.whileRunning === "steer" && requests.active !== null && requests.active !== row.id &&
      row.state === "queued" && !requests.settled.has(row.id)
    if (steers) requests.steer(row)
    else yield* offer(instance, [row])
    return row
  })

// One client for the runner, not one per entity: the runner's messages to itself (Wake) go through it.
export const layer: Layer.Layer<
  never,
  never,
  | Sharding.Sharding
  | ShardingConfig.ShardingConfig
  | Drain
  | EventLog.LocalLogs
  | AgentStore
  | Inputs.InputStore
  | UsageLog.UsageLog
  | Ledger.Ledger
  | IdentityTokens.IdentityTokens
  | ModelClient.ModelClient
  | Volumes.Volumes
  | Tools.Tools
  | TraceExport.TraceExport
  | LocalAgents
> = Layer.unwrapEffect(Effect.map(entityClient, (makeClient) => {
  const behaviour = Effect.gen(function*() {
    const instance = yield* start
    const { agentId, application, drain, journal, requests } = instance
    const entityScope = yield* Effect.scope
    // A draining node tells the application: no new calls come on its connection.
    yield* Effect.forkScoped(Effect.zipRight(drain.begun, application.drain))
    // Stopped on purpose (drain, rebalance, idle): the next owner's log goes on from this one's, without a gap.
    // Open work is announced so another node wakes it; a draining runner announces only once its shards are
    // gone (layerReleaseAnnouncements), since a wake-up sent now would meet this runner on its way out.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const { epoch, log } = journal.term()
        yield* instance.store.release(agentId, epoch, yield* log.cursor, yield* log.buffered)
        if (drain.isDraining()) drain.released(agentId)
        else yield* instance.store.announceReleased([agentId])
      }).pipe(Effect.ignore)
    )
    const runnerBody = runner(instance, makeClient(agentId).Wake())
    // Kept to start the runner again after a reclaim, from a message handler.
    const running = Effect.provide(runnerBody, yield* Effect.context<Effect.Effect.Context<typeof runnerBody>>())
    let runnerFiber = yield* Effect.forkScoped(running)
    // Runs before the runner is interrupted (finalizers run in reverse): a turn moved with its shard
    // finishes its current step and hands on, rather than being cut and resumed as after a crash.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        instance.turn.releasing = true
        return Effect.repeat(Effect.sync(() => requests.active), {
          until: (active) => active === null,
          schedule: Schedule.spaced("50 millis")
        }).pipe(Effect.timeout(handOnTimeout), Effect.ignore)
      })
    )
    /**
     * A message reached this instance after it stopped serving the agent (Journal.supersede): the cluster
     * places the agent here, so it claims it again (Journal.reclaim), reloads it from the journal and runs
     * its open work, a cut turn resumed.
     *
     * The message that asked may be given up by its sender meanwhile (a Wake waits 5 s while the database
     * comes back), cutting the reclaim short: until one runs to its end (`reclaimed`), the next message
     * reclaims again. A reclaim cut after its claim, before its runner started, once left an instance that
     * no longer counted as superseded and had no runner: nothing ran the agent's work there again (a
     * stateless run stayed `running` for good after a database restart in the fault suite).
     */
    let reclaimed = true
    const reclaim = Effect.gen(function*() {
      reclaimed = false
      // The runner of the term that ended stops first. One whose fence another fiber's write found (an
      // application's connection recorded, say) is still in its turn, with the requests it queued then; once
      // the new term is claimed its writes carry the new epoch, and two runners ran one request twice (the
      // fault suite found a prompt twice in a history). Stopped first, it stays stopped if this is cut short.
      yield* Fiber.interrupt(runnerFiber)
      yield* journal.reclaim
      Object.assign(instance.agent, yield* loadAgent(instance))
      yield* reloadHistory(instance)
      requests.clear()
      yield* Effect.logInfo("claimed the agent again").pipe(
        Effect.annotateLogs({ agentId, epoch: journal.term().epoch })
      )
      // The runner and the mark together: a reclaim cut between them would start a second runner. A fiber forked
      // here inherits the region's flags: the runner itself is interruptible, or the entity could never close.
      yield* Effect.uninterruptible(Effect.flatMap(
        Effect.forkIn(Effect.interruptible(running), entityScope),
        (fiber) =>
          Effect.sync(() => {
            runnerFiber = fiber
            reclaimed = true
          })
      ))
      yield* loadOpenWork(instance)
    })
    const reclaiming = yield* Effect.makeSemaphore(1)
    const current = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.zipRight(
        reclaiming.withPermits(1)(
          Effect.suspend(() => journal.superseded() || !reclaimed ? reclaim : Effect.void)
        ),
        effect
      )
    yield* loadOpenWork(instance)
    const log = () => journal.term().log

    /**
     * A prompt handed over on this node (LocalAgents) is taken only by an instance the cluster still routes the
     * agent's messages to, and that still holds its claim. The cluster stops routing to an instance it lets go
     * before it closes its scope: on losing the shard (a rebalance, a drain, its locks lost with the database),
     * it lets the shard go first, and gains it again only once the instances there have closed; for idleness,
     * after its idle time without a message, so a prompt goes through the cluster when the last one that did is
     * half that old. An instance that must claim the agent again does so only for a message the cluster sent
     * it (a hand-over to a superseded instance once claimed the agent away from the live one).
     */
    let messagedAt = Date.now()
    const address = yield* Entity.CurrentAddress
    if (address.entityType === Agent.type) {
      const sharding = yield* Sharding.Sharding
      const direct = Duration.toMillis(agentMaxIdleTime) / 2
      const routedHere = () =>
        sharding.hasShardId(address.shardId) && Date.now() - messagedAt < direct && !journal.superseded() &&
        reclaimed
      yield* (yield* LocalAgents).register(agentId, (payload) =>
        // A reclaim under way has `reclaimed` false until it is done: the prompt waits for it as a message.
        Effect.suspend(() =>
          routedHere()
            ? Effect.as(Effect.flatMap(Effect.forkIn(prompt(instance, payload), entityScope), Fiber.join), true)
            : Effect.succeed(false)
        ))
    }

    return Agent.of({
      Prompt: ({ payload }) =>
        Effect.suspend(() => {
          messagedAt = Date.now()
          return current(Effect.map(prompt(instance, payload), toRecord))
        }),
      Abort: ({ payload }) => current(immediate(instance, payload, "abort", {}, abort(instance, payload.requestId))),
      Configure: ({ payload }) =>
        current(immediate(
          instance,
          payload,
          "configure",
          { changes: payload.changes },
          Effect.gen(function*() {
            instance.agent.config = applyChanges(instance.agent.config, payload.changes)
            yield* journal.write(instance.store.updateConfig(agentId, instance.agent.config))
            const declared = payload.tools
            if (declared !== undefined && declared.hash !== instance.agent.toolsHash) {
              yield* journal.write(instance.store.setApplicationTools(agentId, declared.tools, declared.hash))
              Object.assign(instance.agent, { applicationTools: declared.tools, toolsHash: declared.hash })
            }
            return { config: instance.agent.config }
          })
        )),
      Answer: ({ payload }) => current(answer(instance, payload)),
      ExpireInputs: () =>
        current(Effect.flatMap(
          journal.retrying(instance.inputStore.expire(agentId)),
          (settled) => afterSettled(instance, settled)
        )),
      Wake: () => current(loadOpenWork(instance)),
      Status: () =>
        current(Effect.map(Effect.suspend(() => log().cursor), (cursor) => ({
          cursor,
          running: requests.active !== null,
          connected: application.connected(),
          activeRequest: requests.active,
          queued: requests.pending.map((row) => row.id)
        }))),
      Snapshot: () =>
        current(Effect.map(Effect.suspend(() => log().cursor), (cursor) => {
          const { history } = instance
          const began = requests.active === null ? history.length : (requests.activeBegan ?? history.length)
          const partial = instance.streaming.partial
          return {
            cursor,
            requestId: requests.active,
            turn: [...history.slice(began), ...(partial === undefined ? [] : [partial])]
          }
        })),
      Watch: ({ payload }) =>
        Stream.unwrapScoped(
          Effect.map(
            current(Effect.suspend(() => log().subscribe(Option.fromNullable(payload.cursor)))),
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
      AwaitResponse: ({ payload }) => current(awaitResponse(instance, payload.requestId, payload.waitMillis)),
      Poll: ({ payload }) =>
        current(Effect.raceFirst(
          Effect.suspend(() => log().poll(payload.cursor, `${payload.waitMillis} millis`)),
          Effect.zipRight(drain.closed, Effect.suspend(() => log().poll(payload.cursor, 0)))
        ))
    })
  })
  // An agent waits a while for its next prompt; a stateless run ends with its one request, and is let go
  // soon after, so a steady stream of runs does not hold every ended one in memory.
  return Layer.merge(
    Agent.toLayer(behaviour, { concurrency: "unbounded", maxIdleTime: agentMaxIdleTime }),
    StatelessRun.toLayer(behaviour, { concurrency: "unbounded", maxIdleTime: "10 seconds" })
  )
}))

/**
 * Announces the agents a draining runner let go with open work, when this
 * layer closes: after the cluster runner it sits under has released its
 * shards, so the wake-ups other nodes send reach the next owners.
 */
export const layerReleaseAnnouncements: Layer.Layer<never, never, Drain | AgentStore> = Layer.scopedDiscard(
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
