/**
 * Wakes agents with accepted but unfinished work, so nothing accepted is
 * lost: each agent another node let go with work open (announced on a
 * PostgreSQL channel, so it starts on its next owner at once), and every
 * second each agent no live runner holds, or with a request queued long
 * enough that its owner may never have heard of it (its sender recorded it,
 * then was lost before it told the owner). And every few seconds each agent
 * this runner owns with work open that it does not serve: an instance that
 * stopped while the database could not record its release. A wake-up that
 * fails is tried again later (see AgentStore.resumeFailed), never given up.
 */
import { DatabaseHealth } from "@agent-runtime/store"
import { ShardingConfig } from "@effect/cluster"
import type { Sharding } from "@effect/cluster"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { entityClient } from "./Agent.ts"
import { ownerAnswerLimit } from "./AgentEvents.ts"
import { AgentStore } from "./AgentStore.ts"
import { releasedChannel } from "./Announcements.ts"
import { Drain } from "./Drain.ts"
import * as EventLog from "./EventLog.ts"
import * as RunnerReports from "./RunnerReports.ts"

export interface Options {
  /** How long a runner may stay silent before its agents count as no one's (the cluster's shard lease). */
  readonly leaseSeconds: number
}

/**
 * How long a request may stay queued before its agent is woken to read it: far longer than a sender takes to
 * tell the owner, so only a long queue (read again, nothing new) or a request its owner never heard of is.
 */
const unheardSeconds = 30

/** How often the runner looks for agents it owns with open work but does not serve. */
const ownedInterval = Duration.seconds(5)

export const layer = (options: Options): Layer.Layer<
  never,
  never,
  | Sharding.Sharding
  | ShardingConfig.ShardingConfig
  | Drain
  | DatabaseHealth.DatabaseHealth
  | AgentStore
  | EventLog.LocalLogs
  | PgClient.PgClient
> =>
  Layer.scopedDiscard(Effect.gen(function*() {
    const store = yield* AgentStore
    const drain = yield* Drain
    const makeClient = yield* entityClient
    const sql = yield* PgClient.PgClient
    const health = yield* DatabaseHealth.DatabaseHealth
    const localLogs = yield* EventLog.LocalLogs
    const runnerAddress = Option.map((yield* ShardingConfig.ShardingConfig).runnerAddress, RunnerReports.addressOf)

    /**
     * Sends the agent's owner a Wake, so it loads its open work. Bounded: a
     * shard that has no owner yet makes the send wait, and a runner letting
     * the agent go may never answer.
     */
    const sendWake = (agentId: string) => makeClient(agentId).Wake().pipe(Effect.timeout(ownerAnswerLimit))

    /** Wakes one agent on its owner; a failure counts toward its resume backoff. */
    const wake = (agentId: string, resumeFailures: number) =>
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
     * Wakes an agent another runner let go with open work, on its next owner.
     * The first sends may meet the old runner on its way out: tried again
     * shortly, for about two leases, after which the periodic sweep stands
     * behind it. A draining node wakes nothing: it is letting its own agents go.
     */
    const wakeReleased = (agentId: string) =>
      Effect.suspend(() => drain.isDraining() ? Effect.void : sendWake(agentId)).pipe(
        Effect.retry({ schedule: Schedule.spaced("500 millis"), times: Math.ceil(options.leaseSeconds * 4) }),
        Effect.catchAllCause((cause) =>
          Effect.logInfo("a released agent did not wake yet; the periodic sweep will", cause).pipe(
            Effect.annotateLogs({ agentId })
          )
        )
      )

    const wakeOpenWork = Effect.flatMap(
      Effect.suspend(() =>
        drain.isDraining() ? Effect.succeed([]) : store.agentsToWake(options.leaseSeconds, unheardSeconds)
      ),
      (agents) =>
        Effect.forEach(agents, ({ agentId, resumeFailures }) => wake(agentId, resumeFailures), {
          concurrency: 16,
          discard: true
        })
    )

    /**
     * The agents recorded as this runner's, with work open, that it serves no term of: their instance stopped
     * (reaped, moved) while the database could not record the release, so they still look held by a live
     * runner to every other node's sweep. The Wake starts them again, here or on the shard's new owner.
     */
    const wakeOwnedUnserved = Option.match(runnerAddress, {
      onNone: () => Effect.void,
      onSome: (owner) =>
        Effect.flatMap(
          Effect.suspend(() => drain.isDraining() ? Effect.succeed([]) : store.ownedToWake(owner)),
          (agents) =>
            Effect.forEach(
              agents.filter(({ agentId }) => Option.isNone(localLogs.get(agentId))),
              ({ agentId, resumeFailures }) =>
                Effect.zipRight(
                  Effect.logInfo("waking an agent this runner owns with open work but does not serve").pipe(
                    Effect.annotateLogs({ agentId })
                  ),
                  wake(agentId, resumeFailures)
                ),
              { concurrency: 16, discard: true }
            )
        )
    })

    yield* sql.listen(releasedChannel).pipe(
      Stream.runForEach((agentId) => Effect.fork(wakeReleased(agentId))),
      // A listener whose connection died with the database hears nothing more, and never fails (the driver
      // drops that connection's errors): it listens anew, on a new connection, once the database is back.
      Effect.raceFirst(health.lost),
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("listening for released agents failed")),
      Effect.zipRight(Effect.sleep(Duration.seconds(1))),
      Effect.forever,
      Effect.forkScoped
    )
    // Every second: a turn too short to have asked the cluster to keep its entity alive is found here once its
    // runner's lease runs out (see AgentRuntime.keepAliveAfter). The query reads only the open requests.
    yield* wakeOpenWork.pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("waking agents failed")),
      Effect.repeat(Schedule.spaced(Duration.seconds(1))),
      Effect.forkScoped
    )
    yield* wakeOwnedUnserved.pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("waking this runner's unserved agents failed")),
      Effect.repeat(Schedule.spaced(ownedInterval)),
      Effect.forkScoped
    )
  }))
