/**
 * One run's QuickJS runtime and context, and the bookkeeping around them.
 *
 * QuickJS is the synchronous build: the host enters it (evaluating the code,
 * settling a tool call's promise), it runs until nothing is left to do but
 * wait for tool calls, and returns. Each entry is a segment; CPU time is the
 * sum of segments, checked by the interrupt handler along with the wall-time
 * deadline and the memory cap. A tool call is a promise made with
 * `newPromise`, settled when its fiber ends; a fiber that ends while QuickJS
 * is running (a tool answering synchronously) is queued and settled once the
 * current segment is done, never re-entering QuickJS.
 *
 * The C stack limit is small because QuickJS measures only the part of its
 * stack that lives in linear memory, while the WASM frames themselves use the
 * host's native stack: at 128 KiB, recursion through functions (several
 * hundred calls deep), getters, proxies, regexps or `JSON.parse` stops with a
 * catchable "stack overflow" before the host's stack runs out. Source nested
 * several hundred levels deep (in the parser) or `JSON.stringify` of a value
 * nested thousands deep can still exhaust the host's stack: that throws a
 * host `RangeError` out of the WASM code, leaving the instance inconsistent,
 * so the run ends and the instance is dropped without being touched again
 * (`broken`).
 */
import { Cause, Effect, Exit } from "effect"
import type { QuickJSContext, QuickJSDeferredPromise, QuickJSHandle, QuickJSRuntime } from "quickjs-emscripten"
import type { HostTool, LimitName, ToolOutput } from "../Codemode.ts"
import * as Json from "./json.ts"
import * as Prelude from "./prelude.ts"
import * as Wasm from "./wasm.ts"

export interface Options {
  readonly code: string
  /** By binding name. */
  readonly tools: ReadonlyMap<string, HostTool>
  readonly wallMillis: number
  readonly cpuMillis: number
  readonly outputChars: number
  readonly toolCalls: number
}

/** How the code ended; the value is still the guest's JSON text. */
export type Outcome =
  | { readonly _tag: "Returned"; readonly json: string | undefined }
  | { readonly _tag: "Threw"; readonly name: string; readonly message: string; readonly stack?: string }
  | { readonly _tag: "Stopped"; readonly limit: LimitName }

/** Starts a tool call's fiber, which the run interrupts when it ends. */
export type Fork = (effect: Effect.Effect<void>) => unknown

const stackBytes = 128 * 1024

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A thrown error, or the memory limit when it is QuickJS running out of memory. */
const threw = (name: string, message: string, stack?: string): Outcome =>
  name === "InternalError" && message === "out of memory"
    ? { _tag: "Stopped", limit: "memory" }
    : stack === undefined
    ? { _tag: "Threw", name, message }
    : { _tag: "Threw", name, message, stack }

/** The envelope the prelude resolves with. */
const fromEnvelope = (text: string | undefined): Outcome => {
  let envelope: unknown
  try {
    envelope = text === undefined ? undefined : Json.parse(text)
  } catch {
    envelope = undefined
  }
  if (isRecord(envelope)) {
    const { message, name, ok, stack, value } = envelope
    if (ok === true && (value === undefined || typeof value === "string")) return { _tag: "Returned", json: value }
    if (ok === false && typeof name === "string" && typeof message === "string") {
      return threw(name, message, typeof stack === "string" ? stack : undefined)
    }
  }
  return { _tag: "Threw", name: "InternalError", message: "the outcome of the code could not be read" }
}

export class Sandbox {
  /** Console lines kept so far. */
  readonly logs: Array<string> = []
  /** Characters of `logs`. */
  output = 0
  /** Tool calls started. */
  toolCalls = 0

