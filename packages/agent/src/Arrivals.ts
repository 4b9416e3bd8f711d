/**
 * Requests recorded anywhere in the cluster, queued by their agent's owner:
 * the statement that records a prompt announces its row on a PostgreSQL
 * channel (`Announcements.queuedChannel`), every node listens, and the node
 * holding the agent's shard hands the row to the agent (to its instance here,
 * see LocalAgents, else by a local message). The node that accepted the
 * prompt answers once its statement commits, and sends no message: a turn
 * reached through any node costs what it costs through its owner.
 *
 * Announcements arrive in commit order, so prompts one client sends one after
 * another are queued in that order. What a node cannot have heard it reads:
 * once its listening is sure (again), every queued request of the shards it
 * holds; once it gains a shard, that shard's. Both come before any later
 * announcement for the same agents. A row no one hears otherwise (its owner
 * failed to queue it) is found by the wake-up sweep (Wakeups).
 */
import type { Run } from "@agent-runtime/domain"
import type { DatabaseHealth } from "@agent-runtime/store"
import { EntityId, ShardId, Sharding, ShardingConfig } from "@effect/cluster"
import type { PgClient } from "@effect/sql-pg"
import { Deferred, Duration, Effect, Either, Layer, Option, Schedule } from "effect"
import { Agent, entityClient } from "./Agent.ts"
import { ownerAnswerLimit } from "./AgentEvents.ts"
import { AgentStore, fromJsonRow, type RequestRow } from "./AgentStore.ts"
import { queuedChannel } from "./Announcements.ts"
import { Drain } from "./Drain.ts"
import * as ProbedChannel from "./internal/probedChannel.ts"
import { LocalAgents } from "./LocalAgents.ts"

/** A request announced on `queuedChannel`: its row, or its seq when the row was too large to carry. */
export interface Announcement {
  readonly agentId: string
  readonly request: Either.Either<RequestRow, number>
  readonly whileRunning: Run.WhileRunning | undefined
}

export const announcementOf = (payload: string): Announcement => {
  const parsed = JSON.parse(payload) as {
    readonly request?: Record<string, unknown>
    readonly agentId?: string
    readonly seq?: number
    readonly whileRunning: Run.WhileRunning | null
  }
  const whileRunning = parsed.whileRunning ?? undefined
  if (parsed.request === undefined) {
    return { agentId: parsed.agentId!, request: Either.left(parsed.seq!), whileRunning }
  }
  const request = fromJsonRow(parsed.request)
  return { agentId: request.agentId, request: Either.right(request), whileRunning }
}

/** How often a node looks for shards it gained, to read what their agents have queued. */
const gainedShardsEvery = Duration.seconds(1)

export const layer: Layer.Layer<
  never,
  never,
  | Sharding.Sharding
  | ShardingConfig.ShardingConfig
  | Drain
  | DatabaseHealth.DatabaseHealth
  | AgentStore
  | PgClient.PgClient
  | LocalAgents
