/**
 * The webhook events of a run: run.started when a node begins it (again,
 * with `resumes`, when another node takes it over), run.completed or
 * run.failed when it settles. They are written by the journal statement
 * that makes the change (see `AgentStore`), so each is sent exactly when
 * the change happened.
 */
import { type Run, Webhook } from "@agent-runtime/domain"
import type { Outbox } from "@agent-runtime/webhooks"
import type { Statement } from "@effect/sql"
import { Schema } from "effect"
import { errorOf, type StoredOutcome } from "./Agent.ts"
import type { RequestRow } from "./AgentStore.ts"

const isRunMethod = Schema.is(Webhook.RunMethod)
/** Requests that are runs: a steer is a prompt into a running turn. Abort, configure and status are not. */
const isRun = (row: RequestRow) => isRunMethod(row.method) || row.method === "steer"

/** The fields every run event carries. A steered prompt reports as the prompt it is. */
const common = (row: RequestRow) => {
  const input = row.input as {
    readonly actor?: string
    readonly from?: { readonly id: string }
    readonly metadata?: Record<string, string>
  }
  const actor = input.actor ?? input.from?.id
  return {
    agentId: row.agentId,
    requestId: row.id,
    method: isRunMethod(row.method) ? row.method : "prompt",
    ...(actor === undefined ? {} : { actor }),
    ...(input.metadata === undefined ? {} : { metadata: input.metadata })
  }
}

/** run.started (the store adds `resumes` when a node took over a turn whose node was lost). */
export const started = (tenantId: string, row: RequestRow): Outbox.NewEvent => ({
  tenantId,
  type: "run.started",
  data: common(row)
})

/**
 * run.completed or run.failed for the request as settled with `outcome`
 * (none for a request that is no run); `usage` is the jsonb object
 * expression `{usage}` of its usage (`UsageLog.runUsage`).
 */
export const ended = (
  tenantId: string,
  row: RequestRow,
  outcome: Record<string, unknown>,
  usage: Statement.Fragment,
  steeredInto: string | undefined
): Outbox.NewEvent | undefined => {
  if (!isRun(row)) return undefined
  const into = steeredInto ?? row.steeredInto
  const error = errorOf(outcome as StoredOutcome)
  const result = (outcome.result ?? {}) as {
    readonly replyIndex?: number
    readonly messages?: number
    readonly inputs?: ReadonlyArray<{ readonly id: string }>
    readonly stopped?: Run.StoppedReason
  }
  const shared = { ...common(row), ...(into === null ? {} : { steeredInto: into }) }
  if (error !== undefined) {
    return {
      tenantId,
      type: "run.failed",
      data: { ...shared, error, ...(outcome.uncertain === true ? { uncertain: true } : {}) },
      merge: usage
    }
  }
  return {
    tenantId,
    type: "run.completed",
    data: {
      ...shared,
      ...(result.stopped === undefined ? {} : { stopped: result.stopped }),
      ...(result.inputs === undefined ? {} : { inputIds: result.inputs.map((input) => input.id) }),
      ...(result.replyIndex === undefined ? {} : { replyIndex: result.replyIndex }),
      ...(result.messages === undefined ? {} : { messageCount: result.messages })
    },
    merge: usage
  }
}
