/**
 * What a tool is, what a call of it answers, and the context it runs in:
 * shared by the tool set (Tools), the runtime's own tools (Builtins,
 * FileTools) and the application connection that serves some of the tools.
 */
import { type Agent as AgentSchemas, CanonicalJson } from "@agent-runtime/domain"
import type { Effect } from "effect"
import * as Crypto from "node:crypto"
import type { AgentConfig } from "./AgentStore.ts"

export interface Tool {
  readonly name: string
  readonly description: string
  readonly parameters: Record<string, unknown>
  readonly exposure: AgentSchemas.ToolExposure
  readonly executionMode: AgentSchemas.ToolExecutionMode
  readonly execute: (args: Record<string, unknown>, context: ToolContext) => Effect.Effect<ToolResult>
  /**
   * Running the call again continues the same work (it is keyed by the call's id), so a call a lost node
   * sent is run again to get its result instead of being answered as unknown.
   */
  readonly reattaches?: boolean
  /** The source offering it, as approvals name it: builtins, application, or a tool source's name. */
  readonly source?: string
  /** A person approves each call before it runs, whatever the definition's rules (the application said so). */
  readonly needsApproval?: boolean
}

/** Whose tools, and for which run: the agent, its settings, and who acts (for identity tokens). */
export interface Scope {
  readonly tenantId: string
  readonly agentId: string
  readonly config: AgentConfig
  /** What started the run: prompt, continue, execute, resume, schedule. */
  readonly origin: string
  readonly actor?: string | undefined
  /** The run's request (a turn's; absent when only listing the tools). */
  readonly requestId?: string | undefined
}

export interface ToolResult {
  readonly content: ReadonlyArray<{ readonly type: "text"; readonly text: string }>
  readonly isError: boolean
  /** Why a call failed, for the run's toolCalls: invalid_arguments, failed, unavailable, unknown_outcome, aborted. */
  readonly code?: string
  /** The sub-agent a delegate call ran. */
  readonly agentId?: string
  /** A file the call wrote (file tools), for the run's outcome. */
  readonly written?: { readonly path: string; readonly version: number; readonly size: number }
  /** A file the call presented (present_file), for the run's outcome. */
  readonly presented?: {
    readonly path: string
    readonly name: string
    readonly size: number
    readonly contentType: string
    readonly url: string
    readonly expiresAt: number
  }
  /** The call asks a person for input first: the turn stops waiting, and the call is answered once it settles. */
  readonly ask?: Ask
  /**
   * What the call costs a prepaid tenant, micro-USD (a web search on a key the operator pays for): charged by
   * the statement that records the call's result, so once.
   */
  readonly charge?: { readonly webSearch?: number }
}

/** What a call asks of a person: a question, an approval, a form's fields or a page to open. */
export interface Ask {
  readonly kind: "question" | "approval" | "form" | "url"
  readonly message: string
  readonly detail: Record<string, unknown>
  /**
   * What the tool gave with its ask to have handed back when it is called again (on camelRun's wire, the key
   * it asked by and its requestState): kept with the input, never shown.
   */
  readonly resume?: unknown
}

/** A settled input a call asked for, given to the call when it is made again (a form's fields, a page opened). */
export interface Answer {
  readonly inputId: string
  readonly action: "accept" | "decline" | "cancel"
  readonly content?: unknown
}

export interface ToolContext {
  readonly toolCallId: string
  /** Progress of a long call; the loop passes on at most one every 250 ms. */
  readonly update: (partialResult: unknown) => Effect.Effect<void>
  /** Emits an event of the run (a delegate call's subagent_* events). */
  readonly emit: (event: Record<string, unknown>) => Effect.Effect<void>
  /** Whether the run is being aborted, rather than stopped for another node to continue. */
  readonly aborting: () => boolean
  /** The answer to the input this call asked before, when it is made again with it. */
  readonly answer?: Answer | undefined
  /** The approval a person gave before this call ran: application tools name it in the identity they get. */
  readonly approval?: { readonly inputId: string; readonly by: unknown; readonly at: number } | undefined
  /** What the tool gave with the ask this call is made again for (`Ask.resume`). */
  readonly resume?: unknown
}

/** The digest of a call's arguments an approval shows, so an answer can name exactly what it approves. */
export const argumentsHash = (args: unknown) =>
  `sha256:${Crypto.createHash("sha256").update(CanonicalJson.encode(args)).digest("hex")}`

/** What a call waiting for a person's approval asks: the real call, as the runtime was to make it. */
export const approvalAsk = (tool: string, source: string, args: unknown): Ask => ({
  kind: "approval",
  message: `Approve ${tool}?`,
  detail: { tool, source, arguments: args, argumentsHash: argumentsHash(args) }
})

export const text = (value: string, isError = false, code?: string): ToolResult => ({
  content: [{ type: "text", text: value }],
  isError,
  ...(code === undefined ? {} : { code })
})

/** What a call whose effect is unknown answers: it was sent when its node was lost, and is never sent again. */
export const unknownOutcome = text(
  "The runtime restarted while this tool call ran; whether it took effect is unknown. It was not run again.",
  true,
  "unknown_outcome"
)
