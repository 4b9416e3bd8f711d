/**
 * What the model sees of an agent's history: each stored entry as a protocol
 * message (the runtime's notes taken off, the sender told in a block only the
 * runtime writes), from the last compaction summary on, and its rough size.
 */
import type { ModelClient } from "@agent-runtime/models"
import type { StoredMessage } from "../Turn.ts"

/** The sender, in a block only the runtime writes: the same marker in user text is neutralised. */
const senderMarker = "\u27E8runtime\u27E9"
const neutralise = (text: string) => text.split(senderMarker).join("\u27E8runtime-quoted\u27E9")

/** What the model sees of a history entry: the protocol message, without the runtime's notes. */
export const toModelMessage = (message: StoredMessage): ModelClient.Message => {
  if (message.role === "compactionSummary") {
    return {
      role: "user",
      content: `${senderMarker} summary of the conversation so far:\n${message.summary}`,
      timestamp: message.timestamp
    }
  }
  if (message.role !== "user") {
    const { from: _from, metadata: _metadata, requestId: _requestId, ...rest } = message as any
    return rest
  }
  const text = typeof message.content === "string"
    ? message.content
    : message.content.map((part) => part.type === "text" ? part.text : "").join("")
  const images = typeof message.content === "string" ? [] : message.content.filter((part) => part.type === "image")
  const sender = message.from === undefined ?
    "" :
    `${senderMarker} message from ${
      [message.from.name, message.from.username === undefined ? undefined : `@${message.from.username}`]
        .filter((part) => part !== undefined).join(" ")
    } (id ${message.from.id})\n`
  const content = sender + neutralise(text)
  return {
    role: "user",
    content: images.length === 0 ? content : [{ type: "text", text: content }, ...images],
    timestamp: message.timestamp
  }
}

/** A rough token count (4 characters a token), enough to decide when to compact. */
export const estimateTokens = (value: unknown) => Math.ceil(JSON.stringify(value).length / 4)

/**
 * Each history entry as the model sees it and its size, worked out once: an entry is never changed once
 * appended, and every step of every turn sends the whole history again.
 */
const seen = new WeakMap<StoredMessage, { readonly message: ModelClient.Message; readonly tokens: number }>()
const seenOf = (message: StoredMessage) => {
  let found = seen.get(message)
  if (found === undefined) {
    const modelMessage = toModelMessage(message)
    found = { message: modelMessage, tokens: estimateTokens(modelMessage) }
    seen.set(message, found)
  }
  return found
}

/** The history the model sees: from the last compaction summary on, which stands in for all before it. */
const sinceCompaction = (history: ReadonlyArray<StoredMessage>) => {
  const start = history.findLastIndex((message) => message.role === "compactionSummary")
  return start === -1 ? history : history.slice(start)
}

/** The messages the model sees. */
export const modelContext = (history: ReadonlyArray<StoredMessage>) =>
  sinceCompaction(history).map((message) => seenOf(message).message)

/** The estimate of what the model sees of the history, each entry's counted once. */
export const contextTokens = (history: ReadonlyArray<StoredMessage>) =>
  sinceCompaction(history).reduce((sum, message) => sum + seenOf(message).tokens, 0)
