/**
 * Delegation: the `delegate` builtin hands a task to a sub-agent made from
 * one of the definitions its delegate setting names, and answers with the
 * sub-agent's reply.
 *
 * The sub-agent of a call is keyed by the delegating agent and the call's id,
 * and its prompt has a fixed request id, so running the call again (a moved
 * turn re-attaching) finds the same sub-agent and the same run: the task is
 * never given twice. Its progress reaches the delegating agent's stream as
 * `subagent_start`, `subagent_event` (its finished messages and tool calls)
 * and `subagent_end`. Its config carries the chain of agents above it, which
 * bounds the depth and lets a spend limit count what sub-agents spend.
 */
import { Agent as AgentSchemas, Input } from "@agent-runtime/domain"
import { Ids, PersistenceError } from "@agent-runtime/store"
import { RunSpans } from "@agent-runtime/telemetry"
import type { Sharding } from "@effect/cluster"
import { Context, Duration, Effect, Layer, Option, Schedule } from "effect"
import { applyChanges, definitionSettings, entityClient, fingerprint, requestOf } from "./Agent.ts"
import { AgentStore } from "./AgentStore.ts"
import type { AgentConfig } from "./AgentStore.ts"
import { Definitions } from "./Definitions.ts"

/** One delegate call of a run. */
export interface Call {
  readonly tenantId: string
  readonly agentId: string
  readonly config: AgentConfig
  /** The delegating run's request. */
  readonly requestId: string
  readonly toolCallId: string
  /** A definition of the delegate setting, by id or name. */
  readonly agent: string
  readonly task: string
  /** Emits an event on the delegating run's stream. */
  readonly emit: (event: Record<string, unknown>) => Effect.Effect<void>
  /** Whether the delegating run is being aborted (its sub-agent is aborted too) rather than moved. */
  readonly aborting: () => boolean
}

export interface Outcome {
  readonly text: string
  readonly isError: boolean
  /** invalid_arguments, failed, aborted. */
  readonly code?: string
  /** The sub-agent, once there is one. */
  readonly agentId?: string
}

export interface Service {
  /** The definitions an agent may delegate to, for the delegate tool's description; none when it may not. */
  readonly targets: (
    tenantId: string,
    config: AgentConfig
  ) => Effect.Effect<ReadonlyArray<{ readonly id: string; readonly name: string; readonly description?: string }>>
  /** Runs one delegate call to its end: the sub-agent's reply, or why there is none. */
  readonly run: (call: Call) => Effect.Effect<Outcome>
}

export class Delegation extends Context.Tag("@agent-runtime/agent/Delegation")<Delegation, Service>() {}

/** How deep delegation goes when the setting does not say: sub-agents do not delegate further. */
export const defaultMaxDepth = 1
/** Delegate calls of one run at a time when the setting does not say. */
export const defaultMaxParallel = 4

/** The sub-agent's events the delegating stream carries: finished steps, not deltas. */
const forwarded = new Set([
  "message_end",
  "tool_execution_start",
  "tool_execution_end",
  "turn_resumed",
  "turn_recovered"
])

const delegatedRequest = "req_delegated"

const settingsOf = (config: AgentConfig) => config.delegate as AgentSchemas.DelegateSettings | undefined

