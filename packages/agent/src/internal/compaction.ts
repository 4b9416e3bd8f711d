/**
 * Keeps a turn's requests within the model's context window: when the history
 * and the new message would not leave room for a full response, everything so
 * far is summarized by the model into one compactionSummary message, which
 * stands in for all before it (see `modelContext.ts`).
 */
import type { Credentials } from "@agent-runtime/models"
import { NodeSpans, RunSpans } from "@agent-runtime/telemetry"
import { Effect, Option } from "effect"
import type { StoredMessage } from "../Turn.ts"
import { contextTokens, estimateTokens, modelContext } from "./modelContext.ts"
import { stopOnDatabaseFault, textOf, type TurnRun, usageOf } from "./turnRun.ts"

const compactionPrompt =
  "Summarize the conversation above for your own later use: the user's goals, decisions made, facts learned, " +
  "open questions and work in progress. Be complete but brief; the summary replaces the conversation."

/**
 * Summarizes the history first when it and `incoming` would leave no room for a full response. Only a
 * compaction has its span (`Turn.compaction`): the check before every model request has none.
 */
export const compactIfNeeded = (run: TurnRun, incoming: string) =>
  Effect.gen(function*() {
    const { hooks, input } = run
    const resolved = yield* Effect.either(stopOnDatabaseFault(run.target))
    if (resolved._tag === "Left") return
    const limits = resolved.right.model
    const tokens = contextTokens(hooks.history()) + run.fixedTokens + estimateTokens(incoming)
    if (hooks.historySize() === 0 || tokens <= limits.contextWindow - limits.maxTokens) return
    yield* summarize(run, resolved.right, tokens).pipe(
      RunSpans.span("compaction", "client", {
        "agent_runtime.operation": "compaction",
        "gen_ai.request.model": input.config.model,
        "agent_runtime.compaction.tokens_before": tokens,
        "agent_runtime.compaction.summarized_messages": hooks.historySize()
      }),
      NodeSpans.withSpan("Turn.compaction")
    )
  })

/** The summary asked of the model and kept in history, or the compaction skipped when the model fails. */
const summarize = (run: TurnRun, target: Credentials.Target, tokens: number) =>
  Effect.gen(function*() {
    const { hooks, input, systemPrompt } = run
    const context = modelContext(hooks.history())
    yield* run.event("compaction_start", { tokens })
    yield* hooks.durable
    const summary = yield* run.models.complete({
      target,
      tenantId: input.tenantId,
      keyScope: Option.fromNullable(input.config.keyScope),
      model: input.config.model,
      context: {
        ...(systemPrompt === "" ? {} : { systemPrompt }),
        messages: [...context, { role: "user", content: compactionPrompt, timestamp: Date.now() }]
      },
      modelHeaders: input.config.modelHeaders,
      usage: { kind: "compaction", ...usageOf(input) }
    }).pipe(stopOnDatabaseFault, Effect.either)
    if (summary._tag === "Left") {
      yield* RunSpans.annotate({ "agent_runtime.compaction.skipped": true })
      yield* RunSpans.fail(summary.left._tag, summary.left.message)
      yield* run.event("compaction_end", { skipped: summary.left.message })
      return
    }
    const { usage } = summary.right
    yield* RunSpans.annotate({
      "gen_ai.usage.input_tokens": usage.input,
      "gen_ai.usage.output_tokens": usage.output,
      "agent_runtime.cost.usd": usage.cost.total
    })
    const index = hooks.historySize()
    const message: StoredMessage = {
      role: "compactionSummary",
      summary: textOf(summary.right),
      tokensBefore: tokens,
      timestamp: Date.now()
    }
    yield* hooks.append(index, message)
    yield* run.event("compaction_end", { index, message })
  })
