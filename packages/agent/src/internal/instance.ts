/**
 * One agent entity instance's state, shared by its message handlers and its
 * runner fiber (AgentRuntime), and the steps they share: queueing requests in
 * arrival order, settling them, telling watchers, and checking budgets.
 */
import { Ledger } from "@agent-runtime/billing"
import { Input } from "@agent-runtime/domain"
import type { UsageLog } from "@agent-runtime/models"
import { Storable } from "@agent-runtime/store"
import type { TraceExport } from "@agent-runtime/telemetry"
import type { Context, Fiber, Types } from "effect"
import { Effect, Option, Queue } from "effect"
import { type StoredOutcome, toOutcome, toRecord } from "../Agent.ts"
import type { AgentConfig, AgentRow, AgentStore, RequestRow } from "../AgentStore.ts"
import type * as ApplicationConnection from "../ApplicationConnection.ts"
import type { Drain } from "../Drain.ts"
import * as Inputs from "../Inputs.ts"
import type * as Journal from "../Journal.ts"
import * as RunEvents from "../RunEvents.ts"
import type * as Turn from "../Turn.ts"
import { replaceEntries } from "./modelContext.ts"

/** How many settled request ids an instance remembers, so a late message cannot queue one again. */
const rememberedSettled = 1024

/**
 * The requests an instance knows: accepted ones not yet run (in arrival order), the one running, prompts
 * steered into it (waiting for its next step, and taken), and the ids it settled lately.
 */
export class Requests {
  pending: Array<RequestRow> = []
  steering: Array<RequestRow> = []
  taken: Array<RequestRow> = []
  active: string | null = null
  /** Where the running turn began in history. */
  activeBegan: number | undefined
  /**
   * Requests this instance settled, most recent last: a row read before it settled (by a Wake, or a Prompt
   * racing the runner) must not run it again.
   */
  readonly settled = new Set<string>()

  remember(id: string) {
    this.settled.add(id)
    if (this.settled.size > rememberedSettled) this.settled.delete(this.settled.values().next().value!)
  }

  /** Whether the request is queued, running or steered here and not settled. */
  isOpen(id: string) {
    return !this.settled.has(id) &&
      (this.active === id ||
        [this.pending, this.steering, this.taken].some((rows) => rows.some((row) => row.id === id)))
  }

  /** Queues a request this instance does not know yet; whether it did. */
  enqueue(row: RequestRow) {
    const known = (open: RequestRow) => open.id === row.id
    if (
      row.state === "completed" || this.settled.has(row.id) || this.active === row.id || this.pending.some(known) ||
      this.steering.some(known) || this.taken.some(known)
    ) return false
    this.pending.push(row)
    this.pending.sort((a, b) => a.seq - b.seq)
    return true
  }

  /** Steers a queued prompt into the running turn (it may be queued already: a Wake read it first). */
  steer(row: RequestRow) {
    const queued = this.pending.findIndex((open) => open.id === row.id)
    if (queued !== -1) this.pending.splice(queued, 1)
    if (!this.steering.some((open) => open.id === row.id) && !this.taken.some((open) => open.id === row.id)) {
      this.steering.push(row)
    }
  }

  /** The steered prompts for the running turn's next step; they count as taken from now on. */
  takeSteered() {
    const now = this.steering
    this.steering = []
    this.taken = this.taken.concat(now)
    return now
  }

  /** After a turn: steered prompts it did not reach run as their own turns. */
  endTurn() {
    this.taken = []
    this.pending.unshift(...this.steering)
    this.pending.sort((a, b) => a.seq - b.seq)
    this.steering = []
  }

  /** Forgets all open work (a reclaim reads it again from the journal). */
  clear() {
    this.pending.length = 0
    this.steering = []
    this.taken = []
  }
}

/** The assistant message streaming now, rebuilt from its deltas, for snapshots. */
export class Streaming {
  partial: { role: "assistant"; content: Array<Record<string, unknown>> } | undefined

  track(event: Record<string, any>) {
    if (event.type === "message_start" && event.message?.role === "assistant") {
      this.partial = { role: "assistant", content: [] }
    } else if (event.type === "message_end" || event.type === "message_retracted") this.partial = undefined
    else if (event.type === "message_update" && this.partial !== undefined) {
      const delta = event.assistantMessageEvent
      const field = delta.type === "text_delta" ? "text" : delta.type === "thinking_delta" ? "thinking" : undefined
      if (field !== undefined) {
        const part = this.partial.content[delta.contentIndex] ??= { type: field, [field]: "" }
        part[field] = String(part[field] ?? "") + delta.delta
      }
    }
  }
}