/** The agents above a sub-agent, nearest first, and the depth delegation may reach from its root. */
const chainOf = (config: AgentConfig) => config.delegation ?? { ancestors: [], maxDepth: undefined }

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const definitions = yield* Definitions
  const makeClient = yield* entityClient

  const maxDepthOf = (config: AgentConfig) =>
    chainOf(config).maxDepth ?? settingsOf(config)?.maxDepth ?? defaultMaxDepth

  const targets: Service["targets"] = (tenantId, config) => {
    const settings = settingsOf(config)
    if (settings === undefined || chainOf(config).ancestors.length >= maxDepthOf(config)) return Effect.succeed([])
    return Effect.map(
      // A definition gone is no target; a database fault is no answer (the turn stops and resumes).
      Effect.forEach(settings.agents, (id) => Effect.option(PersistenceError.orDie(definitions.get(tenantId, id)))),
      (found) =>
        found.flatMap((definition) =>
          Option.isNone(definition) ? [] : [{
            id: definition.value.id,
            name: definition.value.name,
            ...(definition.value.description === undefined ? {} : { description: definition.value.description })
          }]
        )
    )
  }

  /** The call's sub-agent: made on the first run of the call, found on any later one. */
  const subAgent = (call: Call, definitionId: string) =>
    Effect.gen(function*() {
      const key = `delegate-${call.agentId}-${call.toolCallId}`
      const existing = yield* store.findByKey(call.tenantId, key)
      if (Option.isSome(existing)) return existing.value.id
      const definition = yield* definitions.get(call.tenantId, definitionId)
      const settings = settingsOf(call.config)!
      const chain = chainOf(call.config)
      const base: AgentConfig = {
        model: definition.model ?? call.config.model,
        ...(call.config.keyScope === undefined ? {} : { keyScope: call.config.keyScope }),
        ...(call.config.modelHeaders === undefined ? {} : { modelHeaders: call.config.modelHeaders }),
        ...(call.config.subject === undefined ? {} : { subject: call.config.subject }),
        ...(call.config.context === undefined ? {} : { context: call.config.context }),
        ...(settings.instructions === undefined ? {} : { systemPromptAppend: settings.instructions }),
        delegation: {
          ancestors: [
            { agentId: call.agentId, requestId: call.requestId, toolCallId: call.toolCallId },
            ...chain.ancestors
          ],
          maxDepth: maxDepthOf(call.config)
        }
      }
      const config = applyChanges(base, { definition: definitionSettings(definition) })
      const id = Ids.agent()
      const inserted = yield* store.insertAgent({
        id,
        tenantId: call.tenantId,
        key,
        name: `${definition.name} (delegated by ${call.agentId})`,
        type: "subagent",
        config,
        inputFingerprint: fingerprint({ key }),
        ttlSeconds: AgentSchemas.defaultTtlSeconds
      }, [])
      if (Option.isSome(inserted)) return inserted.value.id
      // Another run of this call made it at the same moment.
      return Option.getOrThrow(yield* store.findByKey(call.tenantId, key)).id
    })

  /** Carries the sub-agent's progress to the delegating stream until its run settles; its outcome. */
  const follow = (call: Call, agentId: string) =>
    Effect.gen(function*() {
      const client = makeClient(agentId)
      let cursor = 0
      /** Forwards the events after the cursor, waiting up to `waitMillis` for the first; false when no owner answered. */
      const forward = (waitMillis: number) =>
        Effect.gen(function*() {
          const polled = yield* Effect.either(client.Poll({ cursor, waitMillis }))
          if (polled._tag === "Left") return false
          cursor = polled.right.cursor
          for (const entry of polled.right.events) {
            const frame = entry.data as { type?: string; requestId?: string; event?: { type?: string } }
            if (frame.type === "event" && forwarded.has(frame.event?.type ?? "")) {
              yield* call.emit({ type: "subagent_event", toolCallId: call.toolCallId, agentId, event: frame.event })
            }
          }
          return true
        })
      while (true) {
        // Events lost to a move are only progress: the outcome is read from the journal.
        if (!(yield* forward(10_000))) yield* Effect.sleep(Duration.millis(500))
        const row = yield* Effect.orDie(store.getRequest(agentId, delegatedRequest))
        if (Option.isSome(row) && row.value.state === "completed") {
          // Its last events were logged before it completed: the ones after the last poll are passed on too.
          yield* forward(0)
          return row.value
        }
      }
    })

  const run: Service["run"] = (call) =>
    Effect.gen(function*() {
      const settings = settingsOf(call.config)
      const depth = chainOf(call.config).ancestors.length + 1
      if (settings === undefined || depth > maxDepthOf(call.config)) {
        return {
          text: `delegation goes at most ${maxDepthOf(call.config)} level(s) deep; do this task yourself`,
          isError: true,
          code: "unavailable"
        }
      }
      const listed = yield* targets(call.tenantId, call.config)
      const target = listed.find((entry) => entry.id === call.agent || entry.name === call.agent)
      if (target === undefined) {
        return {
          text: `agent must be one of: ${listed.map((entry) => entry.name).join(", ")}`,
          isError: true,
          code: "invalid_arguments"
        }
      }
      const made = yield* Effect.either(subAgent(call, target.id).pipe(Effect.catchTag("PersistenceError", Effect.die)))
      if (made._tag === "Left") return { text: `no sub-agent: ${made.left.error}`, isError: true, code: "failed" }
      const agentId = made.right
      yield* call.emit({
        type: "subagent_start",
        toolCallId: call.toolCallId,
        agentId,
        definition: target.id,
        task: call.task
      })
      // Recorded and announced to its owner, as every prompt (see Arrivals); a database away for a moment is
      // waited out.
      // The delegate's run continues the trace under this tool call's span.
      const traceparent = yield* RunSpans.traceparent
      yield* store.insertRequest(
        requestOf(agentId, {
          ...(traceparent === undefined ? {} : { traceparent }),
          requestId: delegatedRequest,
          method: "prompt",
          fingerprint: fingerprint({ task: call.task }),
          text: call.task,
          from: new Input.Sender({ id: call.agentId, name: "the agent that delegated this task" }),
          allowDisconnected: true
        }),
        {}
      ).pipe(Effect.retry({ schedule: Schedule.spaced("500 millis"), times: 120 }), Effect.orDie)
      const settled = yield* follow(call, agentId).pipe(
        Effect.onInterrupt(() =>
          call.aborting()
            ? Effect.ignore(
              makeClient(agentId).Abort({
                requestId: `abort_${call.requestId}`,
                fingerprint: fingerprint({ method: "abort" })
              })
            )
            : Effect.void
        )
      )
      const outcome = settled.outcome as
        | { result?: { reply?: string; error?: string | null; stopped?: string }; error?: string }
        | null
      const error = outcome?.error ?? outcome?.result?.error ?? undefined
      const reply = outcome?.result?.reply
      yield* call.emit({
        type: "subagent_end",
        toolCallId: call.toolCallId,
        agentId,
        ok: error === undefined || error === null,
        ...(error === undefined || error === null ? {} : { error }),
        ...(outcome?.result?.stopped === undefined ? {} : { stopped: outcome.result.stopped })
      })
      if (error !== undefined && error !== null) {
        return { text: `the sub-agent failed: ${error}`, isError: true, code: "failed", agentId }
      }
      return { text: reply ?? "(the sub-agent gave no reply)", isError: false, agentId }
    })

  return Delegation.of({ targets, run })
})

export const layer: Layer.Layer<Delegation, never, Sharding.Sharding | AgentStore | Definitions> = Layer.effect(
  Delegation,
  make
)
