/**
 * This runner as a member of the cluster, in `runner_reports`. It reports
 * its figures (shards, agents, running turns, waiting requests) every
 * lease / 3, drains when an operator asks, and ends the database sessions
 * of a runner whose lease ran out: a paused or vanished process keeps its
 * sessions (and so its shard locks) open, and its shards could never move
 * otherwise. Should it come back, the ownership epoch refuses its writes.
 * It also knows whether this runner still holds its lease (a report written
 * within it), which readiness needs: a runner that cannot write its reports
 * has lost its shards. `AgentStore` reads the same reports to tell a live
 * owner from a silent one.
 */
import { ApiError, Runner } from "@agent-runtime/domain"
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { RunnerAddress, Runners as ClusterRunners, ShardId, Sharding } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { Drain } from "./Drain.ts"

/** How a runner is named in `runner_reports` and as an agent's owner: `host:port`. */
export const addressOf = (address: { readonly host: string; readonly port: number }) =>
  `${address.host}:${address.port}`

export interface Options {
  /** This runner's address, `host:port`. */
  readonly address: string
  /** A runner whose last report is older than this has lost its shards. */
  readonly leaseSeconds: number
  /** The shards of the default group, numbered from 1. */
  readonly shardsPerGroup: number
  /**
   * Drains this process when an operator asks (the app sends itself
   * SIGTERM, so both take one path). Not called while already draining.
   */
  readonly drain: Effect.Effect<void>
}

export class RunnerReports extends Context.Tag("@agent-runtime/agent/RunnerReports")<RunnerReports, {
  /** This runner's address, `host:port`. */
  readonly address: string
  /** Every runner in the ring or reported within ten minutes, with its figures and state. */
  readonly list: Effect.Effect<Runner.RunnerList, PersistenceError.PersistenceError>
  /** Asks the live runner at `address` to drain; fails when no runner there reported within its lease. */
  readonly requestDrain: (
    address: string
  ) => Effect.Effect<Runner.DrainStarted, ApiError.NotFound | PersistenceError.PersistenceError>
  /** Whether this runner's last report is within its lease: past it, the other runners take its shards. */
  readonly leaseHeld: () => boolean
}>() {}

/**
 * How every database session of the runner at `address` names itself
 * (pg_stat_activity.application_name), so `reap` finds a silent runner's.
 */
export const sessionName = (address: string) => `agent-runtime runner ${address}`

interface RunnerRow {
  readonly address: string
  readonly state: "active" | "draining" | null
  readonly startedAt: number | null
  readonly reportedAt: number | null
  readonly lastHeartbeat: number | null
  readonly inRing: boolean | null
  readonly shards: number | null
  readonly agents: number | null
  readonly turnsRunning: number | null
  readonly mailboxDepth: number | null
  readonly drainRequested: boolean | null
  readonly silent: boolean
}

