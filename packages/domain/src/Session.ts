/**
 * What can be read of one agent's session: state, polled events, history,
 * files; and the short-lived browser tokens that read them from a browser.
 */
import { Schema } from "effect"
import { AgentResume } from "./Agent.ts"
import { Timestamp } from "./Common.ts"
import { EventEntry } from "./Events.ts"
import { RequestRecord } from "./Run.ts"
import { JsonObject } from "./Validation.ts"

export { EventEntry } from "./Events.ts"

/** GET /v1/agents/{id}/state. */
export class SessionState extends Schema.Class<SessionState>("SessionState")({
  cursor: Schema.Number.annotations({ description: "latest event id" }),
  requests: Schema.Array(RequestRecord).annotations({
    description: "recent: the running and the latest settled, with outcomes"
  }),
  resume: Schema.optional(Schema.NullOr(AgentResume).annotations({ description: "for an agent no node holds" }))
}) {}

/** Events answered once as JSON (poll=1). */
export class EventPoll extends Schema.Class<EventPoll>("EventPoll")({
  cursor: Schema.Number.annotations({ description: "send as Last-Event-ID next" }),
  events: Schema.Array(EventEntry)
}) {}

/** A message of history (its fields: not shown). */
export const HistoryMessage = JsonObject.annotations({ identifier: "HistoryMessage" })
export type HistoryMessage = typeof HistoryMessage.Type

export class HistoryEntry extends Schema.Class<HistoryEntry>("HistoryEntry")({
  index: Schema.Int,
  message: HistoryMessage
}) {}

/** A page of history: whole turns, oldest first, about 4 MB at most. */
export class HistoryPage extends Schema.Class<HistoryPage>("HistoryPage")({
  entries: Schema.Array(HistoryEntry),
  next: Schema.NullOr(Schema.Number).annotations({ description: "pass as `before` for the older page" }),
  total: Schema.Number.annotations({ description: "messages including the running turn's" }),
  split: Schema.optional(
    Schema.Boolean.annotations({
      description: "true when one turn alone exceeded a page, so the page starts inside it"
    })
  )
}) {}

/** The whole history, oldest first (GET /clients/{id}/history without `limit` or `before`). */
export class History extends Schema.Class<History>("History")({
  messages: Schema.Array(HistoryMessage)
}) {}

/**
 * The most message JSON the whole history is answered in, as much as `initialMessages` may start an agent
 * with: past it the answer would be built whole in memory for one response, so it is refused (413) and
 * pages (`limit`, `before`) read it instead.
 */
export const maxWholeHistoryBytes = 16 * 1024 * 1024

export const BrowserScope = Schema.Literal("events", "state", "history", "inputs")
export type BrowserScope = typeof BrowserScope.Type

export class BrowserToken extends Schema.Class<BrowserToken>("BrowserToken")({
  token: Schema.String.annotations({ description: "send as bearer, never in a URL" }),
  expiresAt: Timestamp,
  agentId: Schema.String,
  url: Schema.optional(Schema.String.annotations({ description: "where the browser reaches the runtime" }))
}) {}

/** Body of POST /v1/agents/{id}/browser-tokens; all optional. */
export class BrowserTokenInput extends Schema.Class<BrowserTokenInput>("BrowserTokenInput")({
  ttlSeconds: Schema.optional(
    Schema.Int.pipe(Schema.between(5, 3600, { message: () => "must be an integer from 5 to 3600" })).annotations({
      description: "5 to 3600, default 900; nothing revokes it sooner"
    })
  ),
  scopes: Schema.optional(Schema.Array(BrowserScope).annotations({ description: "default all four" })),
  events: Schema.optional(
    Schema.Array(Schema.String).pipe(Schema.maxItems(64, { message: () => "at most 64 event types" })).annotations({
      description: "event types, at most 64; default every type except the runtime's own"
    })
  ),
  redact: Schema.optional(
    Schema.Array(Schema.Literal("usage.cost")).annotations({
      description: "usage.cost hides a response's provider cost in messages, snapshots, history"
    })
  ),
  subject: Schema.optional(
    Schema.String.pipe(Schema.maxLength(200, { message: () => "must be at most 200 characters" }))
  )
}) {}

export const defaultBrowserTokenTtlSeconds = 900

/** A file put in the agent's workspace; attach it to a prompt as {path}. */
export class Upload extends Schema.Class<Upload>("Upload")({
  path: Schema.String.annotations({ description: "where the agent sees the file" }),
  version: Schema.Number,
  size: Schema.Number.annotations({ description: "bytes" }),
  updatedAt: Timestamp,
  by: Schema.optional(Schema.String),
  contentType: Schema.String
}) {}

/** A file of a volume; contentType is as uploaded, else sniffed from the first bytes and name. */
export class VolumeFile extends Schema.Class<VolumeFile>("VolumeFile")({
  ...Upload.fields
}) {}
