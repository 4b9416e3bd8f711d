/**
 * The tools a turn offers the model, where they come from, and how a
 * response's tool calls are carried out. Each tool has an exposure (given to
 * the model directly, only through code mode, or both) and an execution mode:
 * parallel tools of one response run together, a sequential tool runs alone,
 * after every call before it and before any after it. Results are always
 * kept in the order the model asked for them.
 */
import { Agent as AgentSchemas, Schedule as ScheduleSchemas } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { Downloads, Volumes } from "@agent-runtime/files"
import { WebSearch } from "@agent-runtime/models"
import { ToolSources } from "@agent-runtime/toolsources"
import { Duration, Effect, Option, ParseResult, Schema, Stream } from "effect"
import { convert as htmlToText } from "html-to-text"
import type { AgentConfig } from "./AgentStore.ts"
import { Definitions } from "./Definitions.ts"
import { defaultMaxParallel, Delegation } from "./Delegation.ts"
import * as FileTools from "./FileTools.ts"
import { Schedules } from "./Schedules.ts"
import { text, type ToolContext, type ToolResult } from "./ToolResult.ts"

export { type Ask, text, type ToolContext, type ToolResult, unknownOutcome } from "./ToolResult.ts"

export interface Tool {
  readonly name: string
  readonly description: string
  readonly parameters: Record<string, unknown>
  readonly exposure: AgentSchemas.ToolExposure
  readonly executionMode: AgentSchemas.ToolExecutionMode
  readonly execute: (args: Record<string, unknown>, context: ToolContext) => Effect.Effect<ToolResult>
  /**
   * Running the call again continues the same work (it is keyed by the call's id), so a call a lost node
   * sent is run again to get its result instead of being answered as unknown.
   */
  readonly reattaches?: boolean
  /** The source offering it, as approvals name it: builtins, application, or a tool source's name. */
  readonly source?: string
}

export interface ToolSet {
  /** Tools the model is given as tools of its own, by name. */
  readonly direct: ReadonlyMap<string, Tool>
  /** Tools code reaches as `tools.<name>` (exposure codemode or both): the model gets the codemode tool for them. */
  readonly code: ReadonlyArray<Tool>
  /** Every source and its tools, as AgentDetail shows them. */
  readonly sources: ReadonlyArray<AgentSchemas.ToolSource>
  /** Sources whose tools the model does not have because they could not be listed, and why. */
  readonly sourceErrors: ReadonlyArray<{ readonly source: string; readonly error: string }>
}

/** Whose tools, and for which run: the agent, its settings, and who acts (for identity tokens). */
export interface Scope {
  readonly tenantId: string
  readonly agentId: string
  readonly config: AgentConfig
  /** What started the run: prompt, continue, execute, resume, schedule. */
  readonly origin: string
  readonly actor?: string | undefined
  /** The run's request (a turn's; absent when only listing the tools). */
  readonly requestId?: string | undefined
}

/** The tools an agent's application declared (their calls go to its connection), and whether it is connected. */
export interface Application {
  readonly tools: ReadonlyArray<Omit<Tool, "exposure"> & { readonly exposure?: Tool["exposure"] | undefined }>
  readonly connected: boolean
}

/** Both for an agent with up to 10 tools, code mode above that. */
export const defaultExposure = (toolCount: number): AgentSchemas.ToolExposure => toolCount <= 10 ? "both" : "codemode"

export const isDirect = (exposure: AgentSchemas.ToolExposure) => exposure !== "codemode"

export const inCode = (exposure: AgentSchemas.ToolExposure) => exposure !== "direct"

/** The model's tool for running code against the code-mode tools; no other tool may take its name. */
export const codemodeName = "codemode"

/** Runs the calls of one response by their tools' execution modes; results come back in call order. */
export const executeAll = <A, B>(
  calls: ReadonlyArray<A>,
  modeOf: (call: A) => AgentSchemas.ToolExecutionMode,
  execute: (call: A) => Effect.Effect<B>
): Effect.Effect<Array<B>> =>
  Effect.gen(function*() {
    const results: Array<B> = []
    let group: Array<A> = []
    const flush = Effect.suspend(() => {
      const batch = group
      group = []
      return Effect.map(Effect.forEach(batch, execute, { concurrency: "unbounded" }), (done) => {
        for (const result of done) results.push(result)
      })
    })
    for (const call of calls) {
      if (modeOf(call) === "parallel") {
        group.push(call)
        continue
      }
      yield* flush
      results.push(yield* execute(call))
    }
    yield* flush
    return results
  })

// ---------------------------------------------------------------------------
// Builtins
// ---------------------------------------------------------------------------

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

