/**
 * Structured output: a prompt (or a stateless run) with an output schema is
 * answered through the `final_output` tool, whose parameters are that schema.
 * The runtime checks each call with a standard JSON Schema validator: a call
 * that does not fit goes back to the model as a tool error, one that fits
 * ends the turn with its arguments as the result's `output`. A prose answer
 * gets one reminder, with the tool forced where the provider can force it;
 * a second is `output_missing`.
 */
import type { ModelClient } from "@agent-runtime/models"
import { Either } from "effect"
import * as JsonSchema from "./internal/jsonSchema.ts"
import * as ToolResult from "./ToolResult.ts"

/** A history entry as read here: a protocol message, or compaction's summary. */
type Entry = ModelClient.Message | { readonly role: "compactionSummary" }

/** The tool's name; an agent with a tool of its own by this name cannot take an output schema. */
export const toolName = "final_output"

/** How many of a turn's requests may force the tool: a model whose calls never fit still ends its turn. */
export const maxForced = 3

/** Told to the model after the system prompt, for a structured turn. */
export const instruction = `When you have your answer, give it by calling the ${toolName} tool with the answer as ` +
  "its arguments, exactly as its schema describes; that call ends your turn. Do not answer in prose."

/** The user message a prose answer gets back, once. */
export const reminder = `Your answer was not recorded: it must be given by calling the ${toolName} tool, with ` +
  "arguments that fit its schema. Call it now."

/** The model's tool for `schema`. */
export const tool = (schema: Record<string, unknown>) => ({
  name: toolName,
  description: "Gives your final answer, as arguments that fit this tool's schema. Call it once, when you are done.",
  parameters: schema as any
})

/** Why `schema` cannot be an output schema, if it cannot: it must compile. */
export const problemOf = (schema: Record<string, unknown>): string | undefined => {
  const problem = JsonSchema.problemOf(schema)
  return problem === undefined ? undefined : `output.schema does not compile: ${problem}`
}

/** What a call of the tool answers: accepted, or what does not fit, for the model to call again. */
export const check = (schema: Record<string, unknown>, args: unknown): ToolResult.ToolResult => {
  const misfit = JsonSchema.misfitOf(JsonSchema.validatorFor(schema), args, "arguments")
  return misfit === undefined
    ? ToolResult.text("Answer recorded.")
    : ToolResult.text(`The answer does not fit the schema: ${misfit}. Call ${toolName} again.`, true, "invalid_output")
}

/**
 * The accepted answer in `history` from `from` on: the arguments of the first call of the tool whose result
 * was not an error. Read from history, so a turn resumed on another node finds what the lost node accepted.
 */
export const acceptedIn = (history: ReadonlyArray<Entry>, from: number): Either.Either<unknown, void> => {
  const accepted = new Set<string>()
  for (let i = from; i < history.length; i++) {
    const message = history[i]!
    if (message.role === "toolResult" && message.toolName === toolName && !message.isError) {
      accepted.add(message.toolCallId)
    }
  }
  if (accepted.size === 0) return Either.left(undefined)
  for (let i = from; i < history.length; i++) {
    const message = history[i]!
    if (message.role !== "assistant") continue
    for (const part of message.content) {
      if (part.type === "toolCall" && accepted.has(part.id)) return Either.right(part.arguments)
    }
  }
  return Either.left(undefined)
}

/** How many reminders the turn from `from` on has had (none or one). */
export const remindedIn = (history: ReadonlyArray<Entry>, from: number) =>
  history.slice(from).some((message) => message.role === "user" && message.content === reminder)
