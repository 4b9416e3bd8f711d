/**
 * The tools a turn offers the model, where they come from, and how a
 * response's tool calls are carried out. Each tool has an exposure (given to
 * the model directly, only through code mode, or both) and an execution mode:
 * parallel tools of one response run together, a sequential tool runs alone,
 * after every call before it and before any after it. Results are always
 * kept in the order the model asked for them.
 */
import { Agent as AgentSchemas } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { Duration, Effect, Stream } from "effect"
import { convert as htmlToText } from "html-to-text"

export interface ToolResult {
  readonly content: ReadonlyArray<{ readonly type: "text"; readonly text: string }>
  readonly isError: boolean
  /** Why a call failed, for the run's toolCalls: invalid_arguments, failed, unavailable, unknown_outcome, aborted. */
  readonly code?: string
}

export interface ToolContext {
  readonly toolCallId: string
  /** Progress of a long call; the loop passes on at most one every 250 ms. */
  readonly update: (partialResult: unknown) => Effect.Effect<void>
}

export interface Tool {
  readonly name: string
  readonly description: string
  readonly parameters: Record<string, unknown>
  readonly exposure: AgentSchemas.ToolExposure
  readonly executionMode: AgentSchemas.ToolExecutionMode
  readonly execute: (args: Record<string, unknown>, context: ToolContext) => Effect.Effect<ToolResult>
}

export interface ToolSet {
  /** Tools the model is given as tools of its own, by name. */
  readonly direct: ReadonlyMap<string, Tool>
  /** Every source and its tools, as AgentDetail shows them. */
  readonly sources: ReadonlyArray<AgentSchemas.ToolSource>
}

/** The tools an agent's application declared (their calls go to its connection), and whether it is connected. */
export interface Application {
  readonly tools: ReadonlyArray<Omit<Tool, "exposure"> & { readonly exposure?: Tool["exposure"] | undefined }>
  readonly connected: boolean
}

/** Both for an agent with up to 10 tools, code mode above that. */
export const defaultExposure = (toolCount: number): AgentSchemas.ToolExposure => toolCount <= 10 ? "both" : "codemode"

export const isDirect = (exposure: AgentSchemas.ToolExposure) => exposure !== "codemode"

export const text = (value: string, isError = false, code?: string): ToolResult => ({
  content: [{ type: "text", text: value }],
  isError,
  ...(code === undefined ? {} : { code })
})

/** What a call whose effect is unknown answers: it was sent when its node was lost, and is never sent again. */
export const unknownOutcome = text(
  "The runtime restarted while this tool call ran; whether it took effect is unknown. It was not run again.",
  true,
  "unknown_outcome"
)

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

/** Why a builtin the agent has is not given to the model yet. */
const notYetAvailable: Record<string, string> = {
  web_search: "web search is not available on this runtime yet",
  schedule: "schedules are not available on this runtime yet",
  ask_user: "human input is not available on this runtime yet",
  delegate: "delegation is not available on this runtime yet"
}

/** The runtime's own tools, and the tool set of an agent's configuration. */
export class Tools extends Effect.Service<Tools>()("@agent-runtime/agent/Tools", {
  effect: Effect.gen(function*() {
    const egress = yield* Egress.Egress
    const builtins: Record<string, Omit<Tool, "exposure">> = { web_fetch: makeWebFetch(egress) }

    const forAgent = (
      config: { readonly builtins?: ReadonlyArray<string> | undefined },
      application?: Application
    ): ToolSet => {
      const names = config.builtins ?? []
      const applicationTools = application?.tools ?? []
      const exposure = defaultExposure(names.length + applicationTools.length)
      const direct = new Map<string, Tool>()
      const describe = (tool: Tool, excluded?: string) =>
        new AgentSchemas.ToolSourceTool({
          name: tool.name,
          description: tool.description,
          exposure: tool.exposure,
          executionMode: tool.executionMode,
          parameters: tool.parameters,
          ...(excluded !== undefined
            ? { excluded }
            : isDirect(tool.exposure)
            ? {}
            : { excluded: "code mode is not available on this runtime yet" })
        })
      /** Offers `tool` to the model, unless code mode alone reaches it; why not, when it is not. */
      const offer = (tool: Tool) => {
        // Code mode arrives with code execution; until then a codemode-only tool is not offered.
        if (isDirect(tool.exposure)) direct.set(tool.name, tool)
        return describe(tool)
      }
      const builtinTools: Array<AgentSchemas.ToolSourceTool> = []
      for (const name of names) {
        const builtin = builtins[name]
        if (builtin === undefined) {
          builtinTools.push(
            new AgentSchemas.ToolSourceTool({ name, description: name, excluded: notYetAvailable[name] ?? "unknown" })
          )
          continue
        }
        builtinTools.push(offer({ ...builtin, exposure }))
      }
      const sources: Array<AgentSchemas.ToolSource> = names.length === 0 ? [] : [
        new AgentSchemas.ToolSource({ kind: "builtin", name: "builtins", status: "listed", tools: builtinTools })
      ]
      if (application !== undefined) {
        const described = applicationTools.map((declared) => {
          const tool: Tool = { ...declared, exposure: declared.exposure ?? exposure }
          // The runtime's own tools come first: an application tool of the same name is not offered.
          return direct.has(tool.name) || builtins[tool.name] !== undefined
            ? describe(tool, "a builtin of the same name takes precedence")
            : offer(tool)
        })
        sources.push(
          new AgentSchemas.ToolSource({
            kind: "application",
            name: "application",
            status: "listed",
            tools: described,
            connected: application.connected
          })
        )
      }
      return { direct, sources }
    }

    return { forAgent } as const
  })
}) {}