export interface Instance {
  readonly agentId: string
  readonly runnerAddress: string
  readonly store: Context.Tag.Service<typeof AgentStore>
  readonly inputStore: Context.Tag.Service<typeof Inputs.InputStore>
  readonly usage: Context.Tag.Service<typeof UsageLog.UsageLog>
  readonly ledger: Context.Tag.Service<typeof Ledger.Ledger>
  readonly drain: Context.Tag.Service<typeof Drain>
  readonly traces: Context.Tag.Service<typeof TraceExport.TraceExport>
  readonly journal: Journal.Journal
  /** The agent as last read or configured here. */
  readonly agent: Types.Mutable<AgentRow>
  /** The agent's history, as journaled by this instance's turns. */
  readonly history: Array<Turn.StoredMessage>
  readonly requests: Requests
  readonly streaming: Streaming
  readonly application: ApplicationConnection.ApplicationConnection
  /** Offered when there is work for the runner. */
  readonly wakeup: Queue.Queue<void>
  readonly turn: {
    /** The cluster is moving the agent (rebalance, drain): the running turn stops after its step. */
    releasing: boolean
    /** An abort request is stopping the running turn (rather than its node stopping). */
    aborting: boolean
    fiber: Fiber.RuntimeFiber<Turn.TurnOutcome> | undefined
  }
}

/** Reads the agent's row again. */
export const loadAgent = (instance: Pick<Instance, "agentId" | "journal" | "store">) =>
  Effect.map(
    instance.journal.retrying(instance.store.findById(instance.agentId)),
    Option.getOrThrowWith(() => new Error(`agent ${instance.agentId} does not exist`))
  )

/** Reads the agent's history again. */
export const loadHistory = (instance: Pick<Instance, "agentId" | "journal" | "store">) =>
  Effect.map(
    instance.journal.retrying(instance.store.messages(instance.agentId)),
    (rows) => rows.map((row) => row.message as Turn.StoredMessage)
  )

/** Reads the agent's history again into the instance's. */
export const reloadHistory = (instance: Pick<Instance, "agentId" | "journal" | "store" | "history">) =>
  Effect.map(loadHistory(instance), (entries) => replaceEntries(instance.history, entries))

/** Tells watchers an event of the request's run (after any write it follows: see Journal.publish). */
export const frame = (instance: Instance, requestId: string) => (event: Record<string, unknown>) =>
  Effect.sync(() => {
    instance.streaming.track(event)
    instance.journal.unsafePublish({ type: "event", requestId, event })
  })

/** Queues the requests this instance does not know yet and wakes the runner when any was new. */
export const offer = (instance: Instance, rows: Iterable<RequestRow>) =>
  Effect.suspend(() => {
    let added = false
    for (const row of rows) added = instance.requests.enqueue(row) || added
    return added ? Queue.offer(instance.wakeup, void 0) : Effect.void
  })

/** Queues the journal's open requests this instance does not know yet, but `except`. */
export const loadOpenWork = (instance: Instance, except?: string) =>
  Effect.flatMap(
    instance.journal.retrying(instance.store.openRequests(instance.agentId)),
    (rows) => offer(instance, rows.filter((row) => row.id !== except))
  )

/**
 * Ends a request with its outcome and tells watchers. `activeMs`: how long its turn ran here, charged to a
 * prepaid tenant as agent time in the statement that ends it (so once, whoever ends it).
 */
export const settle = (
  instance: Instance,
  row: RequestRow,
  outcome: Record<string, unknown>,
  steeredInto?: string,
  activeMs?: number
) =>
  Effect.gen(function*() {
    const { agent, agentId, journal, ledger, usage } = instance
    const report = RunEvents.ended(agent.tenantId, row, outcome, usage.runUsage(agentId, row.id), steeredInto)
    const charge = activeMs === undefined || ledger.knownUnbilled(agent.tenantId)
      ? undefined
      : { tenantId: agent.tenantId, agentTime: Ledger.agentTimeCharge(ledger.rates, activeMs), activeMs }
    const endedAt = yield* journal.write(
      instance.store.complete(agentId, row.id, outcome, report, steeredInto, charge)
    )
    instance.requests.remember(row.id)
    // Only a queued or running request is settled here, so the outcome written is this one; and the row as
    // the statement left it is known here when the statement's time is (its text made storable as written).
    yield* journal.term().log.publish(
      { type: "response", id: row.id, outcome: toOutcome(outcome as StoredOutcome) },
      endedAt === undefined ? undefined : {
        ...row,
        state: "completed",
        outcome: Storable.value(outcome),
        steeredInto: steeredInto ?? row.steeredInto,
        endedAt
      }
    )
  })

