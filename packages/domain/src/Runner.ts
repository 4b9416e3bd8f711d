/**
 * The cluster's runners as operators see them: each `npm start` process is
 * one, reached by the others at its RUNNER_ADDRESS.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

/**
 * active: owns shards and runs turns; draining: handing its agents on before
 * it exits (from the moment an operator asks); stopped: drained and gone
 * silent, as asked; unresponsive: its lease ran out without a drain (crashed,
 * paused or unreachable) and its shards are being taken over.
 */
export const RunnerState = Schema.Literal("active", "draining", "stopped", "unresponsive")
export type RunnerState = typeof RunnerState.Type

/**
 * Whether the runner reaches the database: reachable (it reported within its
 * lease, or it is the node answering); unreachable (the node answering cannot
 * reach it, or the runner is silent past its lease yet answers on its runner
 * address: alive but cut off from PostgreSQL); unknown (silent and not
 * answering: stopped, paused or gone).
 */
export const RunnerDatabase = Schema.Literal("reachable", "unreachable", "unknown")
export type RunnerDatabase = typeof RunnerDatabase.Type

export class Runner extends Schema.Class<Runner>("Runner")({
  address: Schema.String.annotations({ description: "host:port, as other runners reach it" }),
  state: RunnerState,
  healthy: Schema.Boolean.annotations({ description: "in the cluster's hash ring: it gets shards" }),
  startedAt: Schema.NullOr(Timestamp),
  lastHeartbeat: Schema.NullOr(Timestamp).annotations({ description: "its last lease renewal" }),
  shards: Schema.Number.annotations({ description: "shards it holds, as it last reported" }),
  agents: Schema.Number.annotations({ description: "agents active on it" }),
  turnsRunning: Schema.Number,
  mailboxDepth: Schema.Number.annotations({ description: "accepted requests waiting to run on its agents" }),
  reportedAt: Schema.NullOr(Timestamp).annotations({ description: "when it last reported these figures" }),
  database: RunnerDatabase.annotations({ description: "whether it reaches the database" })
}) {}

export class RunnerList extends Schema.Class<RunnerList>("RunnerList")({
  data: Schema.Array(Runner),
  healthy: Schema.Number.annotations({ description: "runners in the hash ring" }),
  shards: Schema.Number.annotations({ description: "shards in the cluster" }),
  leaseSeconds: Schema.Number.annotations({ description: "how long a silent runner keeps its shards" })
}) {}

export class DrainStarted extends Schema.Class<DrainStarted>("DrainStarted")({
  address: Schema.String,
  state: Schema.Literal("draining"),
  requestedAt: Timestamp
}) {}
