/**
 * The application connection's wire: what the runtime reads from the
 * application's MCP answers (its tools and their `_meta` settings, a call's
 * result), what the model reads when no answer came, and the keys and
 * audience the application sees. Kept apart from the connection's state
 * machine (ApplicationConnection), which re-exports what others use.
 *
 * A call that needs a person is asked two ways, read into one `Ask`: our
 * error -32042 (see Elicitation), or the result camelRun's client sends,
 * `{resultType: "input_required", inputRequests, requestState?}`. The call
 * made again once the input settled carries the answer the way it was asked.
 */
import { Elicitation } from "@agent-runtime/toolsources"
import type { Effect } from "effect"
import * as Crypto from "node:crypto"
import type { ApplicationTool } from "../AgentStore.ts"
import { approvalAsk, text } from "../ToolResult.ts"
import type * as Tools from "../Tools.ts"

export const defaultDeadlineMs = 15_000
const minDeadlineMs = 1_000
/** Progress restarts a call's deadline, up to this long in all. */
export const maxCallMs = 20 * 60_000

export type Answer =
  | { readonly _tag: "Result"; readonly result: unknown }
  | { readonly _tag: "Error"; readonly code: number; readonly message: string; readonly data?: unknown }

/** Why a request to the application got no answer. */
export type Lost = "connection_lost" | "timeout"

/** The `aud` of identity tokens sent with calls to the agent's application. */
export const audience = (agentId: string) => `urn:agent-runtime:application:${agentId}`

/** A stable key for one model call, the same on every node and attempt: the application keys its writes by it. */
export const idempotencyKey = (agentId: string, toolCallId: string) =>
  Crypto.createHash("sha256").update(`${agentId}\n${toolCallId}`).digest("base64url")

const toolName = /^[A-Za-z0-9_-]{1,64}$/

/** The tools of a tools/list answer the runtime can offer, with their settings from `_meta`. */
export const parseTools = (listed: ReadonlyArray<unknown>): Array<ApplicationTool> =>
  listed.flatMap((raw) => {
    const tool = raw as {
      name?: unknown
      description?: unknown
      inputSchema?: unknown
      _meta?: Record<string, unknown>
    }
    if (typeof tool.name !== "string" || !toolName.test(tool.name)) return []
    const meta = tool._meta ?? {}
    const exposure = meta["agent-runtime/exposure"]
    const executionMode = meta["agent-runtime/executionMode"]
    // camelRun's client names it timeoutMs.
    const deadlineMs = meta["agent-runtime/deadlineMs"] ?? meta["agent-runtime/timeoutMs"]
    const parameters = typeof tool.inputSchema === "object" && tool.inputSchema !== null
      ? tool.inputSchema as Record<string, unknown>
      : { type: "object" }
    return [{
      name: tool.name,
      description: typeof tool.description === "string" ? tool.description : "",
      parameters,
      ...(exposure === "direct" || exposure === "codemode" || exposure === "both" ? { exposure } : {}),
      ...(executionMode === "sequential" || executionMode === "parallel" ? { executionMode } : {}),
      ...(typeof deadlineMs === "number" && Number.isFinite(deadlineMs)
        ? { deadlineMs: Math.min(maxCallMs, Math.max(minDeadlineMs, Math.round(deadlineMs))) }
        : {}),
      ...(meta["agent-runtime/needsApproval"] === true ? { needsApproval: true } : {})
    }]
  })

/** What a camelRun `input_required` result keeps for the call made again: the key it asked by, its state. */
interface Resume {
  readonly key: string
  readonly requestState?: string
}

/**
 * What an answer asks of a person, if it asks: -32042's first elicitation, or the first of camelRun's
 * `inputRequests` (an elicitation, or `agent-runtime/approval`: the approval of this very call). Null when
 * what it asks cannot be shown.
 */
