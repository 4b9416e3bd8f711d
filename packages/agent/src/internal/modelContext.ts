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
 * What the model sees of one history, worked out as it grows: every step of every turn sends the whole
 * history again, and a long one made each step convert, measure and search all its entries. Kept per
 * history array. Its entries change only through `setEntry` and `replaceEntries`, which tell this what to
 * work out again: comparing every entry on each step instead cost a turn about 1% of its CPU at 150 entries.
 */
interface Seen {
  /** The entries worked out, by identity. */
  readonly entries: Array<StoredMessage>
  readonly messages: Array<ModelClient.Message>
  /** Each entry's estimated tokens plus all before it. */
  readonly sums: Array<number>
  /** Where the last compaction summary is (0 when there is none). */
  start: number
}

const seenHistories = new WeakMap<ReadonlyArray<StoredMessage>, Seen>()

/** Forgets what was worked out from entry `index` on. */
const forgetFrom = (seen: Seen, index: number) => {
  if (index >= seen.entries.length) return
  seen.entries.length = index
  seen.messages.length = index
  seen.sums.length = index
  seen.start = Math.max(0, seen.entries.findLastIndex((message) => message.role === "compactionSummary"))
}

const seenOf = (history: ReadonlyArray<StoredMessage>): Seen => {
  let seen = seenHistories.get(history)
  if (seen === undefined) {
    seen = { entries: [], messages: [], sums: [], start: 0 }
    seenHistories.set(history, seen)
  }
  // The last entry worked out is checked all the same: a change made some other way is then seen at the end,
  // where changes are made, and everything is worked out again.
  const last = seen.entries.length - 1
  if (last >= 0 && seen.entries[last] !== history[last]) forgetFrom(seen, 0)
  for (let index = seen.entries.length; index < history.length; index++) {
    const entry = history[index]!
    const message = toModelMessage(entry)
    seen.entries.push(entry)
    seen.messages.push(message)
    seen.sums.push((index === 0 ? 0 : seen.sums[index - 1]!) + estimateTokens(message))
    if (entry.role === "compactionSummary") seen.start = index
  }
  return seen
}

/** Sets history entry `index`: appends it at the end, or replaces the one there (a kept partial answer). */
export const setEntry = (history: Array<StoredMessage>, index: number, message: StoredMessage) => {
  history[index] = message
  const seen = seenHistories.get(history)
  if (seen !== undefined) forgetFrom(seen, index)
}

/** Replaces every entry of a history (read again from the journal). */
export const replaceEntries = (history: Array<StoredMessage>, entries: ReadonlyArray<StoredMessage>) => {
  history.splice(0, history.length, ...entries)
  seenHistories.delete(history)
}

/** The messages the model sees: from the last compaction summary on, which stands in for all before it. */
export const modelContext = (history: ReadonlyArray<StoredMessage>): Array<ModelClient.Message> => {
  const seen = seenOf(history)
  return seen.messages.slice(seen.start)
}

/** The estimate of what the model sees of the history. */
export const contextTokens = (history: ReadonlyArray<StoredMessage>) => {
  const seen = seenOf(history)
  if (seen.sums.length === 0) return 0
  return seen.sums[seen.sums.length - 1]! - (seen.start === 0 ? 0 : seen.sums[seen.start - 1]!)
}
