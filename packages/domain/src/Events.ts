/**
 * The display event stream of an agent (text/event-stream, or JSON when
 * polling). Events are for display only; the request outcome is the source
 * of truth. New event types may be added and are to be ignored; the fields
 * of each event type beyond those the spec lists are not shown, so events
 * stay open records.
 */
import { Schema } from "effect"
import { RunOutcome } from "./Run.ts"
import { JsonObject } from "./Validation.ts"

export const StreamEventType = Schema.Literal(
  "turn_opened",
  "agent_start",
  "agent_end",
  "turn_start",
  "turn_end",
  "message_start",
  "message_end",
  "message_update",
  "message_retracted",
  "tool_execution_start",
  "tool_execution_update",
  "tool_execution_end",
  "file_presented",
  "input_required",
  "input_resolved",
  "auto_retry_start",
  "auto_retry_end",
  "compaction_start",
  "compaction_end",
  "turn_resumed",
  "turn_recovered",
  "subagent_start",
  "subagent_event",
  "subagent_end",
  "mcp"
)
export type StreamEventType = typeof StreamEventType.Type

/** The runtime's own event types, left out of browser-token streams by default. */
export const RuntimeEventType = Schema.Literal("codemode", "compaction_usage", "spend_limit_reached")
export type RuntimeEventType = typeof RuntimeEventType.Type

/** Kinds of `message_update` deltas (in `assistantMessageEvent.type`). */
export const AssistantDeltaType = Schema.Literal("text_delta", "thinking_delta", "toolcall_delta")
export type AssistantDeltaType = typeof AssistantDeltaType.Type

/** One stream event: a `type` and fields of that type (open; unknown types are to be ignored). */
export const StreamEvent = Schema.Struct(
  { type: Schema.String.annotations({ description: "a StreamEventType, or a newer one" }) },
  JsonObject
).annotations({ identifier: "StreamEvent" })
export type StreamEvent = typeof StreamEvent.Type

/** A buffered event as polling and agent detail list it: the cursor and the frame. */
export class EventEntry extends Schema.Class<EventEntry>("EventEntry")({
  id: Schema.Number.annotations({ description: "the event's cursor" }),
  data: Schema.Unknown
}) {}

/** The first frame of a stream (`event: ready`). */
export class ReadyFrame extends Schema.Class<ReadyFrame>("ReadyFrame")({
  version: Schema.Union(Schema.String, Schema.Number),
  agentId: Schema.String,
  /** The application connection this stream is (null on a watcher's stream, watch=1, and on /v1 streams). */
  connection: Schema.NullOr(Schema.String),
  /** On a /clients stream: the hash of the tools the application last listed (null when none were). */
  toolsHash: Schema.optional(Schema.NullOr(Schema.String))
}) {}

/**
 * `event: reconnect`: the runtime closes the stream on purpose (a drain, or
 * the agent moved); reconnect at once. Fields: not shown.
 */
export const ReconnectFrame = JsonObject.annotations({ identifier: "ReconnectFrame" })
export type ReconnectFrame = typeof ReconnectFrame.Type

export class EventFrame extends Schema.Class<EventFrame>("EventFrame")({
  type: Schema.Literal("event"),
  requestId: Schema.optional(Schema.NullOr(Schema.String).annotations({ description: "the run" })),
  event: StreamEvent
}) {}

/** A request settled. Browser tokens see an outcome only as whether and why its run stopped. */
export class ResponseFrame extends Schema.Class<ResponseFrame>("ResponseFrame")({
  type: Schema.Literal("response"),
  id: Schema.String.annotations({ description: "the request id" }),
  outcome: RunOutcome
}) {}

/** Sent instead of replay when the cursor is behind the buffer. */
export class SnapshotFrame extends Schema.Class<SnapshotFrame>("SnapshotFrame")({
  type: Schema.Literal("snapshot"),
  cursor: Schema.Number,
  requestId: Schema.optional(Schema.NullOr(Schema.String)),
  turn: Schema.Array(JsonObject).annotations({
    description: "messages finished plus the partial message streaming now"
  })
}) {}

/** The `data:` of a stream frame with an `id:` line. */
export const StreamFrame = Schema.Union(EventFrame, ResponseFrame, SnapshotFrame)
export type StreamFrame = typeof StreamFrame.Type