const askOf = (answer: Answer, tool: string, args: Record<string, unknown>): Tools.Ask | null | undefined => {
  if (answer._tag === "Error") {
    return answer.code === Elicitation.inputRequiredCode ? Elicitation.askOf(answer.data) ?? null : undefined
  }
  const result = answer.result as { resultType?: unknown; inputRequests?: unknown; requestState?: unknown } | null
  if (result?.resultType !== "input_required") return undefined
  const [first] = typeof result.inputRequests === "object" && result.inputRequests !== null
    ? Object.entries(result.inputRequests as Record<string, any>)
    : []
  if (first === undefined) return null
  const [key, request] = first
  const asked = request?.method === "agent-runtime/approval"
    ? approvalAsk(tool, "application", args)
    : request?.method === "elicitation/create"
    ? Elicitation.elicitationAsk(request.params)
    : undefined
  if (asked === undefined) return null
  const resume: Resume = {
    key,
    ...(typeof result.requestState === "string" ? { requestState: result.requestState } : {})
  }
  return { ...asked, resume }
}

/** A tools/call answer of `tool` called with `args` as the model reads it. */
export const toToolResult = (answer: Answer, tool: string, args: Record<string, unknown>): Tools.ToolResult => {
  const ask = askOf(answer, tool, args)
  if (ask === null) return text(Elicitation.unusable, true, "failed")
  if (ask !== undefined) return { ...text(ask.message), ask }
  if (answer._tag === "Error") return text(`the tool failed: ${answer.message}`, true, "failed")
  const result = answer.result as { content?: unknown; isError?: unknown; structuredContent?: unknown } | null
  const content = Array.isArray(result?.content) ? result.content : []
  const texts = content.map((part: any) =>
    part?.type === "text" && typeof part.text === "string" ? part.text : JSON.stringify(part)
  )
  if (texts.length === 0 && result?.structuredContent !== undefined) {
    texts.push(JSON.stringify(result.structuredContent))
  }
  const isError = result?.isError === true
  return {
    content: texts.map((text) => ({ type: "text" as const, text })),
    isError,
    ...(isError ? { code: "failed" } : {})
  }
}

/**
 * What a call made again after its input settled carries besides its arguments, the way the tool asked:
 * for camelRun's result, `inputResponses` under the key it asked by (an approval given is `accept`) and its
 * `requestState` echoed; for -32042, the answer in `_meta["agent-runtime/answer"]`. An approval is also named
 * in the identity claims, on both wires.
 */
export const askedAgain = (
  context: Pick<Tools.ToolContext, "answer" | "approval" | "resume">
): { readonly params: Record<string, unknown>; readonly meta: Record<string, unknown> } => {
  const resume = context.resume as Resume | undefined
  if (resume === undefined) {
    return { params: {}, meta: context.answer === undefined ? {} : { [Elicitation.answerKey]: context.answer } }
  }
  const response = context.answer === undefined
    ? { action: "accept" }
    : {
      action: context.answer.action,
      ...(context.answer.content === undefined ? {} : { content: context.answer.content })
    }
  return {
    params: {
      inputResponses: { [resume.key]: response },
      ...(resume.requestState === undefined ? {} : { requestState: resume.requestState })
    },
    meta: {}
  }
}

/** What the model reads for a call no answer came for. */
export const unanswered = (lost: Lost, deadlineMs: number) =>
  lost === "timeout"
    ? text(
      `The application did not answer within ${deadlineMs} ms; whether the call took effect is unknown. ` +
        "It was not sent again.",
      true,
      "timeout"
    )
    : text(
      "The application's connection went away while this call was out; whether it took effect is unknown. " +
        "It was not sent again.",
      true,
      "connection_lost"
    )

/** The application's tools as the model's tools, each call carried out by `execute`. */
export const asTools = (
  listed: ReadonlyArray<ApplicationTool>,
  execute: (tool: ApplicationTool, args: Record<string, unknown>, context: Tools.ToolContext) => Effect.Effect<
    Tools.ToolResult
  >
): Tools.Application["tools"] =>
  listed.map((tool) => ({
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters,
    executionMode: tool.executionMode ?? "parallel",
    exposure: tool.exposure,
    ...(tool.needsApproval === true ? { needsApproval: true } : {}),
    execute: (args, context) => execute(tool, args, context)
  }))

export const notConnected = text(
  "The application that serves this tool is not connected, so the call was not made.",
  true,
  "not_connected"
)