  private readonly instance: Wasm.Instance
  private readonly options: Options
  private readonly fork: Fork
  private readonly onDone: (outcome: Outcome) => void
  private readonly runtime: QuickJSRuntime
  private readonly context: QuickJSContext
  private readonly inFlight = new Map<number, QuickJSDeferredPromise>()
  private readonly queue: Array<() => void> = []
  private busy = false
  private cpuMillis = 0
  private segmentStart = 0
  private deadline = Number.POSITIVE_INFINITY
  private stopped: LimitName | undefined = undefined
  private main: QuickJSHandle | undefined = undefined
  private outcome: Outcome | undefined = undefined
  private reported = false
  private broken = false
  private closed = false

  constructor(instance: Wasm.Instance, options: Options, fork: Fork, onDone: (outcome: Outcome) => void) {
    this.instance = instance
    this.options = options
    this.fork = fork
    this.onDone = onDone
    this.runtime = instance.module.newRuntime()
    try {
      this.runtime.setMaxStackSize(stackBytes)
      this.runtime.setInterruptHandler(() => this.shouldInterrupt())
      this.context = this.runtime.newContext()
    } catch (error) {
      this.runtime.dispose()
      throw error
    }
  }

  /** Evaluates the prelude and starts the code; `onDone` is called once it ends. */
  start(): void {
    this.deadline = performance.now() + this.options.wallMillis
    this.enter(() => {
      const { context } = this
      const args = [
        context.newFunction("call", (binding, args) => this.call(binding, args)),
        context.newFunction("log", (line) => this.log(line)),
        context.newString(JSON.stringify([...this.options.tools.keys()])),
        context.newString(this.options.code)
      ]
      try {
        const prelude = context.unwrapResult(context.evalCode(Prelude.source, "prelude.js", { type: "global" }))
        try {
          this.main = context.unwrapResult(context.callFunction(prelude, context.undefined, args))
        } finally {
          prelude.dispose()
        }
      } finally {
        for (const handle of args) handle.dispose()
      }
    })
  }

  /** Ends the run on a limit the host noticed (the wall time, while waiting); the first outcome stays. */
  stop(limit: LimitName): Outcome {
    this.stopped ??= limit
    return this.finish({ _tag: "Stopped", limit: this.stopped })
  }

  dispose(): void {
    this.closed = true
    // A broken instance cannot be freed safely, and one whose memory ran out may have been written
    // through a failed host-side allocation; both are dropped whole, which frees everything.
    if (this.broken || this.instance.exhausted()) return
    for (const deferred of this.inFlight.values()) deferred.dispose()
    this.inFlight.clear()
    this.main?.dispose()
    this.context.dispose()
    this.runtime.dispose()
  }

  private shouldInterrupt(): boolean {
    if (this.stopped === undefined) {
      const now = performance.now()
      if (this.instance.exhausted()) this.stopped = "memory"
      else if (now >= this.deadline) this.stopped = "time"
      else if (this.cpuMillis + now - this.segmentStart > this.options.cpuMillis) this.stopped = "cpu"
    }
    return this.stopped !== undefined
  }

  /** Runs `f` in QuickJS with the jobs it causes, then checks whether the code is done. */
  private enter(f: () => void): void {
    if (this.closed || this.outcome !== undefined) return
    if (this.busy) {
      this.queue.push(f)
      return
    }
    this.busy = true
    this.segmentStart = performance.now()
    try {
      for (let next: (() => void) | undefined = f; next !== undefined; next = this.queue.shift()) {
        if (this.stopped !== undefined) continue
        next()
        this.drain()
      }
      this.check()
    } catch (error) {
      this.broken = Wasm.isFatal(error)
      this.finish(this.crashed(error))
    } finally {
      this.busy = false
      this.cpuMillis += performance.now() - this.segmentStart
    }
    if (this.outcome !== undefined && !this.reported) {
      this.reported = true
      this.onDone(this.outcome)
    }
  }

  private drain(): void {
    while (this.stopped === undefined && this.runtime.hasPendingJob()) {
      const executed = this.runtime.executePendingJobs()
      if (executed.error) executed.error.dispose()
    }
  }

