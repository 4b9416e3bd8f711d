/**
 * What an agent said and did, as the console shows it: built from history
 * and kept current by the event stream (messages stream in by their history
 * index, tool calls by their id). Everything is kept as text; nothing the
 * agent says is rendered as markup.
 */
import type { HistoryEntry } from "./Api.ts"
import type { Frame } from "./Stream.ts"
import { httpUrl } from "./Urls.ts"

export type Entry =
  | { readonly kind: "user"; readonly who: string; readonly text: string }
  | {
    readonly kind: "assistant"
    readonly text: string
    readonly thinking: string
    readonly streaming: boolean
    readonly error?: string
  }
  | {
    readonly kind: "tool"
    readonly name: string
    readonly args?: unknown
    readonly status: string
    readonly result?: string
    readonly isError: boolean
  }
  | { readonly kind: "notice"; readonly text: string; readonly tone: "info" | "error" | "end"; readonly href?: string }

/** The text parts of a message's content. */
export const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.filter((part) => part?.type === "text" && typeof part.text === "string").map((part) => part.text).join(
      ""
    )
    : ""

const thinkingOf = (content: unknown): string =>
  Array.isArray(content)
    ? content.filter((part) => part?.type === "thinking" && typeof part.thinking === "string").map((part) =>
      part.thinking
    ).join("")
    : ""

const inputStates: Record<string, string> = {
  answered: "was answered",
  declined: "was declined",
  cancelled: "was cancelled",
  expired: "expired",
  superseded: "was superseded by a new message"
}

export class Transcript {
  entries = new Map<string, Entry>()
  private notices = 0

  /** An older page of history, put before what is shown. */
  earlier(older: ReadonlyArray<HistoryEntry>) {
    const page = new Transcript()
    for (const entry of older) page.message(entry.index, entry.message)
    this.entries = new Map([...page.entries, ...this.entries])
  }

  clear() {
    this.entries.clear()
  }

  private notice(text: string, tone: "info" | "error" | "end" = "info", href?: string) {
    this.entries.set(`n${++this.notices}`, { kind: "notice", text, tone, ...(href === undefined ? {} : { href }) })
  }

  private tool(id: unknown, update: Partial<Extract<Entry, { kind: "tool" }>>) {
    if (typeof id !== "string") return
    const known = this.entries.get(`t${id}`)
    const base = known?.kind === "tool"
      ? known
      : { kind: "tool" as const, name: "a tool", status: "called", isError: false }
    const defined = Object.fromEntries(Object.entries(update).filter(([, value]) => value !== undefined))
    this.entries.set(`t${id}`, { ...base, ...defined })
  }

  /** A message as history keeps it. */
  message(index: number, message: any) {
    if (typeof message !== "object" || message === null) return
    if (message.role === "user") {
      const from = message.from
      const who = typeof from?.name === "string" ? from.name : typeof from?.id === "string" ? from.id : "You"
      this.entries.set(`m${index}`, { kind: "user", who, text: textOf(message.content) })
    } else if (message.role === "assistant") {
      const text = textOf(message.content)
      const thinking = thinkingOf(message.content)
      const failed = message.stopReason === "error" && typeof message.errorMessage === "string"
      if (text === "" && thinking === "" && !failed) this.entries.delete(`m${index}`)
      else {
        this.entries.set(`m${index}`, {
          kind: "assistant",
          text,
          thinking,
          streaming: false,
          ...(failed ? { error: message.errorMessage } : {})
        })
      }
      for (const part of Array.isArray(message.content) ? message.content : []) {
        if (part?.type === "toolCall" && !this.entries.has(`t${part.id}`)) {
          this.tool(part.id, { name: part.name, args: part.arguments })
        }
      }
    } else if (message.role === "toolResult") {
      this.tool(message.toolCallId, {
        name: message.toolName,
        status: message.isError ? "failed" : "done",
        result: textOf(message.content),
        isError: message.isError === true
      })
    }
  }

  /** Applies a frame of the stream; true when inputs may have changed. */
  frame(frame: Frame): boolean {
    if (frame.type === "event" && typeof frame.event === "object" && frame.event !== null) {
      return this.event(frame.event)
    }
    if (frame.type === "response") {
      this.response(frame)
      return true
    }
    return false
  }

  private event(event: any): boolean {
    switch (event.type) {
      case "message_start":
        if (event.message?.role === "assistant") {
          this.entries.set(`m${event.index}`, { kind: "assistant", text: "", thinking: "", streaming: true })
        } else this.message(event.index, event.message)
        return false
      case "message_update": {
        const delta = event.assistantMessageEvent
        const known = this.entries.get(`m${event.index}`)
        const current = known?.kind === "assistant"
          ? known
          : { kind: "assistant" as const, text: "", thinking: "", streaming: true }
        if (delta?.type === "text_delta" && typeof delta.delta === "string") {
          this.entries.set(`m${event.index}`, { ...current, text: current.text + delta.delta })
        } else if (delta?.type === "thinking_delta" && typeof delta.delta === "string") {
          this.entries.set(`m${event.index}`, { ...current, thinking: current.thinking + delta.delta })
        }
        return false
      }
      case "message_end":
        this.message(event.index, event.message)
        return false
      case "message_retracted":
        this.entries.delete(`m${event.index}`)
        return false
      case "tool_execution_start":
        this.tool(event.toolCallId, { name: event.toolName, args: event.args, status: "running" })
        return false
      case "tool_execution_end":
        this.tool(event.toolCallId, {
          name: event.toolName,
          status: event.isError ? "failed" : "done",
          result: textOf(event.result),
          isError: event.isError === true
        })
        return false
      case "input_required":
        this.tool(event.input?.toolCallId, { status: "waiting for you" })
        this.notice(
          `The agent asks: ${typeof event.input?.message === "string" ? event.input.message : "for your input"}`
        )
        return true
      case "input_resolved":
        this.notice(`An input ${inputStates[event.state] ?? "settled"}.`)
        return true
      case "auto_retry_start":
        this.notice("The model call failed; retrying.")
        return false
      case "turn_resumed":
        this.notice("The run moved to another node and goes on.")
        return false
      case "turn_recovered":
        this.notice("The run was interrupted and goes on.")
        return false
      case "file_presented": {
        const name = [event.name, event.path, event.file?.path].find((value) => typeof value === "string") ?? "a file"
        this.notice(`File: ${name}`, "info", httpUrl(event.url ?? event.file?.url)?.href)
        return false
      }
      default:
        return false
    }
  }

  private response(frame: Frame) {
    const outcome = (frame.outcome ?? {}) as any
    const result = typeof outcome.result === "object" && outcome.result !== null ? outcome.result : undefined
    const said: [string, "error" | "end"] = result === undefined && typeof outcome.error === "string"
      ? [`The run failed: ${outcome.error}`, "error"]
      : result?.stopped === "input_required"
      ? ["The run is waiting for your input.", "end"]
      : result?.stopped === "spend_limit"
      ? ["The run stopped: its spend limit is reached.", "error"]
      : result?.stopped === "turn_limit"
      ? ["The run stopped: it reached its turn limit.", "error"]
      : typeof result?.error === "string"
      ? [`The run ended with an error: ${result.error}`, "error"]
      : typeof outcome.error === "string"
      ? [`The run ended with an error: ${outcome.error}`, "error"]
      : ["The run finished.", "end"]
    this.entries.set(`r${String(frame.id)}`, { kind: "notice", text: said[0], tone: said[1] })
  }
}
