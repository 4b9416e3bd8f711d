/**
 * Code mode: instead of calling tools one at a time, the model writes
 * JavaScript that calls the agent's tools as async functions, and reads one
 * answer: the value returned, the console output, or what stopped it.
 *
 * The code runs in QuickJS compiled to WebAssembly: no Node APIs, no module
 * loading, no timers, nothing of the host's but `tools.<name>(args)` and
 * `console`. Everything crossing the boundary is JSON text, so no host object
 * is ever reachable from the guest, and what the guest returns is parsed
 * without `__proto__` keys. Each run has its own WebAssembly instance (the
 * module is compiled once per process), runtime and context, disposed when
 * the run ends, is interrupted or fails.
 *
 * Limits: wall time (the whole run, tool calls included), CPU time (time
 * spent executing JavaScript, checked by QuickJS's interrupt handler), memory
 * (the instance's linear memory cannot grow past it; reaching it ends the run
 * even when the code catches the error), output (console lines and the
 * result's JSON together) and the number of tool calls. Hitting one ends the
 * run with `ok: false`, `limit` naming it and an error message giving its value.
 */
import { Deferred, Duration, Effect, Exit, FiberSet, identity } from "effect"
import * as Json from "./internal/json.ts"
import * as Names from "./internal/names.ts"
import * as Sandbox from "./internal/sandbox.ts"
import * as Schema from "./internal/schema.ts"
import * as Wasm from "./internal/wasm.ts"

export interface ToolOutput {
  readonly text: string
  readonly isError: boolean
}

export interface HostTool {
  /**
   * The tool's own name. The code calls it as `tools.<binding>`: characters other than letters,
   * digits, `_` and `$` become `_` (`get-weather` is `tools.get_weather`), a leading digit gets a `_`
   * in front, and a name taken by an earlier tool gets `_2`, `_3`, ...; `describe` shows the bindings.
   */
  readonly name: string
  readonly description: string
  /** JSON Schema of the arguments object. */
  readonly parameters: Record<string, unknown>
  /**
   * Runs one call; the host journals and executes it. `call` numbers the run's calls from 0 in the order
   * the code made them, so the same code making the same calls numbers them the same way again.
   * Interruption means the script was stopped.
   */
  readonly call: (args: unknown, call: number) => Effect.Effect<ToolOutput>
}

export interface Limits {
  /** The whole run, awaiting tools included. Default 30 seconds. */
  readonly wallTime: Duration.DurationInput
  /** Time spent executing JavaScript, not awaiting tools. Default 2 seconds. */
  readonly cpuTime: Duration.DurationInput
  /** The guest's heap beyond the instance's fixed 16 MiB (5 MiB of it C stack and static data). Default 16 MiB. */
  readonly memoryBytes: number
  /** Console output and the JSON of the result together, in characters. Default 100,000. */
  readonly outputChars: number
  /** Tool calls per run; the one after the last allowed rejects and stops the run. Default 256. */
  readonly toolCalls: number
}

export type LimitName = "time" | "cpu" | "memory" | "output" | "tool_calls"

export const defaultLimits: Limits = {
  wallTime: Duration.seconds(30),
  cpuTime: Duration.seconds(2),
  memoryBytes: 16 * 1024 * 1024,
  outputChars: 100_000,
  toolCalls: 256
}

export interface RunResult {
  readonly ok: boolean
  /** The JSON value the code returned; undefined when it returned nothing JSON can hold. */
  readonly result?: unknown
  /** `console.log` lines as they are, `info`, `warn` and `error` lines prefixed `[info] `, `[warn] `, `[error] `. */
  readonly logs: ReadonlyArray<string>
  readonly error?: { readonly name: string; readonly message: string; readonly stack?: string }
  readonly limit?: LimitName
  readonly toolCalls: number
}

const limitMessage = (limit: LimitName, limits: Limits): string => {
  switch (limit) {
    case "time":
      return `the code ran past its wall time limit of ${Duration.format(limits.wallTime)}`
    case "cpu":
      return `the code used more than its CPU time limit of ${Duration.format(limits.cpuTime)}`
    case "memory":
      return `the code needed more than its memory limit of ${limits.memoryBytes} bytes`
    case "output":
      return `console output and result went past the output limit of ${limits.outputChars} characters`
    case "tool_calls":
      return `the code made more tool calls than its limit of ${limits.toolCalls}`
  }
}

const toResult = (outcome: Sandbox.Outcome, sandbox: Sandbox.Sandbox, limits: Limits): RunResult => {
  const { logs, output, toolCalls } = sandbox
  const stopped = (limit: LimitName): RunResult => ({
    ok: false,
    logs,
    error: { name: "LimitExceeded", message: limitMessage(limit, limits) },
    limit,
    toolCalls
  })
  switch (outcome._tag) {
    case "Stopped":
      return stopped(outcome.limit)
    case "Threw": {
      const { message, name, stack } = outcome
      return { ok: false, logs, error: stack === undefined ? { name, message } : { name, message, stack }, toolCalls }
    }
    case "Returned": {
      if (outcome.json === undefined) return { ok: true, logs, toolCalls }
      if (output + outcome.json.length > limits.outputChars) return stopped("output")
      try {
        return { ok: true, result: Json.parse(outcome.json), logs, toolCalls }
      } catch {
        return { ok: false, logs, error: { name: "InternalError", message: "the result could not be read" }, toolCalls }
      }
    }
  }
}