  private check(): void {
    if (this.stopped === undefined && this.instance.exhausted()) this.stopped = "memory"
    if (this.stopped !== undefined) {
      this.finish({ _tag: "Stopped", limit: this.stopped })
      return
    }
    if (this.main === undefined) return
    const state = this.context.getPromiseState(this.main)
    switch (state.type) {
      case "pending": {
        if (this.inFlight.size === 0) {
          this.finish({
            _tag: "Threw",
            name: "Error",
            message: "the code awaits a promise that nothing can settle (no tool call is in flight)"
          })
        }
        return
      }
      case "fulfilled": {
        const text = this.context.typeof(state.value) === "string" ? this.context.getString(state.value) : undefined
        if (!state.notAPromise) state.value.dispose()
        this.finish(fromEnvelope(text))
        return
      }
      case "rejected": {
        // Only what the prelude cannot catch: an interrupt, or running out of memory while reporting.
        const outcome = this.rejection(state.error)
        state.error.dispose()
        this.finish(outcome)
        return
      }
    }
  }

  private rejection(error: QuickJSHandle): Outcome {
    const { context } = this
    if (context.typeof(error) !== "object") return threw("Error", "the code failed with a value that cannot be read")
    const read = (key: string): string | undefined => {
      const property = context.getProp(error, key)
      try {
        return context.typeof(property) === "string" ? context.getString(property) : undefined
      } finally {
        property.dispose()
      }
    }
    return threw(read("name") ?? "Error", read("message") ?? "", read("stack"))
  }

  private crashed(error: unknown): Outcome {
    if (this.stopped !== undefined) return { _tag: "Stopped", limit: this.stopped }
    if (this.instance.exhausted()) return { _tag: "Stopped", limit: "memory" }
    if (error instanceof RangeError) return threw("InternalError", "stack overflow (nested too deeply for the sandbox)")
    return threw("InternalError", error instanceof Error ? error.message : String(error))
  }

  private finish(outcome: Outcome): Outcome {
    this.outcome ??= outcome
    return this.outcome
  }

  /** `tools.<binding>(args)` from the prelude: a promise settled when the tool's fiber ends. */
  private call(bindingHandle: QuickJSHandle, argsHandle: QuickJSHandle): QuickJSHandle | { error: QuickJSHandle } {
    const { context } = this
    const binding = context.getString(bindingHandle)
    const tool = this.options.tools.get(binding)
    if (tool === undefined || this.stopped !== undefined) {
      return { error: context.newError(`tools.${binding} cannot be called now`) }
    }
    if (this.toolCalls >= this.options.toolCalls) {
      this.stopped = "tool_calls"
      return { error: context.newError(`the limit of ${this.options.toolCalls} tool calls is reached`) }
    }
    const call = this.toolCalls++
    const args = Json.parse(context.getString(argsHandle))
    const deferred = context.newPromise()
    this.inFlight.set(call, deferred)
    this.fork(
      Effect.suspend(() => tool.call(args, call)).pipe(
        Effect.exit,
        Effect.flatMap((exit) => Effect.sync(() => this.settle(call, binding, exit)))
      )
    )
    return deferred.handle
  }

  private settle(id: number, binding: string, exit: Exit.Exit<ToolOutput>): void {
    // Interrupted means the run is ending: nothing is settled in a VM about to be disposed.
    if (Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)) return
    this.enter(() => {
      const deferred = this.inFlight.get(id)
      if (deferred === undefined) return
      this.inFlight.delete(id)
      try {
        if (Exit.isSuccess(exit) && !exit.value.isError) {
          this.context.newString(exit.value.text).consume(deferred.resolve)
        } else {
          const message = Exit.isSuccess(exit) ? exit.value.text : `tools.${binding} failed`
          this.context.newError(message).consume(deferred.reject)
        }
      } finally {
        deferred.dispose()
      }
    })
  }

  /** `console.*` from the prelude: one formatted line. */
  private log(lineHandle: QuickJSHandle): void {
    if (this.stopped !== undefined) return
    const line = this.context.getString(lineHandle)
    if (this.output + line.length > this.options.outputChars) {
      this.stopped = "output"
      return
    }
    this.output += line.length
    this.logs.push(line)
  }
}
