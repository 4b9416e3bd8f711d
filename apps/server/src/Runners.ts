/**
 * This node as a member of the cluster: its address and shards from the
 * configuration, and the agent package's `RunnerReports` (reports, operator
 * drains, ending a silent runner's sessions, whether the lease is held)
 * wired to this process, which an operator's drain sends SIGTERM.
 */
import { type Drain, RunnerReports } from "@agent-runtime/agent"
import type { DatabaseHealth } from "@agent-runtime/store"
import type { Runners, Sharding } from "@effect/cluster"
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Layer } from "effect"
import { ServerConfig } from "./ServerConfig.ts"

export const addressOf = (config: ServerConfig) => RunnerReports.addressOf(config.runnerAddress)

/** How every database session of this node names itself, so a stale runner's can be told apart. */
export const sessionName = (config: ServerConfig) => RunnerReports.sessionName(addressOf(config))

export const shardsPerGroup = 300

/** This node's `RunnerReports`, from its configuration. */
export const layer: Layer.Layer<
  RunnerReports.RunnerReports,
  SqlError,
  SqlClient.SqlClient | DatabaseHealth.DatabaseHealth | Sharding.Sharding | Drain.Drain | Runners.Runners | ServerConfig
> = Layer.unwrapEffect(
  Effect.map(ServerConfig, (config) =>
    RunnerReports.layer({
      address: addressOf(config),
      leaseSeconds: config.runnerLeaseSeconds,
      shardsPerGroup,
      // The way SIGTERM drains, so both take one path.
      drain: Effect.sync(() => process.kill(process.pid, "SIGTERM"))
    }))
)
