/**
 * The journal writer of one agent instance: what makes "a crash loses all of
 * a step or none" and "a stale owner changes nothing" true.
 *
 * - **Claim and fence.** The instance claims the agent for its term (a new
 *   ownership epoch); every write carries the epoch, so once another runner
 *   claimed the agent, this one's writes are refused (`Fenced`) instead of
 *   mixing two turns, and the instance stops serving it (`supersede`).
 * - **Held writes.** A turn's start and its messages are held back to go with
 *   the turn's next write, in the same statement: the turn makes everything
 *   held durable before anything leaves the node (a model request, a tool
 *   call), so a crash loses all of them or none.
 * - **Events after their writes.** An event told while a write is held or on
 *   its way waits for it: a watcher never hears of a message the journal lost.
 * - **Outages waited out.** A statement is tried again while the database is
 *   out of reach; one PostgreSQL refused for its data is not (it would fail
 *   the same way for ever).
 */
import { DatabaseHealth } from "@agent-runtime/store"
import { NodeSpans } from "@agent-runtime/telemetry"
import { ShardingConfig } from "@effect/cluster"
import { Cause, Chunk, Duration, Effect, ExecutionStrategy, Exit, ParseResult, Scope } from "effect"
import { Fenced, PersistenceError } from "./AgentError.ts"
import { AgentStore, eventBlockSize, type Ownership, type Write, writeAll } from "./AgentStore.ts"
import * as EventLog from "./EventLog.ts"

/** One claim of the agent by this instance: its epoch, and the event log its watchers read. */
export interface Term {
  readonly ownership: Ownership
  readonly epoch: number
  readonly log: EventLog.EventLog
  /** Closed when the term ends: its log closes, so its watchers reconnect. */
  readonly scope: Scope.CloseableScope
}

export interface Journal {
  /**
   * A journal read or write, tried again every 0.5 s while the database cannot be reached: a turn waits out
   * an outage instead of failing, and a message handler never dies of one (the cluster would restart the
   * entity). Every statement may therefore run twice: each is idempotent or guarded by its state. One
   * PostgreSQL refused for its data (see `refused`) dies at once with its error. An outage is logged when it
   * begins, then at most once a minute per statement with how often it failed.
   */
  readonly retrying: <A, E>(effect: Effect.Effect<A, E>) => Effect.Effect<A>
  /** The term this instance serves under now. */
  readonly term: () => Term
  /**
   * Journals `write` (when given) with everything held, fenced by the term's epoch, then tells the events
   * that waited. A write refused as stale dies with `Fenced` and supersedes this instance. Answers the
   * database's clock as `write` was written (see `AgentStore.fenced`); undefined when nothing was, or when
   * the statement was sent again after a fault (the first may have been written, at another time).
   */
  readonly write: (write?: Write) => Effect.Effect<number | undefined>
  /** Holds the turn's start for its next write (see the module's note). */
  readonly holdStart: (write: Write) => void
  /** Holds the message at `index` for the turn's next write; a second one at the same index replaces it. */
  readonly holdMessage: (index: number, write: Write) => void
  /** Tells watchers `data` in the term's log, once every write held or on its way before it is durable. */
  readonly publish: (data: unknown) => Effect.Effect<void>
  /** `publish`, in the caller's own synchronous step. */
  readonly unsafePublish: (data: unknown) => void
  /** Whether this instance stopped serving the agent (see `supersede`) and must claim it again first. */
  readonly superseded: () => boolean
  /**
   * Stops serving the agent until `reclaim`: its log closes now, so watchers reconnect and reach the agent
   * wherever the cluster places it. `fenced` when another runner's claim was found.
   */
  readonly supersede: (fenced: boolean) => Effect.Effect<void>
  /**
   * Claims the agent again for a new term (its log in a fresh block of ids) and drops what was held, which was
   * never journaled. After a fence it first waits a shard lease from when the other claim was found: by then a
   * runner that lost its shards while cut off has noticed and let the agent go, so two runners never take it
   * from each other in turn.
   */
  readonly reclaim: Effect.Effect<void>
}

/** At most one warning this often for a journal statement waiting out an outage. */
const warningInterval = 60_000

/** A journal statement that could not reach the database is tried again this long after. */
const retryInterval = Duration.millis(500)

/**
 * Whether the journal refused a statement for good: PostgreSQL refused its data, or a row read back did not
 * decode. Trying it again would fail the same way.
 */
export const refused = (error: PersistenceError) =>
  DatabaseHealth.isPermanent(error) || ParseResult.isParseError(error.cause)

/**
 * `Journal.retrying` for `agentId`: see there. A loop on failure rather than `Effect.retry`, which sets up a
 * schedule and provides its iteration to the effect on every call, failed or not: a turn makes several
 * journal writes, and almost none fails.
 */
export const retrying = (agentId: string) => <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A> =>
  Effect.suspend(() => {
    let failures = 0
    let warnedAt = 0
    const attempt: Effect.Effect<A> = Effect.catchAll(effect, (error) => {
      if (!(error instanceof PersistenceError)) return Effect.die(error)
      if (refused(error)) {
        return Effect.zipRight(
          Effect.logError("the journal refused a write; it is not tried again", error.cause).pipe(
            Effect.annotateLogs({ agentId })
          ),
          Effect.die(error)
        )
      }
      failures++
      const warning = Date.now() - warnedAt < warningInterval ? Effect.void : Effect.suspend(() => {
        warnedAt = Date.now()
        return Effect.logWarning("the journal cannot be reached; trying again", error.cause).pipe(
          Effect.annotateLogs({ agentId, failures })
        )
      })
      return Effect.zipRight(warning, Effect.zipRight(Effect.sleep(retryInterval), attempt))
    })
    return attempt
  })

