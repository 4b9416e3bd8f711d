/**
 * The agent entity's behaviour. Message handlers only record and answer;
 * one runner fiber per agent takes accepted requests in arrival order and
 * runs them, so Status and event reads are answered while a turn runs. On
 * start the entity rebuilds history and unfinished work from the journal;
 * a turn cut short by a crash or a move is run again from its start, and
 * says so with turn_resumed.
 */
import { Run } from "@agent-runtime/domain"
import { Entity } from "@effect/cluster"
import { Effect, Option, Queue, Stream } from "effect"
import { Agent, ReplayGap } from "./Agent.ts"
import { AgentStore, type RequestRow } from "./AgentStore.ts"
import * as EventLog from "./EventLog.ts"
import * as Turn from "./Turn.ts"

/** A stored request as the API shows it. */
export const toRecord = (row: RequestRow): Run.RequestRecord => {
  const outcome = row.outcome as
    | { result?: { error?: string | null; stopped?: Run.StoppedReason }; error?: string; uncertain?: boolean; code?: string }
    | null
  const error = outcome?.error ?? outcome?.result?.error ?? undefined
  const input = row.input as { text?: string; metadata?: Record<string, string> }
  return new Run.RequestRecord({
    id: row.id,
    method: row.method as Run.RequestMethod,
    state: row.state === "completed" ? "completed" : "running",
    fingerprint: row.fingerprint,
    startedAt: row.startedAt,
    ...(row.beganIndex === null ? {} : { began: row.beganIndex }),
    ...(row.endedAt === null ? {} : { endedAt: row.endedAt }),
    ...(input.text === undefined ? {} : { prompt: input.text }),
    ...(input.metadata === undefined ? {} : { metadata: input.metadata }),
    ...(row.steeredInto === null ? {} : { steeredInto: row.steeredInto }),
    ...(outcome?.code === undefined ? {} : { code: outcome.code }),
    ...(outcome === null
      ? {}
      : {
        outcome: new Run.RunOutcome({
          ...(outcome.result === undefined ? {} : { result: outcome.result }),
          ...(outcome.error === undefined ? {} : { error: outcome.error }),
          ...(outcome.uncertain === undefined ? {} : { uncertain: outcome.uncertain })
        })
      }),
    ...(error === undefined || error === null ? {} : { error }),
    ...(outcome?.result?.stopped === undefined ? {} : { stopped: outcome.result.stopped })
  })
}

export const layer = Agent.toLayer(
  Effect.gen(function*() {
    const address = yield* Entity.CurrentAddress
    const agentId = address.entityId
    const store = yield* AgentStore
    const agent = Option.getOrThrowWith(
      yield* Effect.orDie(store.findById(agentId)),
      () => new Error(`agent ${agentId} does not exist`)
    )
    const history: Array<Turn.StoredMessage> = (yield* Effect.orDie(store.messages(agentId))).map((row) =>
      row.message as Turn.StoredMessage
    )
    const log = yield* EventLog.make({ agentId, startCursor: yield* Effect.orDie(store.reserveEvents(agentId)) })

    /** Accepted requests not yet run, in arrival order. */
    const pending: Array<RequestRow> = []
    const wakeup = yield* Queue.sliding<void>(1)
    let active: string | null = null

    const enqueue = (row: RequestRow) => {
      if (row.state === "completed" || pending.some((open) => open.id === row.id) || active === row.id) return false
      pending.push(row)
      pending.sort((a, b) => a.seq - b.seq)
      return true
    }

    const loadOpenWork = Effect.gen(function*() {
      let added = false
      for (const row of yield* Effect.orDie(store.openRequests(agentId))) added = enqueue(row) || added
      if (added) yield* Queue.offer(wakeup, void 0)
    })

    const frame = (requestId: string) => (event: Record<string, unknown>) =>
      Effect.asVoid(log.publish({ type: "event", requestId, event }))

    const runOne = (row: RequestRow) =>
      Effect.gen(function*() {
        active = row.id
        const input = row.input as unknown as Pick<Turn.TurnInput, "text" | "metadata" | "from">
        if (row.state === "running") {
          // The node running this turn was lost: take back what it had journaled and run it again.
          const from = row.beganIndex ?? history.length
          yield* Effect.orDie(store.truncateMessages(agentId, from))
          history.length = Math.min(history.length, from)
          yield* frame(row.id)({ type: "turn_resumed", index: from })
        }
        yield* Effect.orDie(store.markRunning(agentId, row.id, history.length))
        const outcome = yield* Turn.run(
          {
            tenantId: agent.tenantId,
            agentId,
            config: agent.config,
            requestId: row.id,
            text: input.text,
            metadata: input.metadata,
            from: input.from
          },
          {
            emit: frame(row.id),
            append: (index, message) =>
              Effect.zipRight(
                Effect.orDie(store.appendMessage(agentId, index, row.id, message)),
                Effect.sync(() => {
                  history[index] = message
                })
              ),
            historySize: () => history.length,
            history: () => history
          }
        )
        const stored = { result: outcome.result, ...(outcome.code === undefined ? {} : { code: outcome.code, error: outcome.result.error }) }
        yield* Effect.orDie(store.complete(agentId, row.id, stored))
        const finished = Option.getOrThrow(yield* Effect.orDie(store.getRequest(agentId, row.id)))
        yield* log.publish({ type: "response", id: row.id, outcome: toRecord(finished).outcome })
      }).pipe(Effect.ensuring(Effect.sync(() => {
        active = null
      })))

    // The runner: one request at a time, in arrival order; the entity stays alive while work is open.
    yield* Effect.gen(function*() {
      while (true) {
        yield* Queue.take(wakeup)
        while (pending.length > 0) {
          yield* Entity.keepAlive(true)
          yield* runOne(pending.shift()!)
        }
        yield* Entity.keepAlive(false)
      }
    }).pipe(Effect.forkScoped)
    yield* loadOpenWork

    return {
      Prompt: ({ payload }) =>
        Effect.gen(function*() {
          const row = yield* Effect.orDie(store.insertRequest({
            agentId,
            id: payload.requestId,
            method: "prompt",
            fingerprint: payload.fingerprint,
            input: {
              text: payload.text,
              ...(payload.actor === undefined ? {} : { actor: payload.actor }),
              ...(payload.from === undefined ? {} : { from: payload.from }),
              ...(payload.metadata === undefined ? {} : { metadata: payload.metadata })
            }
          }))
          if (enqueue(row)) yield* Queue.offer(wakeup, void 0)
          return toRecord(row)
        }),
      Wake: () => loadOpenWork,
      Status: () =>
        Effect.map(log.cursor, (cursor) => ({
          cursor,
          running: active !== null,
          activeRequest: active,
          queued: pending.map((row) => row.id)
        })),
      Watch: ({ payload }) =>
        Stream.unwrapScoped(
          Effect.map(
            Effect.mapError(log.subscribe(Option.fromNullable(payload.cursor)), (gap) =>
              new ReplayGap({ cursor: gap.cursor, oldest: gap.oldest })),
            (entries) =>
              entries.pipe(
                Stream.map((entry) => ({ id: entry.id, data: entry.data })),
                // A lagging watcher's stream just ends; the client reconnects from its cursor.
                Stream.catchAll(() => Stream.empty)
              )
          )
        ),
      Poll: ({ payload }) =>
        Effect.mapError(
          log.poll(payload.cursor, `${payload.waitMillis} millis`),
          (gap) => new ReplayGap({ cursor: gap.cursor, oldest: gap.oldest })
        )
    }
  }),
  { concurrency: "unbounded", maxIdleTime: "5 minutes" }
)
