/**
 * Stateless runs: one call with an agent's configuration and an input, one
 * answer out, nothing carried over. A run is kept (its record, events and
 * messages) for its retention window after it ends, then deleted with
 * everything it wrote.
 */
import { Schema } from "effect"
import { AgentContext, AgentInput, definitionConflict, DelegateSettings, ThinkingLevel } from "./Agent.ts"
import { Timestamp } from "./Common.ts"
import { Input, Sender } from "./Input.ts"
import {
  OutputSpec,
  PresentedFile,
  PromptInput,
  PromptMetadata,
  SpendLimitInput,
  ToolCallSummary,
  WrittenFile
} from "./Run.ts"
import { RunUsage } from "./Webhook.ts"

/** A run's id: `run_` and 26 characters. */
export const RunId = Schema.String.pipe(Schema.pattern(/^run_[A-Za-z0-9]+$/)).annotations({
  description: "run_ followed by 26 characters"
})

/** The built-ins a run may have: none of those that wait on a person (ask_user, schedule). */
export const RunBuiltin = Schema.Literal("web_fetch", "web_search", "delegate")
export type RunBuiltin = typeof RunBuiltin.Type

/** How long an ended run is kept: 60 s to 7 days, a day by default. */
export const minRetentionSeconds = 60
export const maxRetentionSeconds = 604_800
export const defaultRetentionSeconds = 86_400

/** How long a create may wait for the run's end: `true` is this long. */
export const maxCreateWaitSeconds = 60

export class TextPart extends Schema.Class<TextPart>("RunTextPart")({
  type: Schema.Literal("text"),
  text: Schema.String
}) {}

export class FilePart extends Schema.Class<FilePart>("RunFilePart")({
  type: Schema.Literal("file"),
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  data: Schema.String.annotations({ description: "base64" }),
  contentType: Schema.optional(Schema.String)
}) {}

/** A run's input: text, or parts of text and inline files (at most 4 MiB of files in all). */
export const RunInputValue = Schema.Union(
  Schema.String,
  Schema.Array(Schema.Union(TextPart, FilePart)).pipe(Schema.minItems(1), Schema.maxItems(100))
).annotations({
  description: "a string, or parts: {type: text, text} and {type: file, name, data (base64), contentType?}; " +
    "files at most 4 MiB in all, saved in the run's workspace"
})
export type RunInputValue = typeof RunInputValue.Type

export class RunInput extends Schema.Class<RunInput>("RunInput")(
  Schema.Struct({
    input: RunInputValue,
    definition: AgentInput.fields.definition,
    model: AgentInput.fields.model,
    systemPrompt: AgentInput.fields.systemPrompt,
    systemPromptAppend: AgentInput.fields.systemPromptAppend,
    thinkingLevel: Schema.optional(ThinkingLevel),
    builtins: Schema.optional(
      Schema.Array(RunBuiltin).pipe(Schema.maxItems(8)).annotations({
        description: "web_fetch, web_search, delegate; not with a definition"
      })
    ),
    delegate: Schema.optional(DelegateSettings),
    keyScope: AgentInput.fields.keyScope,
    modelHeaders: AgentInput.fields.modelHeaders,
    spendLimit: Schema.optional(SpendLimitInput.annotations({ description: "the run's budget" })),
    subject: AgentInput.fields.subject,
    context: Schema.optional(AgentContext),
    fileTools: Schema.optional(
      Schema.Boolean.annotations({
        description: "true: a workspace and the file tools; without it (or files in the input) a run has no volume"
      })
    ),
    maxOutputTokens: Schema.optional(
      Schema.Int.pipe(Schema.between(1, 1_000_000)).annotations({ description: "per model response" })
    ),
    temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 2))),
    output: Schema.optional(OutputSpec),
    actor: PromptInput.fields.actor,
    from: Schema.optional(Sender),
    metadata: Schema.optional(PromptMetadata),
    retentionSeconds: Schema.optional(
      Schema.Int.pipe(Schema.between(minRetentionSeconds, maxRetentionSeconds)).annotations({
        description: "how long the ended run is kept: 60 to 604800 seconds (default 86400)"
      })
    ),
    wait: Schema.optional(
      Schema.Union(Schema.Boolean, Schema.Number.pipe(Schema.between(0, maxCreateWaitSeconds))).annotations({
        description: "true (60 s) or seconds to wait for the run's end: 200 with the ended run, else 202"
      })
    )
  }).pipe(Schema.filter((input) => definitionConflict(input, "a run")))
) {}

export const RunStatus = Schema.Literal("running", "completed", "failed", "input_required")
export type RunStatus = typeof RunStatus.Type

export class RunFailure extends Schema.Class<RunFailure>("RunFailure")({
  code: Schema.String.annotations({
    description: "aborted, output_missing, output_invalid, model_key_missing, model_key_invalid, spend_limit, " +
      "turn_limit, failed (the model's or the runtime's error)"
  }),
  message: Schema.String,
  uncertain: Schema.optional(
    Schema.Boolean.annotations({ description: "a restart cut a tool call short: whether it took effect is unknown" })
  )
}) {}

const runFields = {
  id: RunId,
  status: RunStatus,
  model: Schema.String,
  text: Schema.optional(Schema.String.annotations({ description: "the model's last text" })),
  output: Schema.optional(Schema.Unknown.annotations({ description: "the structured answer, with `output`" })),
  error: Schema.optional(RunFailure),
  usage: Schema.NullOr(RunUsage).annotations({
    description: "what its model responses used and cost, as its run.completed webhook says; null until one is recorded"
  }),
  toolCalls: Schema.Array(ToolCallSummary).annotations({ description: "the first 100 calls" }),
  toolErrors: Schema.Number,
  inputs: Schema.optional(
    Schema.Array(Input).annotations({ description: "what a tool asked a person (status input_required)" })
  ),
  files: Schema.optional(Schema.Array(WrittenFile)),
  presented: Schema.optional(Schema.Array(PresentedFile)),
  metadata: Schema.optional(PromptMetadata),
  retentionSeconds: Schema.Number,
  createdAt: Timestamp,
  endedAt: Schema.optional(Timestamp),
  expiresAt: Schema.optional(Timestamp.annotations({ description: "when the ended run is deleted" }))
}

/** A run as it stands. */
export class StatelessRun extends Schema.Class<StatelessRun>("StatelessRun")(runFields) {}

/** A run still going when the create's wait ended (202): the same fields. */
export class RunAccepted extends Schema.Class<RunAccepted>("RunAccepted")(runFields) {}

/** The query of `GET /v1/runs/{id}`. */
export const RunParams = Schema.Struct({
  wait: Schema.optional(
    Schema.NumberFromString.pipe(Schema.between(0, 25)).annotations({
      description: "seconds to wait for the run's end, at most 25",
      jsonSchema: { type: "number", minimum: 0, maximum: 25 }
    })
  )
})