/**
 * Claims the agent for this instance (under `runnerAddress`) and returns its journal writer. Terms live in
 * the given scope (the entity's).
 */
export const make = (
  options: { readonly agentId: string; readonly runnerAddress: string }
): Effect.Effect<
  Journal,
  never,
  AgentStore | EventLog.LocalLogs | ShardingConfig.ShardingConfig | Scope.Scope
> =>
  Effect.gen(function*() {
    const { agentId, runnerAddress } = options
    const store = yield* AgentStore
    const localLogs = yield* EventLog.LocalLogs
    const shardingConfig = yield* ShardingConfig.ShardingConfig
    const instanceScope = yield* Effect.scope
    const journaled = retrying(agentId)

    const claimTerm = Effect.gen(function*() {
      const ownership = yield* journaled(store.claim(agentId, runnerAddress))
      const scope = yield* Scope.fork(instanceScope, ExecutionStrategy.sequential)
      const startCursor = yield* journaled(store.reserveEvents(agentId, ownership.continuesFrom ?? 0))
      const log = yield* EventLog.make({
        agentId,
        startCursor,
        continuesFrom: ownership.continuesFrom ?? undefined,
        inherited: ownership.inherited ?? undefined,
        reservation: {
          until: startCursor + eventBlockSize,
          extend: (until) => journaled(store.extendEvents(agentId, until))
        }
      }).pipe(Scope.extend(scope))
      yield* localLogs.register(agentId, log).pipe(Scope.extend(scope))
      return { ownership, epoch: ownership.epoch, log, scope } satisfies Term
    }).pipe(NodeSpans.withSpan("Journal.claim", () => ({ "agent.id": agentId })))
    let term = yield* claimTerm
    let superseded = false
    /** When another runner's claim was found (see `reclaim`). */
    let fencedAt: number | undefined

    const supersede = (fenced: boolean) =>
      Effect.suspend(() => {
        superseded = true
        if (fenced) fencedAt ??= Date.now()
        return Scope.close(term.scope, Exit.void)
      })
    const fencedNow = (write: Write) => {
      let sent = 0
      return journaled(Effect.suspend(() => {
        sent++
        return store.fenced(agentId, term.epoch, write)
      })).pipe(
        Effect.map((at) => sent === 1 ? at : undefined),
        Effect.tapDefect((cause) =>
          Cause.defects(cause).pipe(Chunk.some((defect) => defect instanceof Fenced)) ? supersede(true) : Effect.void
        ),
        // A span per statement sent: a turn's many `durable` calls with nothing held make none.
        NodeSpans.withSpan("Journal.write", () => ({ "agent.id": agentId }))
      )
    }

    let heldStart: Write | undefined
    const heldMessages = new Map<number, Write>()
    let heldEvents: Array<unknown> = []
    /** Held writes on their way to the database: events told meanwhile wait for them too. */
    let flushing = 0
    const holding = () => heldStart !== undefined || heldMessages.size > 0 || flushing > 0
    const publishAll = (events: ReadonlyArray<unknown>) => {
      for (const data of events) term.log.unsafePublish(data)
    }

    /**
     * Everything held goes in one statement with `write`; in two when the turn's start is held, as `write` may
     * change the same request (PostgreSQL changes a row once per statement).
     */
    const write = (next?: Write) =>
      Effect.suspend(() => {
        if (!holding() && heldEvents.length === 0) {
          return next === undefined
            ? Effect.succeed(undefined)
            : fencedNow(next)
        }
        const held = [...(heldStart === undefined ? [] : [heldStart]), ...heldMessages.values()]
        const statements = held.length === 0
          ? next === undefined ? [] : [next]
          : next === undefined
          ? [writeAll(held)]
          : heldStart === undefined
          ? [writeAll([...held, next])]
          : [writeAll(held), next]
        const waited = heldEvents
        heldStart = undefined
        heldMessages.clear()
        heldEvents = []
        flushing++
        // One statement nearly always: its time is the answer.
        const written = statements.length === 1
          ? fencedNow(statements[0]!)
          : Effect.reduce(statements, undefined as number | undefined, (_, statement) => fencedNow(statement))
        return Effect.flatMap(written, (at) => {
          publishAll(waited)
          return Effect.succeed(at)
        }).pipe(
          Effect.ensuring(Effect.sync(() => {
            flushing--
            if (holding() || heldEvents.length === 0) return
            // Told while these were written, with nothing held since: they need wait no longer.
            const since = heldEvents
            heldEvents = []
            publishAll(since)
          }))
        )
      })

    const unsafePublish = (data: unknown) => {
      if (holding()) heldEvents.push(data)
      else term.log.unsafePublish(data)
    }

    const reclaim = Effect.gen(function*() {
      // A runner that stopped for another reason (its database went away; it was paused past its lease) may
      // find another runner claimed the agent meanwhile: that is a fence too, and it waits as after one.
      if (fencedAt === undefined && (yield* journaled(store.epochOf(agentId))) !== term.epoch) fencedAt = Date.now()
      if (fencedAt !== undefined) {
        yield* Effect.sleep(Math.max(0, fencedAt + Duration.toMillis(shardingConfig.shardLockExpiration) - Date.now()))
      }
      yield* Scope.close(term.scope, Exit.void)
      term = yield* claimTerm
      heldStart = undefined
      heldMessages.clear()
      heldEvents = []
      superseded = false
      fencedAt = undefined
    })

    return {
      retrying: journaled,
      term: () => term,
      write,
      holdStart: (start) => {
        heldStart = start
      },
      holdMessage: (index, message) => {
        heldMessages.set(index, message)
      },
      publish: (data) => Effect.sync(() => unsafePublish(data)),
      unsafePublish,
      superseded: () => superseded,
      supersede,
      reclaim
    }
  })
