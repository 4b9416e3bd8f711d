/**
 * The runtime's own tools, offered by name through an agent's `builtins`:
 * web_fetch (through the egress policy), web_search, schedule, ask_user (a
 * question to a person: the run waits for the answer) and delegate (a task
 * for a sub-agent made from a definition the agent's delegate setting names).
 */
import { Ledger } from "@agent-runtime/billing"
import type { Agent as AgentSchemas, Billing } from "@agent-runtime/domain"
import { Schedule as ScheduleSchemas } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { WebSearch } from "@agent-runtime/models"
import { PersistenceError } from "@agent-runtime/store"
import { Duration, Effect, Option, ParseResult, Schema, Stream } from "effect"
import { convert as htmlToText } from "html-to-text"
import { defaultMaxParallel, Delegation } from "./Delegation.ts"
import { Schedules } from "./Schedules.ts"
import { type Scope, text, type Tool, type ToolContext } from "./ToolResult.ts"

const fetchLimitBytes = 5 * 1024 * 1024
const defaultMaxChars = 50_000
const fetchTimeout = Duration.seconds(30)

const webFetchParameters = {
  type: "object",
  properties: {
    url: { type: "string", description: "an https URL" },
    maxChars: { type: "integer", minimum: 1, maximum: 200000, description: "cut the text after this many characters" }
  },
  required: ["url"],
  additionalProperties: false
}

/** Reads at most fetchLimitBytes of a body, telling progress as it goes; an interrupt cancels the read. */
const readBody = (response: Response, update: ToolContext["update"]) =>
  response.body === null
    ? Effect.succeed({ bytes: new Uint8Array(), truncated: false })
    : Stream.fromReadableStream(() => response.body!, (cause) => cause as Error).pipe(
      Stream.runFoldWhileEffect(
        { chunks: [] as Array<Uint8Array>, size: 0 },
        (read) => read.size < fetchLimitBytes,
        (read, chunk) => {
          read.chunks.push(chunk)
          read.size += chunk.byteLength
          return Effect.as(update({ bytes: read.size }), read)
        }
      ),
      Effect.map((read) => ({
        bytes: Buffer.concat(read.chunks).subarray(0, fetchLimitBytes),
        truncated: read.size >= fetchLimitBytes
      }))
    )

const pageText = (contentType: string, body: Uint8Array) => {
  const decoded = new TextDecoder().decode(body)
  return contentType.includes("html") ? htmlToText(decoded, { wordwrap: false }) : decoded
}

const makeWebFetch = (egress: Egress.Service): Builtin => ({
  name: "web_fetch",
  description: "Fetch a web page or file over https and return its text (HTML is converted to plain text).",
  parameters: webFetchParameters,
  executionMode: "parallel",
  execute: (args, context) =>
    Effect.gen(function*() {
      if (typeof args.url !== "string") return text("url must be a string", true, "invalid_arguments")
      const maxChars = typeof args.maxChars === "number" && args.maxChars > 0 ? args.maxChars : defaultMaxChars
      const response = yield* egress.fetch(args.url, {
        headers: { accept: "text/html, text/*, application/json;q=0.9" }
      })
      const contentType = response.headers.get("content-type") ?? ""
      const { bytes, truncated } = yield* readBody(response, context.update)
      const body = pageText(contentType, bytes)
      const cut = body.length > maxChars
      const header = `HTTP ${response.status}${contentType === "" ? "" : ` (${contentType})`}` +
        (cut || truncated ? `, text cut to ${Math.min(body.length, maxChars)} characters` : "")
      return text(
        `${header}\n\n${body.slice(0, maxChars)}`,
        response.status >= 400,
        response.status >= 400 ? "failed" : undefined
      )
    }).pipe(
      Effect.timeoutFail({ duration: fetchTimeout, onTimeout: () => "the page did not answer within 30 seconds" }),
      Effect.catchAll((error) =>
        Effect.succeed(
          text(`web_fetch failed: ${typeof error === "string" ? error : (error as Error).message}`, true, "failed")
        )
      )
    )
})

const askUserParameters = {
  type: "object",
  properties: {
    questions: {
      type: "array",
      minItems: 1,
      maxItems: 4,
      items: {
        type: "object",
        properties: {
          question: { type: "string", minLength: 1, maxLength: 1000, description: "the question, complete" },
          header: { type: "string", maxLength: 40, description: "a short label for it" },
          options: {
            type: "array",
            maxItems: 8,
            description: "answers to choose from; the person may also answer in their own words",
            items: {
              type: "object",
              properties: { label: { type: "string", minLength: 1, maxLength: 200 }, description: { type: "string" } },
              required: ["label"],
              additionalProperties: false
            }
          },
          multiSelect: { type: "boolean", description: "several options may be chosen" }
        },
        required: ["question"],
        additionalProperties: false
      }
    }
  },
  required: ["questions"],
  additionalProperties: false
}

