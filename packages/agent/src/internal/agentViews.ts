/**
 * How an agent is shown: its summary in lists, and its detail (settings,
 * tools and tool sources, spend, recent events and requests, what runs and
 * waits), read from the journal and from its owner's view.
 */
import { Agent as AgentSchemas, ApiError, Session } from "@agent-runtime/domain"
import { UsageLog } from "@agent-runtime/models"
import { type Context, Effect } from "effect"
import { toRecord } from "../Agent.ts"
import * as AgentEvents from "../AgentEvents.ts"
import { type AgentRow, AgentStore, findLive } from "../AgentStore.ts"
import * as ApplicationConnection from "../ApplicationConnection.ts"
import * as HistoryPage from "../HistoryPage.ts"
import { Tools } from "../Tools.ts"

/**
 * A page of the agent's history, oldest first, ending before `before`: whole turns of about `limit` messages,
 * at most about 4 MB, unless one turn alone is larger (then the page starts inside it and says `split`).
 */
export const historyPage = (
  store: Context.Tag.Service<AgentStore>,
  agentId: string,
  page: { readonly before?: number | undefined; readonly limit?: number | undefined }
) =>
  Effect.gen(function*() {
    const total = yield* store.messageCount(agentId)
    const rows = yield* store.messagesBefore(agentId, Math.min(page.before ?? total, total))
    const { split, start } = HistoryPage.start(rows, { limit: page.limit })
    const entries = rows.slice(start)
    return new Session.HistoryPage({
      entries: entries.map((row) =>
        new Session.HistoryEntry({ index: row.index, message: row.message as Session.HistoryMessage })
      ),
      next: start > 0 ? entries[0]?.index ?? null : null,
      total,
      split
    })
  })

/**
 * The whole history, oldest first, unless its message JSON is over `Session.maxWholeHistoryBytes`: then 413,
 * measured before a message is read, so a long history never lands in memory whole for one answer.
 */
export const wholeHistory = (store: Context.Tag.Service<AgentStore>, agentId: string) =>
  Effect.gen(function*() {
    const bytes = yield* store.historyBytes(agentId)
    if (bytes > Session.maxWholeHistoryBytes) {
      return yield* new ApiError.TooLarge({
        error: `the history is ${bytes} bytes of messages, more than the ${Session.maxWholeHistoryBytes} answered ` +
          "whole: read it in pages (limit, before)"
      })
    }
    const rows = yield* store.messages(agentId)
    return new Session.History({ messages: rows.map((row) => row.message as Session.HistoryMessage) })
  })

export const resumeOf = (agent: AgentRow) =>
  agent.resumeFailures === 0 || agent.resumeAfter === null
    ? null
    : new AgentSchemas.AgentResume({ failures: agent.resumeFailures, after: agent.resumeAfter })

/** The type of an agent made without one. */
export const defaultType = "agent"

export const summary = (agent: AgentRow, running: boolean) =>
  new AgentSchemas.AgentSummary({
    id: agent.id,
    key: agent.key,
    name: agent.name,
    type: agent.type ?? defaultType,
    model: agent.config.model,
    connected: agent.connection !== null,
    running,
    expiresAt: agent.expiresAt,
    resume: resumeOf(agent)
  })

export const make = Effect.gen(function*() {
  const store = yield* AgentStore
  const tools = yield* Tools
  const events = yield* AgentEvents.AgentEvents
  const usage = yield* UsageLog.UsageLog
  const live = (tenantId: string, id: string) => findLive(store, tenantId, id)
  const status = events.status

  const spendLimitOf = (agent: AgentRow) =>
    agent.config.spendLimit === undefined
      ? Effect.succeed(null)
      : Effect.map(
        usage.spent(agent.id, { since: agent.config.spendLimit.since }),
        (spent) => new AgentSchemas.SpendLimit({ usd: agent.config.spendLimit!.usd, spent })
      )

  const detail = (tenantId: string, agentId: string) =>
    Effect.gen(function*() {
      const agent = yield* live(tenantId, agentId)
      const state = yield* status(agentId)
      const requests = yield* store.recentRequests(agentId, 20)
      const declared = agent.applicationTools ?? []
      return new AgentSchemas.AgentDetail({
        ...summary(agent, state.running),
        connected: state.connected,
        tools: declared.map((tool) =>
          new AgentSchemas.ToolDefinition({
            name: tool.name,
            description: tool.description,
            parameters: tool.parameters,
            ...(tool.exposure === undefined ? {} : { exposure: tool.exposure }),
            ...(tool.executionMode === undefined ? {} : { executionMode: tool.executionMode })
          })
        ),
        toolSources: (yield* tools.forAgent(
          { tenantId, agentId, config: agent.config, origin: "status" },
          agent.applicationTools === null
            ? undefined
            : {
              // Described here, called only by the agent's owner.
              tools: ApplicationConnection.asTools(declared, () => Effect.succeed(ApplicationConnection.notConnected)),
              connected: state.connected
            },
          // Described as this node has them: a source it has not listed yet shows as unlisted.
          { wait: false }
        )).sources,
        definition: agent.config.definition === undefined
          ? null
          : new AgentSchemas.DefinitionRef(agent.config.definition),
        mounts: agent.config.mounts ?? [],
        systemPrompt: agent.config.systemPrompt ?? "",
        ...(agent.config.fileTools === false ? { fileTools: false as const } : {}),
        ...(agent.config.systemPromptAppend === undefined
          ? {}
          : { systemPromptAppend: agent.config.systemPromptAppend }),
        keyScope: agent.config.keyScope ?? null,
        modelHeaders: agent.config.modelHeaders ?? null,
        builtins: (agent.config.builtins ?? []) as Array<AgentSchemas.Builtin>,
        spendLimit: yield* spendLimitOf(agent),
        cursor: state.cursor,
        events: (yield* events.recent(agentId, state.cursor)).map((entry) => new Session.EventEntry(entry)),
        requests: requests.map(toRecord),
        busy: state.running,
        activeRun: state.activeRequest,
        queuedRuns: state.queued
      })
    })

  return { detail }
})