/** Registers this runner, and reports and reaps in the background for as long as the scope lasts. */
export const make = (options: Options) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const sharding = yield* Sharding.Sharding
    const drain = yield* Drain
    const health = yield* DatabaseHealth.DatabaseHealth
    const cluster = yield* ClusterRunners.Runners
    const me = options.address
    const lease = options.leaseSeconds
    const shardIds = Array.from({ length: options.shardsPerGroup }, (_, i) => ShardId.make("default", i + 1))

    const drainSelf = Effect.suspend(() => {
      if (drain.isDraining()) return Effect.void
      return Effect.zipRight(Effect.logInfo("drain requested by the operator"), options.drain)
    })

    // A new life at this address: whatever an operator asked of the last one does not apply.
    yield* sql`
      INSERT INTO runner_reports (address, started_at, reported_at, state)
      VALUES (${me}, now(), now(), 'active')
      ON CONFLICT (address) DO UPDATE SET started_at = now(), reported_at = now(), state = 'active',
        drain_requested_at = NULL`
    /** When this runner last wrote its report: the other runners count its lease from it. */
    let reportedAt = Date.now()

    const report = Effect.gen(function*() {
      const shards = shardIds.filter((id) => sharding.hasShardId(id)).length
      const rows = yield* sql<{ drainRequested: boolean }>`
        UPDATE runner_reports SET reported_at = now(),
          state = ${drain.isDraining() ? "draining" : "active"},
          shards = ${shards},
          turns_running = ${drain.running()},
          agents = (SELECT count(*) FROM agents WHERE owner = ${me}),
          mailbox_depth = (SELECT count(*) FROM agent_requests r JOIN agents a ON a.id = r.agent_id
            WHERE a.owner = ${me} AND r.state = 'queued' AND r.steered_into IS NULL)
        WHERE address = ${me}
        RETURNING drain_requested_at IS NOT NULL AS drain_requested`
      reportedAt = Date.now()
      if (rows[0]?.drainRequested === true) yield* drainSelf
    })

    /** Ends the sessions of runners silent past their lease, so the shard locks they hold are freed. */
    const reap = Effect.gen(function*() {
      const ended = yield* sql<{ address: string; sessions: number }>`
        SELECT r.address, count(pg_terminate_backend(a.pid))::int AS sessions
        FROM runner_reports r JOIN pg_stat_activity a ON a.application_name = 'agent-runtime runner ' || r.address
        WHERE r.address <> ${me} AND r.reported_at < now() - make_interval(secs => ${lease})
          -- Only the silent process's own sessions: a new process at the same address opens its after that.
          AND a.backend_start < r.reported_at
        GROUP BY r.address`
      for (const runner of ended) {
        yield* Effect.logWarning("runner silent past its lease: ended its database sessions so its shards move").pipe(
          Effect.annotateLogs({ runner: runner.address, sessions: runner.sessions, leaseSeconds: lease })
        )
      }
    })

    yield* report.pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("reporting the runner failed")),
      Effect.repeat(Schedule.spaced(Duration.seconds(lease / 3))),
      Effect.forkScoped
    )
    yield* reap.pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("checking runner leases failed")),
      Effect.repeat(Schedule.spaced(Duration.seconds(1))),
      Effect.forkScoped
    )

    /**
     * Whether a runner silent past its lease is still alive: one that answers
     * on its runner address yet writes no reports cannot reach the database.
     */
    const databaseOf = (row: RunnerRow): Effect.Effect<Runner.RunnerDatabase> => {
      if (row.address === me) return Effect.sync(() => health.current().reachable ? "reachable" : "unreachable")
      if (!row.silent) return Effect.succeed("reachable")
      const colon = row.address.lastIndexOf(":")
      return cluster.ping(RunnerAddress.make(row.address.slice(0, colon), Number(row.address.slice(colon + 1)))).pipe(
        Effect.timeout(Duration.seconds(1)),
        Effect.match({ onFailure: () => "unknown" as const, onSuccess: () => "unreachable" as const })
      )
    }

    const list = Effect.gen(function*() {
      const rows = yield* sql<RunnerRow>`
        SELECT coalesce(r.address, c.address) AS address, r.state,
          floor(extract(epoch from r.started_at))::float8 AS started_at,
          floor(extract(epoch from r.reported_at))::float8 AS reported_at,
          floor(extract(epoch from c.last_heartbeat))::float8 AS last_heartbeat,
          (c.healthy AND c.last_heartbeat > now() - make_interval(secs => ${lease})) AS in_ring,
          r.shards, r.agents, r.turns_running, r.mailbox_depth, r.drain_requested_at IS NOT NULL AS drain_requested,
          coalesce(r.reported_at < now() - make_interval(secs => ${lease}), true) AS silent
        FROM runner_reports r FULL OUTER JOIN cluster_runners c ON c.address = r.address
        WHERE c.address IS NOT NULL OR r.reported_at > now() - interval '10 minutes'
        ORDER BY 1`
      const databases = yield* Effect.forEach(rows, databaseOf, { concurrency: "unbounded" })
      const data = rows.map((row, i) =>
        new Runner.Runner({
          address: row.address,
          // Draining from the moment an operator asks; silent after a drain, it stopped as asked (silent without
          // one, it may be stuck).
          state: row.silent
            ? row.state === "draining" || row.drainRequested ? "stopped" : "unresponsive"
            : row.drainRequested
            ? "draining"
            : row.state ?? "active",
          healthy: row.inRing === true,
          startedAt: row.startedAt,
          lastHeartbeat: row.lastHeartbeat,
          shards: row.silent ? 0 : row.shards ?? 0,
          agents: row.agents ?? 0,
          turnsRunning: row.turnsRunning ?? 0,
          mailboxDepth: row.mailboxDepth ?? 0,
          reportedAt: row.reportedAt,
          database: databases[i]!
        })
      )
      return new Runner.RunnerList({
        data,
        healthy: data.filter((runner) => runner.healthy).length,
        shards: options.shardsPerGroup,
        leaseSeconds: lease
      })
    }).pipe(PersistenceError.PersistenceError.refail)

    const requestDrain = (address: string) =>
      Effect.gen(function*() {
        const rows = yield* sql<{ requestedAt: number }>`
          UPDATE runner_reports SET drain_requested_at = coalesce(drain_requested_at, now())
          WHERE address = ${address} AND reported_at > now() - make_interval(secs => ${lease})
          RETURNING floor(extract(epoch from drain_requested_at))::float8 AS requested_at`.pipe(
          PersistenceError.PersistenceError.refail
        )
        if (rows.length === 0) {
          return yield* new ApiError.NotFound({ error: `no live runner at ${address}` })
        }
        if (address === me) yield* drainSelf
        return new Runner.DrainStarted({ address, state: "draining", requestedAt: rows[0]!.requestedAt })
      })

    const leaseHeld = () => Date.now() - reportedAt < lease * 1000

    return RunnerReports.of({ address: me, list, requestDrain, leaseHeld })
  })

export const layer = (
  options: Options
): Layer.Layer<
  RunnerReports,
  SqlError,
  SqlClient.SqlClient | Sharding.Sharding | Drain | DatabaseHealth.DatabaseHealth | ClusterRunners.Runners
> => Layer.scoped(RunnerReports, make(options))