/** Whether ask_user's questions are well formed: each a distinct question, options with labels. */
const questionsOf = (args: Record<string, unknown>) => {
  const questions = args.questions
  if (!Array.isArray(questions) || questions.length === 0 || questions.length > 4) return undefined
  const seen = new Set<string>()
  for (const question of questions) {
    if (typeof question !== "object" || question === null || typeof question.question !== "string") return undefined
    if (question.question === "" || seen.has(question.question)) return undefined
    seen.add(question.question)
    if (question.options !== undefined) {
      if (!Array.isArray(question.options) || question.options.length > 8) return undefined
      if (!question.options.every((option: any) => typeof option?.label === "string" && option.label !== "")) {
        return undefined
      }
    }
  }
  return questions as ReadonlyArray<{ readonly question: string }>
}

/** ask_user: the run stops waiting for the answers, and goes on with them (see Inputs). */
const askUser: Builtin = {
  name: "ask_user",
  description: "Ask the person you work for one to four questions and wait for their answers: for a decision, a " +
    "preference or facts only they have. Offer options where you can; they may also answer in their own words. " +
    "Your turn pauses until they answer, decline, or the question expires, and you are told which.",
  parameters: askUserParameters,
  executionMode: "sequential",
  execute: (args) => {
    const questions = questionsOf(args)
    return Effect.succeed(
      questions === undefined
        ? text("questions must be 1 to 4 distinct questions, options with labels", true, "invalid_arguments")
        : {
          ...text("waiting for the person's answers"),
          ask: {
            kind: "question",
            message: questions.map((question) => question.question).join("\n"),
            detail: { questions }
          }
        }
    )
  }
}

const webSearchParameters = {
  type: "object",
  properties: {
    query: { type: "string", minLength: 1, maxLength: 400, description: "what to search the web for" },
    count: { type: "integer", minimum: 1, maximum: 20, description: "how many results (default 5)" }
  },
  required: ["query"],
  additionalProperties: false
}

const makeWebSearch = (search: WebSearch.Service, rates: Billing.Rates, scope: Scope): Builtin => ({
  name: "web_search",
  description: "Search the web; answers titles, URLs and snippets of the best results.",
  parameters: webSearchParameters,
  executionMode: "parallel",
  execute: (args) =>
    typeof args.query !== "string" || args.query.trim() === ""
      ? Effect.succeed(text("query must be a non-empty string", true, "invalid_arguments"))
      : search.search({
        tenantId: scope.tenantId,
        keyScope: Option.fromNullable(scope.config.keyScope),
        query: args.query,
        count: typeof args.count === "number" ? Math.min(20, Math.max(1, Math.floor(args.count))) : undefined
      }).pipe(
        // A database fault (the search key's lookup) is no failure of the search: the turn stops and resumes.
        PersistenceError.orDie,
        Effect.map((found) => ({
          ...text(
            found.results.length === 0
              ? `No results for "${args.query}".`
              : found.results.map((result, i) =>
                `${i + 1}. ${result.title}\n${result.url}${
                  result.published === undefined ? "" : ` (${result.published})`
                }\n` +
                result.snippet
              ).join("\n\n")
          ),
          charge: { webSearch: Ledger.webSearchCharge(rates, { keySource: found.source, provider: found.provider }) }
        })),
        Effect.catchAll((error) =>
          Effect.succeed(
            text(
              `web_search failed: ${error.message}`,
              true,
              error._tag === "SearchKeyMissing" ? "unavailable" : "failed"
            )
          )
        )
      )
})

const scheduleParameters = {
  type: "object",
  properties: {
    action: { type: "string", enum: ["create", "list", "cancel"] },
    text: { type: "string", description: "create: the prompt to deliver to you when it is due (or give code)" },
    code: {
      type: "string",
      description: "create: JavaScript to run with your code-mode tools (`tools.<name>(args)`) when it is due"
    },
    at: { type: "string", description: "create: an ISO 8601 time" },
    inSeconds: { type: "number", minimum: 0, description: "create: seconds from now" },
    everySeconds: { type: "integer", minimum: 60, description: "create: repeat this often (at least 60)" },
    scheduleId: { type: "string", description: "cancel: the schedule's id" }
  },
  required: ["action"],
  additionalProperties: false
}

const decodeScheduleInput = Schema.decodeUnknown(ScheduleSchemas.ScheduleInput)

