/**
 * Schedules: a prompt or sandbox code delivered to an agent at a time,
 * once or repeatedly.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"
import { ExecuteInput } from "./Run.ts"

export class Schedule extends Schema.Class<Schedule>("Schedule")({
  id: Schema.String,
  agent: Schema.String.annotations({ description: "agent id (client_...)" }),
  tenant: Schema.String,
  dueAt: Timestamp,
  createdAt: Timestamp,
  text: Schema.optional(Schema.String),
  code: Schema.optional(Schema.String),
  everySeconds: Schema.optional(Schema.Int)
}) {}

/** An ISO 8601 time string. */
export const IsoTime = Schema.String.pipe(
  Schema.filter((time) => !Number.isNaN(Date.parse(time)) || "must be an ISO time string or epoch milliseconds")
).annotations({ description: "ISO 8601 time" })
export type IsoTime = typeof IsoTime.Type

/**
 * Exactly one of text (a prompt to deliver) or code (run in the sandbox with
 * the agent's tools); when: at or inSeconds (not both); everySeconds repeats.
 */
export class ScheduleInput extends Schema.Class<ScheduleInput>("ScheduleInput")(
  Schema.Struct({
    text: Schema.optional(Schema.String.annotations({ description: "prompt to deliver" })),
    code: Schema.optional(ExecuteInput.fields.code.annotations({
      description: "run in the sandbox with the agent's tools, as an execute request"
    })),
    at: Schema.optional(
      Schema.Union(IsoTime, Schema.Int.pipe(Schema.nonNegative())).annotations({
        description: "ISO time string or epoch milliseconds"
      })
    ),
    inSeconds: Schema.optional(Schema.Number.pipe(Schema.nonNegative())),
    everySeconds: Schema.optional(
      Schema.Int.pipe(Schema.greaterThanOrEqualTo(60, { message: () => "must be an integer of at least 60" }))
    )
  }).pipe(
    Schema.filter((input) => {
      if ((input.text === undefined) === (input.code === undefined)) {
        return { path: [input.text === undefined ? "text" : "code"], message: "give exactly one of text or code" }
      }
      if (input.at !== undefined && input.inSeconds !== undefined) {
        return { path: ["inSeconds"], message: "give at most one of at or inSeconds" }
      }
      return true
    })
  ).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

/** The shortest repeat interval. */
export const minEverySeconds = 60
