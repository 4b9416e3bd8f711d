/**
 * The application connection's wire: what the runtime reads from the
 * application's MCP answers (its tools and their `_meta` settings, a call's
 * result), what the model reads when no answer came, and the keys and
 * audience the application sees. Kept apart from the connection's state
 * machine (ApplicationConnection), which re-exports what others use.
 */
import { Elicitation } from "@agent-runtime/toolsources"
import type { Effect } from "effect"
import * as Crypto from "node:crypto"
import type { ApplicationTool } from "../AgentStore.ts"
import { text } from "../ToolResult.ts"
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
    const deadlineMs = meta["agent-runtime/deadlineMs"]
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
        : {})
    }]
  })

/** A tools/call answer as the model reads it. */
export const toToolResult = (answer: Answer): Tools.ToolResult => {
  if (answer._tag === "Error" && answer.code === Elicitation.inputRequiredCode) {
    const ask = Elicitation.askOf(answer.data)
    return ask === undefined ? text(Elicitation.unusable, true, "failed") : { ...text(ask.message), ask }
  }
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
    execute: (args, context) => execute(tool, args, context)
  }))

export const notConnected = text(
  "The application that serves this tool is not connected, so the call was not made.",
  true,
  "not_connected"
)
