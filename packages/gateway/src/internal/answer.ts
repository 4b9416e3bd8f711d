/**
 * A translated answer put together from an upstream's stream, announcing
 * each step as the event the outbound stream encoders take (a block starts,
 * grows by deltas, ends; then `done` with the whole message). The upstream
 * decoders only say what arrived; opening and closing blocks in order, and
 * the finished tool-call arguments, are done here once for all three.
 */
import type { ModelClient } from "@agent-runtime/models"
import * as Canonical from "../Canonical.ts"
import type { TokenUsage } from "./tokenUsage.ts"

type Kind = "text" | "thinking" | "toolCall"

/** The canonical usage of upstream token counts (cost is the usage record's business, not the answer's). */
export const usageOf = (tokens: TokenUsage | undefined): Canonical.Usage => {
  const usage = Canonical.emptyUsage()
  if (tokens === undefined) return usage
  return {
    ...usage,
    input: tokens.input,
    output: tokens.output,
    cacheRead: tokens.cacheRead,
    cacheWrite: tokens.cacheWrite,
    ...(tokens.reasoning === undefined ? {} : { reasoning: tokens.reasoning }),
    totalTokens: tokens.input + tokens.output + tokens.cacheRead + tokens.cacheWrite
  }
}

/** A finished upstream answer (non-streamed) as the canonical message. */
export const message = (
  content: Array<Canonical.Content>,
  stopReason: Canonical.StopReason,
  tokens: TokenUsage | undefined
): Canonical.AssistantMessage => ({
  ...Canonical.historyMessage(content),
  stopReason,
  usage: usageOf(tokens)
})

export class Answer {
  readonly message: Canonical.AssistantMessage = Canonical.historyMessage([])
  /** Token counts as last reported (messages reports them twice, responses once, chat at the end). */
  tokens: TokenUsage | undefined
  private open: Kind | undefined
  private args = ""
  private stopReason: Canonical.StopReason | undefined
  private readonly emit: (event: ModelClient.ModelEvent) => void

  constructor(emit: (event: ModelClient.ModelEvent) => void) {
    this.emit = emit
    emit({ type: "start", partial: this.message })
  }

  private get index() {
    return this.message.content.length - 1
  }

  private openBlock(block: Canonical.Content) {
    this.end()
    this.message.content.push(block)
    this.open = block.type
    const contentIndex = this.index
    const partial = this.message
    this.emit(
      block.type === "text"
        ? { type: "text_start", contentIndex, partial }
        : block.type === "thinking"
        ? { type: "thinking_start", contentIndex, partial }
        : { type: "toolcall_start", contentIndex, partial }
    )
  }

  /** Text; opens a text block unless one is open. */
  text(delta: string) {
    if (this.open !== "text") this.openBlock({ type: "text", text: "" })
    if (delta === "") return
    const block = this.message.content[this.index] as Extract<Canonical.Content, { type: "text" }>
    block.text += delta
    this.emit({ type: "text_delta", contentIndex: this.index, delta, partial: this.message })
  }

  /** Reasoning; opens a reasoning block unless one is open. */
  thinking(delta: string) {
    if (this.open !== "thinking") this.openBlock({ type: "thinking", thinking: "" })
    if (delta === "") return
    const block = this.message.content[this.index] as Extract<Canonical.Content, { type: "thinking" }>
    block.thinking += delta
    this.emit({ type: "thinking_delta", contentIndex: this.index, delta, partial: this.message })
  }

  /** The open reasoning block's signature (what lets its upstream verify it when replayed). */
  signature(signature: string) {
    if (this.open !== "thinking") this.openBlock({ type: "thinking", thinking: "" })
    const block = this.message.content[this.index] as Extract<Canonical.Content, { type: "thinking" }>
    block.thinkingSignature = (block.thinkingSignature ?? "") + signature
  }

  /** A redacted reasoning block, whole: only its opaque data. */
  redacted(data: string) {
    this.openBlock({ type: "thinking", thinking: "", thinkingSignature: data, redacted: true })
    this.end()
  }

  /** Opens a tool call; its arguments follow as JSON text. */
  toolCall(id: string, name: string) {
    this.openBlock({ type: "toolCall", id, name, arguments: {} })
    this.args = ""
  }

  /** Whether the open tool call has had any argument text. */
  get hasArguments() {
    return this.args !== ""
  }

  arguments(delta: string) {
    if (this.open !== "toolCall" || delta === "") return
    this.args += delta
    this.emit({ type: "toolcall_delta", contentIndex: this.index, delta, partial: this.message })
  }

  /** Closes the open block, if any. */
  end() {
    const kind = this.open
    if (kind === undefined) return
    this.open = undefined
    const contentIndex = this.index
    const block = this.message.content[contentIndex]!
    const partial = this.message
    if (block.type === "text") this.emit({ type: "text_end", contentIndex, content: block.text, partial })
    else if (block.type === "thinking") {
      this.emit({ type: "thinking_end", contentIndex, content: block.thinking, partial })
    } else {
      block.arguments = Canonical.parseArguments(this.args)
      this.emit({ type: "toolcall_end", contentIndex, toolCall: block, partial })
    }
  }

  stop(reason: Canonical.StopReason) {
    this.stopReason = reason
  }

  /** Ends the answer: the open block, then `done` with the message, its stop reason and usage. */
  done() {
    this.end()
    const message = this.message
    message.stopReason = this.stopReason ??
      (message.content.some((block) => block.type === "toolCall") ? "toolUse" : "stop")
    message.usage = usageOf(this.tokens)
    const reason = message.stopReason === "length" || message.stopReason === "toolUse" ? message.stopReason : "stop"
    this.emit({ type: "done", reason, message })
  }
}
