/**
 * What a turn may do to its agent, as `Turn.TurnHooks`, for one request run
 * by an entity instance: its messages held for the journal's next write, its
 * tool calls journaled before they are sent, its events told after what they
 * follow, its inputs recorded, its budget checked.
 */
import { Ledger } from "@agent-runtime/billing"
import { Effect, Option } from "effect"
import type { RequestRow } from "../AgentStore.ts"
import * as Inputs from "../Inputs.ts"
import type * as Turn from "../Turn.ts"
import { afterSettled, askInputs, frame, type Instance, overBudget } from "./instance.ts"
import { setEntry } from "./modelContext.ts"

/**
 * A turn's agent time on this node, metered as it runs: each tool call's result is written with a charge for
 * the time since the last one (`since`, from `performance.now()`), and the turn's end with the rest, so a turn
 * that moves on has been charged for this node's time up to its last tool call. Fractions of a millisecond
 * count: the ledger adds them up exactly.
 */
export interface Meter {
  since: number
}

export const hooksFor = (
  instance: Instance,
  row: RequestRow,
  asker: string | undefined,
  meter: Meter
): Turn.TurnHooks => {
  const { agent, agentId, history, inputStore, journal, ledger, requests, store } = instance
  /** What a tool call's result is charged: its web search, and the agent time since the last charge. */
  const chargeFor = (result: { readonly charge?: { readonly webSearch?: number } }) => {
    if (ledger.knownUnbilled(agent.tenantId)) return undefined
    const now = performance.now()
    const activeMs = now - meter.since
    meter.since = now
    const agentTime = Ledger.agentTimeCharge(ledger.rates, activeMs)
    const webSearch = result.charge?.webSearch ?? 0
    return activeMs + webSearch > 0 ? { tenantId: agent.tenantId, agentTime, activeMs, webSearch } : undefined
  }
  return {
    takeSteered: Effect.suspend(() => {
      const now = requests.takeSteered()
      return now.length === 0
        ? Effect.succeed([])
        : Effect.as(
          journal.write(store.markSteered(agentId, now.map((steered) => steered.id), row.id)),
          now.map((steered) => ({ requestId: steered.id, ...(steered.input as any) }))
        )
    }),
    toolStarted: (toolCallId, tool) => journal.write(store.startToolCall(agentId, row.id, toolCallId, tool)),
    toolFinished: (toolCallId, result) =>
      Effect.suspend(() => journal.write(store.finishToolCall(agentId, toolCallId, result, chargeFor(result)))),
    sentToolCalls: journal.retrying(store.toolCalls(agentId, row.id)),
    aborting: () => instance.turn.aborting,
    handingOff: () => instance.turn.releasing || instance.drain.isDraining(),
    // A prepaid tenant's spent credit stops the turn before its next model request, as a spend limit does.
    overBudget: Effect.flatMap(
      journal.retrying(instance.ledger.exhausted(agent.tenantId)),
      (spent) => Option.isSome(spent) ? Effect.succeed(true) : overBudget(instance, agentId, agent.config, row)
    ),
    emit: frame(instance, row.id),
    append: (index, message) =>
      Effect.sync(() => {
        journal.holdMessage(index, store.appendMessage(agentId, index, row.id, message))
        setEntry(history, index, message)
      }),
    durable: journal.write(),
    historySize: () => history.length,
    history: () => history,
    askInputs: (asks) => askInputs(instance, row, asker, asks),
    inputsFor: (toolCallIds, supersede) =>
      Effect.gen(function*() {
        if (supersede) {
          yield* afterSettled(instance, yield* journal.retrying(inputStore.supersede(agentId, toolCallIds)))
        }
        const found = yield* journal.retrying(inputStore.forCalls(agentId, toolCallIds))
        const earlier = (row: Inputs.InputRow): Turn.Earlier => ({
          input: Inputs.toInput(row),
          resume: Inputs.resumeOf(row)
        })
        return new Map([...found].map(([toolCallId, row]) => [toolCallId, earlier(row)]))
      })
  }
}