> = Layer.scopedDiscard(Effect.gen(function*() {
  const sharding = yield* Sharding.Sharding
  const config = yield* ShardingConfig.ShardingConfig
  const store = yield* AgentStore
  const drain = yield* Drain
  const makeClient = yield* entityClient
  const local = yield* LocalAgents
  const scope = yield* Effect.scope

  const group = Agent.getShardGroup(EntityId.make(""))
  const shardOf = (agentId: string) => sharding.getShardId(EntityId.make(agentId), group)
  const allShards = Array.from({ length: config.shardsPerGroup }, (_, i) => ShardId.make(group, i + 1))
  const localShards = () => new Set(allShards.filter(sharding.hasShardId).map((shard) => shard.id))

  // Shards whose queued requests this node has read since it held them and its listening was sure.
  const caughtUp = new Set<number>()
  let sure = false
  // One step at a time: what is read on catching up is queued before anything heard after it.
  const steps = yield* Effect.makeSemaphore(1)

  /** Per agent, the end of its last hand-over: the next waits for it, so its requests queue in order. */
  const tails = new Map<string, Deferred.Deferred<void>>()
  const handOver = (agentId: string, row: Effect.Effect<Option.Option<RequestRow>>, whileRunning?: Run.WhileRunning) =>
    Effect.gen(function*() {
      const previous = tails.get(agentId)
      const done = yield* Deferred.make<void>()
      tails.set(agentId, done)
      yield* Effect.forkIn(
        Effect.gen(function*() {
          if (previous !== undefined) yield* Deferred.await(previous)
          const request = yield* row
          if (Option.isNone(request) || drain.isDraining()) return
          const payload = { request: request.value, ...(whileRunning === undefined ? {} : { whileRunning }) }
          // Only the message is bounded (an owner elsewhere may not answer): a bound is a race of two fibers,
          // and the instance here takes the prompt as it would the message, or declines at once.
          if (yield* local.prompt(agentId, payload)) return
          yield* makeClient(agentId).Prompt(payload).pipe(Effect.timeout(ownerAnswerLimit))
        }).pipe(
          // The agent moved on meanwhile (its next owner reads the row on gaining the shard), or its owner
          // failed it: the wake-up sweep finds the row still queued.
          Effect.catchAllCause((cause) =>
            Effect.logDebug("a queued request was not handed to its agent", cause).pipe(
              Effect.annotateLogs({ agentId })
            )
          ),
          Effect.ensuring(Effect.suspend(() => {
            if (tails.get(agentId) === done) tails.delete(agentId)
            return Deferred.succeed(done, void 0)
          }))
        ),
        scope
      )
    })

  /** Reads the queued requests of `shards` and hands each to its agent; from now on they are caught up. */
  const catchUp = (shards: ReadonlySet<number>) =>
    Effect.gen(function*() {
      if (shards.size === 0) return
      const rows = yield* store.queuedRequests
      for (const shard of shards) caughtUp.add(shard)
      for (const row of rows) {
        if (shards.has(shardOf(row.agentId).id)) yield* handOver(row.agentId, Effect.succeedSome(row))
      }
    }).pipe(
      Effect.catchAllCause((cause) =>
        // Not caught up: tried again within a second, or the sweep finds the rows.
        Effect.logWarning("reading queued requests of gained shards failed", cause)
      )
    )

  /** Shards held now and not caught up are read; shards let go are forgotten. */
  const gainedShards = Effect.suspend(() => {
    if (!sure) return Effect.void
    const held = localShards()
    for (const shard of caughtUp) if (!held.has(shard)) caughtUp.delete(shard)
    const gained = new Set<number>()
    for (const shard of held) if (!caughtUp.has(shard)) gained.add(shard)
    return catchUp(gained)
  })

  const hear = (payload: string) =>
    Effect.gen(function*() {
      const announcement = yield* Effect.try(() => announcementOf(payload))
      const shard = shardOf(announcement.agentId)
      if (!sharding.hasShardId(shard)) {
        caughtUp.delete(shard.id)
        return
      }
      // A shard gained since the last look is read first, so its rows queue before the one heard now.
      if (!caughtUp.has(shard.id)) yield* gainedShards
      const row = Either.isRight(announcement.request)
        ? Effect.succeedSome(announcement.request.right)
        : store.requestAt(announcement.agentId, announcement.request.left).pipe(
          Effect.orElseSucceed(() => Option.none<RequestRow>())
        )
      yield* handOver(announcement.agentId, row, announcement.whileRunning)
    }).pipe(
      // Not one of ours: the listening goes on.
      Effect.catchTag("UnknownException", (error) => Effect.logWarning("an unreadable queued announcement", error))
    )

  yield* ProbedChannel.listen(queuedChannel, "queued requests", {
    sure: steps.withPermits(1)(Effect.suspend(() => {
      sure = true
      caughtUp.clear()
      return gainedShards
    })),
    heard: (payloads) => steps.withPermits(1)(Effect.forEach(payloads, hear, { discard: true })),
    lost: () => {
      sure = false
      caughtUp.clear()
    }
  })

  yield* steps.withPermits(1)(gainedShards).pipe(
    Effect.repeat(Schedule.spaced(gainedShardsEvery)),
    Effect.forkScoped
  )
}))