/**
 * Runs `code`, the body of an async function (`await` and `return` work at the top level), with
 * `tools` bound as `tools.<binding>(args)` (`args` defaults to `{}`): each returns a promise of the
 * tool's text, parsed as JSON when it is JSON; a tool output with `isError` rejects with an Error
 * whose message is the text. Calls run concurrently (`Promise.all`). Never fails: errors and limits
 * are in the result. Calls still in flight when the run ends, or when it is interrupted, are
 * interrupted, and the sandbox is disposed.
 */
export const run = (
  code: string,
  tools: ReadonlyArray<HostTool>,
  limits?: Partial<Limits>
): Effect.Effect<RunResult> =>
  Effect.suspend(() => {
    const resolved: Limits = { ...defaultLimits, ...limits }
    const bindings = Names.bindings(tools.map((tool) => tool.name))
    const options: Sandbox.Options = {
      code,
      tools: new Map(tools.map((tool, i) => [bindings[i]!, tool])),
      wallMillis: Duration.toMillis(resolved.wallTime),
      cpuMillis: Duration.toMillis(resolved.cpuTime),
      outputChars: resolved.outputChars,
      toolCalls: resolved.toolCalls
    }
    return Effect.scoped(Effect.gen(function*() {
      const instance = yield* Wasm.instantiate(resolved.memoryBytes)
      const done = yield* Deferred.make<Sandbox.Outcome>()
      const fibers = yield* FiberSet.make<void>()
      const fork = yield* FiberSet.runtime(fibers)<never>()
      // Tool fibers are interrupted (and awaited) before the VM they would settle into is disposed.
      const sandbox = yield* Effect.acquireRelease(
        Effect.sync(() =>
          new Sandbox.Sandbox(instance, options, fork, (outcome) => Deferred.unsafeDone(done, Exit.succeed(outcome)))
        ),
        (sandbox) => Effect.andThen(FiberSet.clear(fibers), Effect.sync(() => sandbox.dispose()))
      )
      yield* Effect.sync(() => sandbox.start())
      const outcome = yield* Deferred.await(done).pipe(
        Effect.timeoutTo({ duration: resolved.wallTime, onSuccess: identity, onTimeout: () => sandbox.stop("time") })
      )
      return toResult(outcome, sandbox, resolved)
    }))
  })

/**
 * TypeScript-like declarations of `tools` for the model's prompt: each binding with its
 * description as a doc comment and its parameters' JSON Schema as the argument's type
 * (`args` is optional when no parameter is required).
 */
export const describe = (tools: ReadonlyArray<Pick<HostTool, "name" | "description" | "parameters">>): string => {
  const bindings = Names.bindings(tools.map((tool) => tool.name))
  const members = tools.map((tool, i) => {
    const binding = bindings[i]!
    const lines = [tool.description.trim(), binding === tool.name ? "" : `(The tool "${tool.name}".)`]
    const text = lines.filter((line) => line !== "").join("\n")
    const required = tool.parameters.required
    const optional = !Array.isArray(required) || required.length === 0
    const args = `args${optional ? "?" : ""}: ${Schema.typeText(tool.parameters, "  ")}`
    return `${text === "" ? "" : Schema.comment(text, "  ")}  ${binding}(${args}): Promise<unknown>`
  })
  const header = Schema.comment(
    "Each call resolves with the tool's output, parsed when it is JSON; a tool error rejects with an Error.",
    ""
  )
  return `${header}declare const tools: {${members.length === 0 ? "" : `\n${members.join("\n")}\n`}}`
}

const resultChars = 10_000
const logChars = 8_000
const messageChars = 1_000
const stackChars = 2_000

/** `text`, or its start and end around a note of how much was cut. */
const clip = (text: string, max: number): string => {
  if (text.length <= max) return text
  const head = Math.ceil(max / 2)
  return `${text.slice(0, head)}\n… (${text.length - max} characters cut) …\n${text.slice(text.length - (max - head))}`
}

/**
 * The run as the model reads it: the error or limit hit, the returned value as JSON, the console
 * lines and the number of tool calls. Each part is cut to at most a few thousand characters (start
 * and end kept), so the answer stays under 22,000 characters.
 */
export const format = (result: RunResult): string => {
  const parts: Array<string> = []
  if (result.error !== undefined) {
    const { name, stack } = result.error
    const message = clip(result.error.message, messageChars)
    if (result.limit !== undefined) parts.push(`Stopped (limit "${result.limit}"): ${message}`)
    else {parts.push(
        `Uncaught ${clip(name, 100)}: ${message}${stack === undefined ? "" : `\n${clip(stack, stackChars)}`}`
      )}
  }
  if (result.ok) {
    parts.push(
      result.result === undefined
        ? "Result: (no value returned)"
        : `Result:\n${clip(JSON.stringify(result.result, null, 2), resultChars)}`
    )
  }
  if (result.logs.length > 0) parts.push(`Logs:\n${clip(result.logs.join("\n"), logChars)}`)
  parts.push(`Tool calls: ${result.toolCalls}`)
  return parts.join("\n\n")
}
