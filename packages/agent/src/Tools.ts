/**
 * The tools a turn offers the model, where they come from, and how a
 * response's tool calls are carried out. Each tool has an exposure (given to
 * the model directly, only through code mode, or both) and an execution mode:
 * parallel tools of one response run together, a sequential tool runs alone,
 * after every call before it and before any after it. Results are always
 * kept in the order the model asked for them.
 */
import type { Ledger } from "@agent-runtime/billing"
import { Agent as AgentSchemas } from "@agent-runtime/domain"
import type { Egress } from "@agent-runtime/egress"
import { Downloads, Volumes } from "@agent-runtime/files"
import type { WebSearch } from "@agent-runtime/models"
import { PersistenceError } from "@agent-runtime/store"
import { ToolSources } from "@agent-runtime/toolsources"
import { Context, Duration, Effect, Layer, Option } from "effect"
import * as Builtins from "./Builtins.ts"
import { Definitions } from "./Definitions.ts"
import type { Delegation } from "./Delegation.ts"
import * as FileTools from "./FileTools.ts"
import type { Schedules } from "./Schedules.ts"
import type { Scope, Tool } from "./ToolResult.ts"

export {
  approvalAsk,
  argumentsHash,
  type Ask,
  type Scope,
  text,
  type Tool,
  type ToolContext,
  type ToolResult,
  unknownOutcome
} from "./ToolResult.ts"

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

/** How long a turn waits for a source not listed on this node yet. */
const listWait = Duration.seconds(10)

/** A tool as AgentDetail shows it: one offered, or a builtin named but not there, and why the model lacks it. */
type Described =
  | { readonly tool: Tool; readonly excluded?: string }
  | { readonly missing: string; readonly excluded: string }

/** A source as AgentDetail shows it, its schema instance not made yet. */
type DescribedSource = Omit<AgentSchemas.ToolSource, "tools"> & { readonly tools: ReadonlyArray<Described> }

// Made from tools already checked where they were declared: not validated again.
const unchecked = { disableValidation: true }

const toolSourceOf = ({ tools, ...source }: DescribedSource) =>
  new AgentSchemas.ToolSource({
    ...source,
    tools: tools.map((described) =>
      "missing" in described
        ? new AgentSchemas.ToolSourceTool(
          { name: described.missing, description: described.missing, excluded: described.excluded },
          unchecked
        )
        : new AgentSchemas.ToolSourceTool({
          name: described.tool.name,
          description: described.tool.description,
          exposure: described.tool.exposure,
          executionMode: described.tool.executionMode,
          parameters: described.tool.parameters,
          ...(described.excluded === undefined ? {} : { excluded: described.excluded })
        }, unchecked)
    )
  }, unchecked)

/** The runtime's own tools, and the tool set of an agent: builtins, its definition's sources, its application. */
export class Tools extends Context.Tag("@agent-runtime/agent/Tools")<Tools, {
  /**
   * The agent's tools for a run (`scope`), each offered once (the first source of a name keeps it), with every
   * source as AgentDetail shows it. A turn waits a while for a source not yet listed on this node (`wait`,
   * the default); AgentDetail does not, and shows it unlisted. A source that cannot be listed is reported in
   * `sourceErrors`, never a failure.
   */
  readonly forAgent: (
    scope: Scope,
    application?: Application,
    options?: { readonly wait: boolean }
  ) => Effect.Effect<ToolSet>
}>() {}

export const make = Effect.gen(function*() {
  const builtinsFor = yield* Builtins.make
  const sources = yield* ToolSources.ToolSources
  const definitions = yield* Definitions
  const volumes = yield* Volumes.Volumes
  const downloads = yield* Downloads.Downloads

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
      const builtins = yield* builtinsFor(scope)
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
        : yield* Effect.option(PersistenceError.orDie(
          definitions.resolve(scope.tenantId, scope.config.definition.id, scope.config.definition.revision)
        ))
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
      /** Offers `tool` from `source` to the model, unless an earlier source has one of its name. */
      const offer = (tool: Tool, source: string): Described => {
        const holder = taken.get(tool.name)
        if (holder !== undefined) {
          return { tool, excluded: `a tool of the same name from source ${holder} takes precedence` }
        }
        taken.set(tool.name, source)
        const offered = { ...tool, source }
        if (isDirect(tool.exposure)) direct.set(tool.name, offered)
        if (inCode(tool.exposure)) code.push(offered)
        return { tool }
      }
      const builtinTools: Array<Described> = []
      for (const name of names) {
        const builtin = builtins[name]
        if (builtin === undefined) {
          const excluded = name === "delegate"
            ? "no delegate setting names a definition it may use, or the depth is reached"
            : "unknown"
          builtinTools.push({ missing: name, excluded })
          continue
        }
        // A question waits on a person: only the model asks one, never code.
        builtinTools.push(offer({ ...builtin, exposure: name === "ask_user" ? "direct" : exposure }, "builtins"))
      }
      const described: Array<DescribedSource> = names.length === 0 ? [] : [
        { kind: "builtin", name: "builtins", status: "listed", tools: builtinTools }
      ]
      if (fileTools.length > 0) {
        // The runtime's own, like builtins: direct for the model, and in code so code sees the same files.
        described.push({
          kind: "files",
          name: "files",
          status: "listed",
          tools: fileTools.map((tool) => offer({ ...tool, exposure: "both" }, "files"))
        })
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
        described.push({
          kind: source.kind,
          name: source.name,
          status: listing.status,
          tools: tools.map((tool) => offer({ ...tool, exposure: settings.exposure ?? exposure }, source.name)),
          ...(listing.error === undefined ? {} : { error: listing.error }),
          ...(listing.listedAt === undefined ? {} : { listedAt: listing.listedAt }),
          ...(source.kind === "mcp" || source.url !== undefined ? { url: source.url! } : {}),
          ...(settings.exposure === undefined ? {} : { exposure: settings.exposure })
        })
      }
      if (application !== undefined) {
        described.push({
          kind: "application",
          name: "application",
          status: "listed",
          tools: applicationTools.map((declared) =>
            offer({ ...declared, exposure: declared.exposure ?? exposure }, "application")
          ),
          connected: application.connected
        })
      }
      let shown: ReadonlyArray<AgentSchemas.ToolSource> | undefined
      const set: ToolSet = {
        direct,
        code,
        // Only AgentDetail reads them: a turn, which lists its tools anew, makes no schema instance per tool.
        get sources() {
          return shown ??= described.map(toolSourceOf)
        },
        sourceErrors
      }
      return set
    })

  return Tools.of({ forAgent })
})

export const layer: Layer.Layer<
  Tools,
  never,
  | Egress.Egress
  | WebSearch.WebSearch
  | Ledger.Ledger
  | Schedules
  | Delegation
  | ToolSources.ToolSources
  | Definitions
  | Volumes.Volumes
  | Downloads.Downloads
> = Layer.effect(Tools, make)
