/**
 * One model request of a turn: the history the model sees, its response
 * streamed to watchers as it comes (a retried attempt's part taken back, a
 * call's arguments told only up to a bound), and, when an abort cuts it short,
 * what was said so far kept in history.
 */
import type { ModelClient } from "@agent-runtime/models"
import { NodeSpans, RunSpans } from "@agent-runtime/telemetry"
import { Effect, Either, Option } from "effect"
import * as StructuredOutput from "../StructuredOutput.ts"
import { modelContext } from "./modelContext.ts"
import { stopOnDatabaseFault, type TurnRun, usageOf } from "./turnRun.ts"

/**
 * How much of a tool call's arguments is told to watchers as they stream; the rest comes whole with the
 * call's end. A provider sends a few characters a delta, so a megabyte of arguments would be hundreds of
 * thousands of events, each costing the node and every watcher far more than its few characters.
 */
const toldArgumentsLimit = 64 * 1024

/** Watchers' view of a response as it streams: message_start, message_update, retries. */
const streamer = (run: TurnRun, index: number) => {
  let started = false
  let partial: ModelClient.AssistantMessage | undefined
  /** How much of each call's arguments was told as deltas (see `toldArgumentsLimit`). */
  const argumentsTold = new Map<number, number>()
  const onEvent = (modelEvent: ModelClient.ResponseEvent): Effect.Effect<void> => {
    switch (modelEvent.type) {
      case "start":
        started = true
        return run.event("message_start", { index, message: { role: "assistant", content: [] } })
      case "auto_retry_start":
        // What the failed attempt streamed is taken back before the retry.
        return Effect.zipRight(
          started ? run.event("message_retracted", { index }) : Effect.void,
          Effect.suspend(() => {
            started = false
            argumentsTold.clear()
            const { type: _type, ...fields } = modelEvent
            return run.event("auto_retry_start", fields)
          })
        )
      case "auto_retry_end": {
        const { type: _type, ...fields } = modelEvent
        return run.event("auto_retry_end", fields)
      }
      default: {
        const { partial: latest, ...delta } = modelEvent
        partial = latest
        if (delta.type === "toolcall_delta") {
          const told = (argumentsTold.get(delta.contentIndex) ?? 0) + delta.delta.length
          argumentsTold.set(delta.contentIndex, told)
          if (told > toldArgumentsLimit) return Effect.void
        }
        return run.event("message_update", { index, assistantMessageEvent: delta })
      }
    }
  }
  return { onEvent, started: () => started, partial: () => partial }
}

/**
 * Whether this request of a structured turn forces its tool: from the first request when it is the only
 * tool, else once the model was reminded; never after the provider refused it, nor more than
 * `StructuredOutput.maxForced` times.
 */
const forcesTool = (run: TurnRun) => {
  const structured = run.structured
  return structured !== undefined && !structured.forceRefused && structured.forced < StructuredOutput.maxForced &&
    (run.modelTools.length === 1 || structured.reminded)
}

/**
 * Asks the model for the response at history `index`. A failure is the model's error, its streamed part
 * already taken back from watchers; an abort keeps what was said so far, a node stopping keeps nothing
 * (the next owner asks again). A provider that refuses a forced tool is asked again without it, and not
 * asked to force it again this turn.
 */
export const respond = (run: TurnRun, index: number) =>
  responding(run, index).pipe(
    NodeSpans.withSpan("Turn.modelCall", () => ({ "gen_ai.request.model": run.input.config.model }))
  )

const responding = Effect.fnUntraced(function*(run: TurnRun, index: number) {
  const forced = forcesTool(run)
  if (forced) run.structured!.forced++
  const response = yield* ask(run, index, forced)
  if (forced && Either.isLeft(response) && response.left._tag === "ModelRequestRefused") {
    run.structured!.forceRefused = true
    return yield* ask(run, index, false)
  }
  return response
})

/** What a traced model call's span says of its response, and what it adds to the run's usage. */
const chatAttributes = (response: Either.Either<ModelClient.AssistantMessage, { readonly _tag: string }>) =>
  Effect.flatMap(RunSpans.currentRun, (run) => {
    // A run not traced (most of them) has nothing to add.
    if (run === undefined) return Effect.void
    if (Either.isLeft(response)) return RunSpans.fail(response.left._tag)
    const message = response.right
    const { usage } = message
    run.usage.responses++
    run.usage.inputTokens += usage.input
    run.usage.outputTokens += usage.output
    run.usage.cacheReadTokens += usage.cacheRead
    run.usage.cacheWriteTokens += usage.cacheWrite
    run.usage.costUsd += usage.cost.total
    return Effect.zipRight(
      RunSpans.annotate({
        "gen_ai.provider.name": message.provider,
        "gen_ai.system": message.provider,
        "gen_ai.response.model": message.responseModel ?? message.model,
        ...(message.responseId === undefined ? {} : { "gen_ai.response.id": message.responseId }),
        "gen_ai.response.finish_reasons": [message.stopReason],
        "gen_ai.usage.input_tokens": usage.input,
        "gen_ai.usage.output_tokens": usage.output,
        "gen_ai.usage.cache_read.input_tokens": usage.cacheRead,
        "gen_ai.usage.cache_creation.input_tokens": usage.cacheWrite,
        "agent_runtime.cost.usd": usage.cost.total
      }),
      RunSpans.content(() => ({ "gen_ai.output.messages": message.content }))
    )
  })

const ask = (run: TurnRun, index: number, forced: boolean) =>
  Effect.gen(function*() {
    const { hooks, input, systemPrompt } = run
    const stream = streamer(run, index)
    const context: ModelClient.Context = {
      ...(systemPrompt === "" ? {} : { systemPrompt }),
      messages: modelContext(hooks.history()),
      ...(run.modelTools.length === 0 ? {} : { tools: [...run.modelTools] })
    }
    const response = yield* Effect.flatMap(run.target, (resolved) =>
      run.models.respond({
        target: resolved,
        tenantId: input.tenantId,
        keyScope: Option.fromNullable(input.config.keyScope),
        model: input.config.model,
        context,
        reasoning: input.config.thinkingLevel === undefined || input.config.thinkingLevel === "off"
          ? undefined
          : input.config.thinkingLevel as ModelClient.ThinkingLevel,
        maxTokens: input.config.maxOutputTokens,
        temperature: input.config.temperature,
        ...(forced ? { forceTool: StructuredOutput.toolName } : {}),
        modelHeaders: input.config.modelHeaders,
        usage: { kind: "response", ...usageOf(input) }
      }, stream.onEvent)).pipe(
        stopOnDatabaseFault,
        Effect.either,
        Effect.onInterrupt(() => {
          const partial = stream.partial()
          return !hooks.aborting() || partial === undefined || partial.content.length === 0
            ? Effect.void
            : Effect.gen(function*() {
              const kept = { ...partial, stopReason: "aborted" as const }
              yield* hooks.append(index, kept)
              yield* run.event("message_end", { index, message: kept })
              yield* run.event("turn_end", { aborted: true })
              yield* run.event("agent_end")
            })
        })
      )
    if (Either.isLeft(response) && stream.started()) yield* run.event("message_retracted", { index })
    yield* chatAttributes(response)
    return response
  }).pipe(RunSpans.span(`chat ${run.input.config.model}`, "client", {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": run.input.config.model
  }))