const makeWebFetch = (egress: Egress.Service): Omit<Tool, "exposure"> => ({
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
const askUser: Omit<Tool, "exposure"> = {
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

const makeWebSearch = (search: WebSearch.Service, scope: Scope): Omit<Tool, "exposure"> => ({
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
        Effect.map((found) =>
          text(
            found.results.length === 0
              ? `No results for "${args.query}".`
              : found.results.map((result, i) =>
                `${i + 1}. ${result.title}\n${result.url}${
                  result.published === undefined ? "" : ` (${result.published})`
                }\n` +
                result.snippet
              ).join("\n\n")
          )
        ),
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

const makeSchedule = (schedules: Schedules["Type"], scope: Scope): Omit<Tool, "exposure"> => ({
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
            Effect.mapError(schedules.create(scope.tenantId, scope.agentId, decoded), (refused) => refused.error)
          ),
          Effect.match({
            onFailure: (error) => text(`schedule not made: ${error}`, true, "invalid_arguments"),
            onSuccess: (made) => text(`scheduled ${show(made)}`)
          })
        )
      }
      case "list":
        return schedules.list(scope.tenantId, scope.agentId).pipe(
          Effect.match({
            onFailure: (missing) => text(missing.error, true, "failed"),
            onSuccess: (all) => text(all.length === 0 ? "no schedules" : all.map(show).join("\n"))
          })
        )
      case "cancel":
        return typeof args.scheduleId !== "string"
          ? Effect.succeed(text("cancel needs scheduleId", true, "invalid_arguments"))
          : schedules.cancel(scope.tenantId, scope.agentId, args.scheduleId).pipe(
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
): Omit<Tool, "exposure"> => ({
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

/** How long a turn waits for a source not listed on this node yet. */
const listWait = Duration.seconds(10)

/** The runtime's own tools, and the tool set of an agent: builtins, its definition's sources, its application. */
export class Tools extends Effect.Service<Tools>()("@agent-runtime/agent/Tools", {
  effect: Effect.gen(function*() {
    const egress = yield* Egress.Egress
    const search = yield* WebSearch.WebSearch
    const schedules = yield* Schedules
    const sources = yield* ToolSources.ToolSources
    const definitions = yield* Definitions
    const delegation = yield* Delegation
    const volumes = yield* Volumes.Volumes
    const downloads = yield* Downloads.Downloads
    const webFetch = makeWebFetch(egress)
    const builtinsOf = (scope: Scope): Record<string, Omit<Tool, "exposure">> => ({
      web_fetch: webFetch,
      web_search: makeWebSearch(search, scope),
      schedule: makeSchedule(schedules, scope),
      ask_user: askUser
    })

    /** A definition source's tools; calls go to the source as `caller`, once. */
    const sourceTools = (
      source: ToolSources.Source,
      caller: ToolSources.Caller,
      listing: ToolSources.Listing
    ): Array<Omit<Tool, "exposure">> =>
      listing.tools.map((listed) => ({
        name: listed.name,
        description: listed.description,
        parameters: listed.parameters,
        executionMode: listed.executionMode ?? "parallel",
        execute: (args, context) =>
          sources.call(source, caller, listed.name, args, {
            onProgress: context.update,
            ...(context.answer === undefined ? {} : { answer: context.answer })
          })
      }))

    /**
     * The agent's tools. A turn waits a while for a source not yet listed on
     * this node (`wait`); AgentDetail does not, and shows it unlisted.
     */
    const forAgent = (scope: Scope, application?: Application, options: { readonly wait: boolean } = { wait: true }) =>
      Effect.gen(function*() {
        const names = scope.config.builtins ?? []
        const builtins = builtinsOf(scope)
        if (names.includes("delegate")) {
          const targets = yield* delegation.targets(scope.tenantId, scope.config)
          const settings = scope.config.delegate as AgentSchemas.DelegateSettings | undefined
          const lanes = yield* Effect.makeSemaphore(settings?.maxParallel ?? defaultMaxParallel)
          if (targets.length > 0) builtins.delegate = makeDelegate(delegation, scope, targets, lanes)
        }
        const caller: ToolSources.Caller = {
          tenantId: scope.tenantId,
          agentId: scope.agentId,
          origin: scope.origin,
          ...(scope.config.subject === undefined ? {} : { subject: scope.config.subject }),
          ...(scope.actor === undefined ? {} : { actor: scope.actor }),
          ...(scope.config.context === undefined ? {} : { context: scope.config.context }),
          ...(scope.config.definition === undefined ? {} : { definition: scope.config.definition.id })
        }
        const definition = scope.config.definition === undefined
          ? undefined
          : yield* Effect.option(
            definitions.resolve(scope.tenantId, scope.config.definition.id, scope.config.definition.revision)
          )
        const listed = yield* Effect.forEach(
          Option.match(Option.fromNullable(definition), {
            onNone: () => [],
            onSome: (found) => Option.isSome(found) ? found.value.toolSources : []
          }),
          (source) =>
            Effect.map(
              options.wait ? sources.list(source, caller, { wait: listWait }) : sources.peek(source, caller),
              (listing) => ({ source, listing, tools: sourceTools(source, caller, listing) })
            ),
          { concurrency: "unbounded" }
        )
        const applicationTools = application?.tools ?? []
        const mounts = scope.config.mounts ?? []
        const fileTools = mounts.length === 0 ? [] : FileTools.make(volumes, downloads, { ...scope, mounts })[
          scope.config.fileTools === false ? "presentOnly" : "all"
        ]
        const count = names.length + listed.reduce((sum, entry) => sum + entry.tools.length, 0) +
          applicationTools.length
        const exposure = defaultExposure(count)
        const direct = new Map<string, Tool>()
        const code: Array<Tool> = []
        const taken = new Map<string, string>([[codemodeName, "the runtime's code mode"]])
        // Built on every turn from tools already checked where they were declared: not validated again.
        const unchecked = { disableValidation: true }
        const describe = (tool: Tool, excluded?: string) =>
          new AgentSchemas.ToolSourceTool({
            name: tool.name,
            description: tool.description,
            exposure: tool.exposure,
            executionMode: tool.executionMode,
            parameters: tool.parameters,
            ...(excluded === undefined ? {} : { excluded })
          }, unchecked)
        /** Offers `tool` from `source` to the model, unless an earlier source has one of its name. */
        const offer = (tool: Tool, source: string) => {
          const holder = taken.get(tool.name)
          if (holder !== undefined) {
            return describe(tool, `a tool of the same name from source ${holder} takes precedence`)
          }
          taken.set(tool.name, source)
          const offered = { ...tool, source }
          if (isDirect(tool.exposure)) direct.set(tool.name, offered)
          if (inCode(tool.exposure)) code.push(offered)
          return describe(tool)
        }
        const builtinTools: Array<AgentSchemas.ToolSourceTool> = []
        for (const name of names) {
          const builtin = builtins[name]
          if (builtin === undefined) {
            const excluded = name === "delegate"
              ? "no delegate setting names a definition it may use, or the depth is reached"
              : "unknown"
            builtinTools.push(new AgentSchemas.ToolSourceTool({ name, description: name, excluded }, unchecked))
            continue
          }
          // A question waits on a person: only the model asks one, never code.
          builtinTools.push(offer({ ...builtin, exposure: name === "ask_user" ? "direct" : exposure }, "builtins"))
        }
        const toolSources: Array<AgentSchemas.ToolSource> = names.length === 0 ? [] : [
          new AgentSchemas.ToolSource(
            { kind: "builtin", name: "builtins", status: "listed", tools: builtinTools },
            unchecked
          )
        ]
        if (fileTools.length > 0) {
          // The runtime's own, like builtins: direct for the model, and in code so code sees the same files.
          toolSources.push(
            new AgentSchemas.ToolSource({
              kind: "files",
              name: "files",
              status: "listed",
              tools: fileTools.map((tool) => offer({ ...tool, exposure: "both" }, "files"))
            }, unchecked)
          )
        }
        const sourceErrors: Array<{ source: string; error: string }> = []
        if (definition !== undefined && Option.isNone(definition)) {
          sourceErrors.push({ source: "definition", error: "the agent's definition revision could not be read" })
        }
        for (const { listing, source, tools } of listed) {
          const settings = source as ToolSources.Source & { readonly exposure?: AgentSchemas.ToolExposure }
          if (listing.status !== "listed") {
            sourceErrors.push({
              source: source.name,
              error: listing.error ?? "not listed on this node yet; its tools come in a later turn"
            })
          }
          toolSources.push(
            new AgentSchemas.ToolSource({
              kind: source.kind,
              name: source.name,
              status: listing.status,
              tools: tools.map((tool) => offer({ ...tool, exposure: settings.exposure ?? exposure }, source.name)),
              ...(listing.error === undefined ? {} : { error: listing.error }),
              ...(listing.listedAt === undefined ? {} : { listedAt: listing.listedAt }),
              ...(source.kind === "mcp" || source.url !== undefined ? { url: source.url! } : {}),
              ...(settings.exposure === undefined ? {} : { exposure: settings.exposure })
            }, unchecked)
          )
        }
        if (application !== undefined) {
          toolSources.push(
            new AgentSchemas.ToolSource({
              kind: "application",
              name: "application",
              status: "listed",
              tools: applicationTools.map((declared) =>
                offer({ ...declared, exposure: declared.exposure ?? exposure }, "application")
              ),
              connected: application.connected
            }, unchecked)
          )
        }
        const set: ToolSet = { direct, code, sources: toolSources, sourceErrors }
        return set
      })

    return { forAgent } as const
  })
}) {}