/** Inputs that settled are told to watchers; a suspension they settled resumes as a queued request. */
export const afterSettled = (instance: Instance, settled: Inputs.Settled) =>
  Effect.gen(function*() {
    for (const row of settled.changed) {
      yield* frame(instance, row.requestId)({
        type: "input_resolved",
        inputId: row.id,
        toolCallId: row.toolCallId,
        kind: row.kind,
        state: row.state
      })
    }
    yield* offer(instance, settled.resumes)
  })

/** Records a request that takes effect at once (abort, configure) and settles it with what `apply` did. */
export const immediate = (
  instance: Instance,
  payload: { readonly requestId: string; readonly fingerprint: string },
  method: string,
  input: Record<string, unknown>,
  apply: Effect.Effect<Record<string, unknown>>
) =>
  Effect.gen(function*() {
    const { agentId, journal, store } = instance
    const row = yield* journal.retrying(store.insertRequest({
      agentId,
      id: payload.requestId,
      method,
      fingerprint: payload.fingerprint,
      input
    }))
    if (row.state === "completed" || row.fingerprint !== payload.fingerprint) return toRecord(row)
    yield* settle(instance, row, { result: yield* apply })
    return toRecord(Option.getOrThrow(yield* journal.retrying(store.getRequest(agentId, row.id))))
  })

/**
 * Whether a spend limit is reached: the agent's, its run's, or (for a sub-agent) those of each agent and run
 * above it. A limit counts what the sub-agents below it spent.
 */
export const overBudget = (
  instance: Instance,
  id: string,
  config: AgentConfig,
  row: RequestRow
): Effect.Effect<boolean> =>
  Effect.gen(function*() {
    const { journal, store, usage } = instance
    const delegates = (config.builtins ?? []).includes("delegate")
    const limit = config.spendLimit
    if (limit !== undefined) {
      const subAgents = delegates ? yield* journal.retrying(store.subAgents(id)) : []
      if ((yield* journal.retrying(usage.spent(id, { since: limit.since, subAgents }))) >= limit.usd) return true
    }
    const runLimit = (row.input as { spendLimit?: { usd: number } }).spendLimit
    if (runLimit !== undefined) {
      const subAgents = delegates ? yield* journal.retrying(store.subAgents(id, row.id)) : []
      if ((yield* journal.retrying(usage.spent(id, { requestId: row.id, subAgents }))) >= runLimit.usd) return true
    }
    for (const above of config.delegation?.ancestors ?? []) {
      const [parent, run] = yield* journal.retrying(Effect.all([
        store.findById(above.agentId),
        store.getRequest(above.agentId, above.requestId)
      ]))
      if (Option.isNone(parent) || Option.isNone(run)) continue
      // Its own sub-agents are checked from its chain: only its limits here, not its ancestors again.
      const { delegation: _chain, ...own } = parent.value.config
      if (yield* overBudget(instance, above.agentId, own, run.value)) return true
    }
    return false
  })

/** The inputs the run's waiting calls ask, recorded and told to watchers, as the API shows them. */
export const askInputs = (
  instance: Instance,
  row: RequestRow,
  asker: string | undefined,
  asks: ReadonlyArray<Turn.Waiting>
) =>
  Effect.gen(function*() {
    const { agent, agentId, inputStore, journal } = instance
    const humanInput = agent.config.humanInput
    yield* journal.write(inputStore.ask(agent.tenantId, agentId, row.id, asks, {
      audience: asker === undefined ? [] : [asker],
      approvers: humanInput?.approvers ?? [],
      lifetimeSeconds: humanInput?.expiresInSeconds ?? Input.defaultInputLifetimeSeconds
    }))
    // In the order the calls were made.
    const found = new Map(
      (yield* journal.retrying(inputStore.forRequest(agentId, row.id))).map((input) => [input.toolCallId, input])
    )
    const rows = asks.flatMap((ask) => found.get(ask.toolCallId) ?? [])
    for (const asked of rows) {
      yield* frame(instance, row.id)({
        type: "input_required",
        input: {
          id: asked.id,
          kind: asked.kind,
          message: asked.message,
          detail: Inputs.shownDetail(asked),
          expiresAt: asked.expiresAt,
          toolCallId: asked.toolCallId
        }
      })
    }
    return rows.map(Inputs.toInput)
  })