const makeSchedule = (schedules: Schedules["Type"], scope: Scope): Builtin => ({
  name: "schedule",
  description: "Have a prompt delivered to you, or code run, later, once or repeatedly; list or cancel your schedules.",
  parameters: scheduleParameters,
  executionMode: "sequential",
  execute: (args) => {
    const show = (schedule: ScheduleSchemas.Schedule) =>
      `${schedule.id}: due ${new Date(schedule.dueAt * 1000).toISOString()}` +
      (schedule.everySeconds === undefined ? "" : `, every ${schedule.everySeconds} s`) +
      ` — ${JSON.stringify(schedule.text ?? schedule.code)}`
    switch (args.action) {
      case "create": {
        const { action: _action, scheduleId: _scheduleId, ...input } = args
        return decodeScheduleInput(input, { onExcessProperty: "error" }).pipe(
          Effect.mapError((error) => ParseResult.TreeFormatter.formatErrorSync(error)),
          Effect.flatMap((decoded) =>
            Effect.mapError(
              PersistenceError.orDie(schedules.create(scope.tenantId, scope.agentId, decoded)),
              (refused) => refused.error
            )
          ),
          Effect.match({
            onFailure: (error) => text(`schedule not made: ${error}`, true, "invalid_arguments"),
            onSuccess: (made) => text(`scheduled ${show(made)}`)
          })
        )
      }
      case "list":
        return schedules.list(scope.tenantId, scope.agentId).pipe(
          PersistenceError.orDie,
          Effect.match({
            onFailure: (missing) => text(missing.error, true, "failed"),
            onSuccess: (all) => text(all.length === 0 ? "no schedules" : all.map(show).join("\n"))
          })
        )
      case "cancel":
        return typeof args.scheduleId !== "string"
          ? Effect.succeed(text("cancel needs scheduleId", true, "invalid_arguments"))
          : schedules.cancel(scope.tenantId, scope.agentId, args.scheduleId).pipe(
            PersistenceError.orDie,
            Effect.match({
              onFailure: (missing) => text(missing.error, true, "failed"),
              onSuccess: () => text(`cancelled ${args.scheduleId}`)
            })
          )
      default:
        return Effect.succeed(text("action must be create, list or cancel", true, "invalid_arguments"))
    }
  }
})

/**
 * The delegate tool: a task for a sub-agent made from one of the definitions the delegate setting names.
 * At most maxParallel of a run's delegate calls run at once; the rest wait their turn.
 */
const makeDelegate = (
  delegation: Delegation["Type"],
  scope: Scope,
  targets: ReadonlyArray<{ readonly id: string; readonly name: string; readonly description?: string }>,
  lanes: Effect.Semaphore
): Builtin => ({
  name: "delegate",
  description: "Give a self-contained task to a sub-agent and get its final answer. It starts with no memory of " +
    "this conversation: put everything it needs in the task. Sub-agents:\n" +
    targets.map((target) => `- ${target.name}${target.description === undefined ? "" : `: ${target.description}`}`)
      .join("\n"),
  parameters: {
    type: "object",
    properties: {
      agent: { type: "string", enum: targets.map((target) => target.name), description: "which sub-agent" },
      task: { type: "string", minLength: 1, description: "the task, with everything the sub-agent needs" }
    },
    required: ["agent", "task"],
    additionalProperties: false
  },
  executionMode: "parallel",
  reattaches: true,
  execute: (args, context) =>
    typeof args.agent !== "string" || typeof args.task !== "string" || args.task === ""
      ? Effect.succeed(text("delegate needs agent and task", true, "invalid_arguments"))
      : lanes.withPermits(1)(delegation.run({
        tenantId: scope.tenantId,
        agentId: scope.agentId,
        config: scope.config,
        requestId: scope.requestId ?? "",
        toolCallId: context.toolCallId,
        agent: args.agent,
        task: args.task,
        emit: context.emit,
        aborting: context.aborting
      })).pipe(Effect.map((outcome) => ({
        ...text(outcome.text, outcome.isError, outcome.code),
        ...(outcome.agentId === undefined ? {} : { agentId: outcome.agentId })
      })))
})

/** A builtin as its maker offers it: the tool set gives it its exposure. */
export type Builtin = Omit<Tool, "exposure">

/**
 * The builtins of a run, by name: delegate only when the agent's delegate setting names a definition it may
 * still use (the depth not reached); at most its maxParallel delegate calls of a run at once.
 */
export const make = Effect.gen(function*() {
  const egress = yield* Egress.Egress
  const search = yield* WebSearch.WebSearch
  const { rates } = yield* Ledger.Ledger
  const schedules = yield* Schedules
  const delegation = yield* Delegation
  const webFetch = makeWebFetch(egress)
  return (scope: Scope) =>
    Effect.gen(function*() {
      const builtins: Record<string, Builtin> = {
        web_fetch: webFetch,
        web_search: makeWebSearch(search, rates, scope),
        schedule: makeSchedule(schedules, scope),
        ask_user: askUser
      }
      if ((scope.config.builtins ?? []).includes("delegate")) {
        const targets = yield* delegation.targets(scope.tenantId, scope.config)
        const settings = scope.config.delegate as AgentSchemas.DelegateSettings | undefined
        const lanes = yield* Effect.makeSemaphore(settings?.maxParallel ?? defaultMaxParallel)
        if (targets.length > 0) builtins.delegate = makeDelegate(delegation, scope, targets, lanes)
      }
      return builtins
    })
})
