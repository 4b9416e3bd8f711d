/**
 * Human input: an agent asks a person a question, an approval, a form or to
 * open a page; the run stops waiting and resumes once the inputs are answered.
 * The answers that resume a run (`Answered`, `AnsweredAll`) carry a request
 * record and live in Run.ts.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"
import { JsonObject } from "./Validation.ts"

/**
 * Who sent a prompt or an answer. The model sees it in a block only the
 * runtime can write; `id` is also the actor unless an actor is given. No
 * other fields are allowed.
 */
export class Sender extends Schema.Class<Sender>("Sender")(
  Schema.Struct({
    id: Schema.String.pipe(Schema.minLength(1)),
    name: Schema.optional(Schema.String),
    username: Schema.optional(Schema.String)
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** question: questions of ask_user; approval: a call to approve; form: fields a tool asks for; url: page to open. */
export const InputKind = Schema.Literal("question", "approval", "form", "url")
export type InputKind = typeof InputKind.Type

export const InputState = Schema.Literal("pending", "answered", "declined", "cancelled", "expired", "superseded")
export type InputState = typeof InputState.Type

/** The states an input settles in. */
export const ResolvedInputState = Schema.Literal("answered", "declined", "cancelled", "expired", "superseded")
export type ResolvedInputState = typeof ResolvedInputState.Type

export const InputAction = Schema.Literal("accept", "decline", "cancel")
export type InputAction = typeof InputAction.Type

/** Detail of a question input: the questions of ask_user (their shape: not shown). */
export class QuestionDetail extends Schema.Class<QuestionDetail>("QuestionDetail")({
  questions: Schema.Array(Schema.Unknown)
}) {}

/** Detail of an approval input, built by the runtime from the real call. */
export class ApprovalDetail extends Schema.Class<ApprovalDetail>("ApprovalDetail")({
  tool: Schema.String,
  source: Schema.String,
  arguments: Schema.Unknown,
  argumentsHash: Schema.String
}) {}

/** Detail of a form input: the JSON Schema of the fields a tool asks for. */
export class FormDetail extends Schema.Class<FormDetail>("FormDetail")({
  requestedSchema: JsonObject
}) {}

/** Detail of a url input: the page to open. */
export class UrlDetail extends Schema.Class<UrlDetail>("UrlDetail")({
  url: Schema.String,
  origin: Schema.String
}) {}

/** The detail matching the input's kind. */
export const InputDetail = Schema.Union(QuestionDetail, ApprovalDetail, FormDetail, UrlDetail)
export type InputDetail = typeof InputDetail.Type

export class Responders extends Schema.Class<Responders>("Responders")({
  audience: Schema.Array(Schema.String).annotations({
    description:
      "who may answer besides the definition's approvers; by default the sender or actor who started the turn"
  })
}) {}

/** How an input was answered. */
export class InputAnswer extends Schema.Class<InputAnswer>("InputAnswer")({
  action: InputAction,
  content: Schema.optional(Schema.Unknown),
  by: JsonObject.annotations({ description: "who answered" }),
  at: Timestamp
}) {}

export class Input extends Schema.Class<Input>("Input")({
  id: Schema.String,
  agent: Schema.String.annotations({ description: "agent id (client_...)" }),
  tenant: Schema.String,
  requestId: Schema.String.annotations({ description: "the suspended run" }),
  toolCallId: Schema.String,
  kind: InputKind,
  message: Schema.String,
  detail: InputDetail,
  responders: Responders,
  state: InputState,
  createdAt: Timestamp,
  expiresAt: Timestamp,
  answer: Schema.optional(InputAnswer)
}) {}

/** Content of an answer to a question input: per question a label, labels, or own words. */
export const QuestionAnswerContent = Schema.Struct({
  answers: Schema.Record({ key: Schema.String, value: Schema.Union(Schema.String, Schema.Array(Schema.String)) })
})
export type QuestionAnswerContent = typeof QuestionAnswerContent.Type

/** Content of declining an approval input. */
export const ApprovalDeclineContent = Schema.Struct({ reason: Schema.optional(Schema.String) })
export type ApprovalDeclineContent = typeof ApprovalDeclineContent.Type

const answerFields = {
  action: InputAction,
  content: Schema.optional(
    JsonObject.annotations({
      description: "question: {answers}; form: the fields, checked against its schema; approval decline: {reason?}"
    })
  ),
  from: Schema.optional(Sender),
  actor: Schema.optional(Schema.String)
}

/** Body answering one input; `from` is checked against the input's audience and approvers (else 403). */
export class AnswerInput extends Schema.Class<AnswerInput>("AnswerInput")(answerFields) {}

/** One answer of a batch, naming its input. */
export class AnswerInputItem extends Schema.Class<AnswerInputItem>("AnswerInputItem")({
  id: Schema.String,
  ...answerFields
}) {}

export class AnswerInputs extends Schema.Class<AnswerInputs>("AnswerInputs")({
  answers: Schema.Array(AnswerInputItem).pipe(
    Schema.minItems(1, { message: () => "must hold at least 1 answer" }),
    Schema.maxItems(100, { message: () => "must hold at most 100 answers" })
  ).annotations({ description: "1 to 100 answers" })
}) {}

/** Inputs of an agent, newest first: a bare array, as every list of the API answers. */
export const InputList = Schema.Array(Input).annotations({ identifier: "InputList" })
export type InputList = typeof InputList.Type

/** Default lifetime of an input: a day; a definition's humanInput.expiresInSeconds changes it. */
export const defaultInputLifetimeSeconds = 86_400
