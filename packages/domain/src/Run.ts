/**
 * Runs: the prompt that starts one, the request record every request gets,
 * and its outcome. The outcome is the source of truth; events are for
 * display only.
 */
import { Schema } from "effect"
import { StringMap, Timestamp } from "./Common.ts"
import { Input, Sender } from "./Input.ts"
import { base64DecodedBytes, jsonBytes, JsonObject, KiB, MiB } from "./Validation.ts"

/**
 * A spend limit: counts from when it is set; a new value restarts at zero.
 * No other fields are allowed.
 */
export class SpendLimitInput extends Schema.Class<SpendLimitInput>("SpendLimitInput")(
  Schema.Struct({
    usd: Schema.Number.pipe(
      Schema.between(0, 1000000, { message: () => "must be between 0 and 1000000" })
    ).annotations({ description: "USD, 0 to 1000000" })
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/**
 * Metadata of a prompt: at most 16 keys of 1 to 64 characters, values at
 * most 512 characters. Kept on the user message and the request, sent with
 * the run's webhook events, hidden from the model.
 */
export const PromptMetadata = StringMap.pipe(
  Schema.filter((metadata) => {
    const keys = Object.keys(metadata)
    if (keys.length > 16) return `at most 16 keys, got ${keys.length}`
    for (const key of keys) {
      if (key.length < 1 || key.length > 64) {
        return { path: [key], message: "keys must be 1 to 64 characters" }
      }
      if (metadata[key].length > 512) return { path: [key], message: "values must be at most 512 characters" }
    }
    return true
  }, {
    jsonSchema: {
      maxProperties: 16,
      propertyNames: { minLength: 1, maxLength: 64 },
      additionalProperties: { type: "string", maxLength: 512 }
    }
  })
).annotations({
  identifier: "PromptMetadata",
  description: "at most 16 keys of 1 to 64 characters, values at most 512 characters; hidden from the model"
})
export type PromptMetadata = typeof PromptMetadata.Type

/** A file already in the agent's mounts. */
export class PromptFilePath extends Schema.Class<PromptFilePath>("PromptFilePath")({
  path: Schema.String.pipe(Schema.minLength(1))
}) {}

/** A file sent inline, saved under uploads/<requestId>/ in the workspace. */
export class PromptFileData extends Schema.Class<PromptFileData>("PromptFileData")({
  data: Schema.String.annotations({ description: "base64" }),
  name: Schema.optional(Schema.String),
  contentType: Schema.optional(Schema.String)
}) {}

export const PromptFile = Schema.Union(PromptFilePath, PromptFileData)
export type PromptFile = typeof PromptFile.Type

/** At most 4 MiB (decoded) across a message's inline files. */
export const maxInlineFileBytes = 4 * MiB

/**
 * At most 20. The 4 MiB bound on inline data is the service's to enforce (`inlineBytes`), not the schema's:
 * beyond it the answer is 413, not a 400 quoting megabytes of base64 back.
 */
export const PromptFiles = Schema.Array(PromptFile).pipe(
  Schema.maxItems(20, { message: () => "at most 20 files" })
).annotations({
  description: "at most 20; each {path} or {data, name?, contentType?}; inline data at most 4 MiB in total (413)"
})

/** The decoded bytes of a message's inline files, to hold against `maxInlineFileBytes`. */
export const inlineBytes = (files: ReadonlyArray<PromptFile>) =>
  files.reduce((sum, file) => sum + ("data" in file ? base64DecodedBytes(file.data) : 0), 0)
export type PromptFiles = typeof PromptFiles.Type

/** How large an output schema may be, as JSON. */
export const maxOutputSchemaBytes = 64 * KiB

/**
 * A structured answer: the model answers by calling `final_output`, whose arguments are this JSON Schema,
 * checked by the runtime. The schema describes an object; whether it compiles is checked when it arrives.
 */
export class OutputSpec extends Schema.Class<OutputSpec>("OutputSpec")(
  Schema.Struct({
    schema: JsonObject.pipe(
      Schema.filter((schema) => {
        if (schema.type !== "object") return 'must describe an object (type: "object"); wrap a list or a value'
        const size = jsonBytes(schema)
        return size <= maxOutputSchemaBytes || `is ${size} bytes of JSON; at most ${maxOutputSchemaBytes}`
      })
    ).annotations({ description: "a JSON Schema (draft 2020-12 or 07) of type object, at most 64 KB as JSON" })
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** queue: runs as the next turn; steer: the running turn takes it after its current step. */
export const WhileRunning = Schema.Literal("queue", "steer")
export type WhileRunning = typeof WhileRunning.Type

export class PromptInput extends Schema.Class<PromptInput>("PromptInput")({
  text: Schema.String,
  actor: Schema.optional(Schema.String.annotations({ description: "`act` in tool identity tokens" })),
  from: Schema.optional(Sender),
  requestId: Schema.optional(
    Schema.String.pipe(Schema.minLength(1)).annotations({
      description: "idempotency: the same id returns the same request"
    })
  ),
  allowDisconnected: Schema.optional(
    Schema.Boolean.annotations({
      description: "run though the agent's tools need an application and none is connected"
    })
  ),
  whileRunning: Schema.optional(WhileRunning.annotations({ description: "queue (default) or steer" })),
  spendLimit: Schema.optional(SpendLimitInput),
  metadata: Schema.optional(PromptMetadata),
  files: Schema.optional(PromptFiles),
  output: Schema.optional(
    OutputSpec.annotations({
      description: "answer through final_output with arguments of this schema; outcome.result.output holds them"
    })
  )
}) {}

/** A turn on the history as it is, without a new user message (request method continue). */
export class ContinueInput extends Schema.Class<ContinueInput>("ContinueInput")(
  Schema.Struct({
    requestId: PromptInput.fields.requestId,
    actor: PromptInput.fields.actor,
    allowDisconnected: PromptInput.fields.allowDisconnected
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** Code run with the agent's code-mode tools, without the model (request method execute). */
export class ExecuteInput extends Schema.Class<ExecuteInput>("ExecuteInput")(
  Schema.Struct({
    code: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100_000)).annotations({
      description: "JavaScript, run as the body of an async function; `tools.<name>(args)` calls a tool"
    }),
    timeoutMs: Schema.optional(
      Schema.Int.pipe(Schema.between(1000, 900_000)).annotations({
        description: "how long the code may run, awaiting tools included: 1000 to 900000 ms (default 30000)"
      })
    ),
    actor: PromptInput.fields.actor,
    requestId: PromptInput.fields.requestId,
    allowDisconnected: PromptInput.fields.allowDisconnected,
    metadata: PromptInput.fields.metadata
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** resume = the runtime continuing a turn that waited on input once its inputs settled. */
export const RequestMethod = Schema.Literal(
  "prompt",
  "execute",
  "status",
  "abort",
  "continue",
  "steer",
  "configure",
  "resume"
)
export type RequestMethod = typeof RequestMethod.Type

export const RequestState = Schema.Literal("running", "completed")
export type RequestState = typeof RequestState.Type

/** Why a turn stopped early: waiting on input, at a spend limit, or at a run's turn limit. */
export const StoppedReason = Schema.Literal("input_required", "spend_limit", "turn_limit")
export type StoppedReason = typeof StoppedReason.Type

/** The run-level failure codes; others may be added. */
export const RunErrorCode = Schema.Literal(
  "cancelled",
  "aborted",
  "model_key_missing",
  "model_key_invalid",
  "output_missing",
  "output_invalid",
  "spend_limit"
)
export type RunErrorCode = typeof RunErrorCode.Type

/** A run's error; run failures carry status 0 (branch on code), refusals the HTTP status. */
export class RunError extends Schema.Class<RunError>("RunError")({
  code: Schema.String,
  message: Schema.String,
  uncertain: Schema.optional(Schema.Boolean),
  status: Schema.Int.annotations({ description: "0 for run failures; the HTTP status of a refusal" })
}) {}

/** One of the first 100 tool calls of a run. */
export class ToolCallSummary extends Schema.Class<ToolCallSummary>("ToolCallSummary")({
  tool: Schema.String,
  toolCallId: Schema.optional(Schema.String),
  innerCallId: Schema.optional(Schema.String),
  ok: Schema.Boolean,
  code: Schema.optional(Schema.String),
  agentId: Schema.optional(Schema.String.annotations({ description: "a delegate call's sub-agent" }))
}) {}

/** A file a run's tools wrote: its path as the agent sees it, at the version written last. */
export class WrittenFile extends Schema.Class<WrittenFile>("WrittenFile")({
  path: Schema.String,
  version: Schema.Number,
  size: Schema.Number
}) {}

/** A file a run presented (present_file), as in its `file_presented` event. */
export class PresentedFile extends Schema.Class<PresentedFile>("PresentedFile")({
  path: Schema.String,
  name: Schema.String,
  size: Schema.Number,
  contentType: Schema.String,
  url: Schema.String.annotations({ description: "a signed download link; it expires" }),
  expiresAt: Schema.Number.annotations({ description: "Unix seconds" })
}) {}

/** The result of a model run (prompt, continue, steer, resume): `outcome.result`. */
export class RunResult extends Schema.Class<RunResult>("RunResult")({
  reply: Schema.optional(Schema.String.annotations({ description: "final assistant message text" })),
  output: Schema.optional(
    Schema.Unknown.annotations({ description: "a structured prompt's answer: final_output's arguments" })
  ),
  replyIndex: Schema.optional(Schema.Number.annotations({ description: "the reply's index in history" })),
  messages: Schema.optional(Schema.Number.annotations({ description: "history size after the run" })),
  error: Schema.optional(
    Schema.NullOr(Schema.String).annotations({ description: "the model's error after retries, or null" })
  ),
  stopped: Schema.optional(StoppedReason),
  inputs: Schema.optional(Schema.Array(Input).annotations({ description: "pending inputs when input_required" })),
  files: Schema.optional(
    Schema.Array(WrittenFile).pipe(Schema.maxItems(100)).annotations({ description: "files written, at most 100" })
  ),
  presented: Schema.optional(
    Schema.Array(PresentedFile).pipe(Schema.maxItems(20)).annotations({ description: "files presented, at most 20" })
  ),
  toolErrors: Schema.optional(Schema.Array(Schema.Unknown)),
  sourceErrors: Schema.optional(
    Schema.Array(Schema.Unknown).annotations({ description: "tool sources that could not be listed" })
  ),
  toolCalls: Schema.optional(
    Schema.Array(ToolCallSummary).pipe(Schema.maxItems(100)).annotations({ description: "the first 100 calls" })
  )
}) {}

/**
 * How a request ended. `result` is any value (a model run's is a RunResult);
 * `error` without `result` means the runtime could not carry out the request;
 * `uncertain` means a restart cut it short and its effects are unknown.
 */
export class RunOutcome extends Schema.Class<RunOutcome>("RunOutcome")({
  result: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.String),
  uncertain: Schema.optional(Schema.Boolean)
}) {}

/** W3C trace context of a request, when the tenant exports telemetry. */
export class TraceContext extends Schema.Class<TraceContext>("TraceContext")({
  traceId: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{32}$/)),
  spanId: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{16}$/)),
  parentSpanId: Schema.optional(Schema.String.pipe(Schema.pattern(/^[0-9a-f]{16}$/))),
  sampled: Schema.Boolean
}) {}

export class RequestRecord extends Schema.Class<RequestRecord>("RequestRecord")({
  id: Schema.String,
  method: RequestMethod,
  state: RequestState,
  fingerprint: Schema.String,
  startedAt: Schema.optional(Timestamp),
  began: Schema.optional(Schema.Number),
  endedAt: Schema.optional(Timestamp),
  prompt: Schema.optional(Schema.String),
  code: Schema.optional(
    Schema.String.annotations({
      description: "the run failure code of an ended request's error, when it has one (see RunErrorCode)"
    })
  ),
  suspension: Schema.optional(
    Schema.String.annotations({ description: "for resume: the request whose turn waited" })
  ),
  metadata: Schema.optional(StringMap),
  steeredInto: Schema.optional(
    Schema.String.annotations({ description: "the request of the turn that took a steered prompt; outcome is shared" })
  ),
  outcome: Schema.optional(RunOutcome),
  error: Schema.optional(
    Schema.String.annotations({ description: "the ended request's error; absent on success" })
  ),
  stopped: Schema.optional(StoppedReason),
  trace: Schema.optional(TraceContext)
}) {}

/** An answered input and the run resuming its turn (null until the suspension's last input settled). */
export class Answered extends Schema.Class<Answered>("Answered")({
  input: Input,
  request: Schema.NullOr(RequestRecord)
}) {}

export class AnsweredAll extends Schema.Class<AnsweredAll>("AnsweredAll")({
  inputs: Schema.Array(Input),
  requests: Schema.Array(RequestRecord)
}) {}
