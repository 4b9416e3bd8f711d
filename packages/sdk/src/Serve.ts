/**
 * Serving an agent's tools from the application (docs/application-tools.md):
 * the agent's event stream as the MCP connection, the runtime as the MCP
 * client and this process as the server.
 *
 * `serve` connects `GET /clients/{id}/events` with the agent's token, reads
 * the `ready` frame's `connection`, and answers the runtime's `mcp` frames
 * by `POST /clients/{id}/mcp` naming that connection: `initialize` (with the
 * hash of its tools, so unchanged tools are not listed again), `tools/list`,
 * `tools/call`, `ping`; -32601 for anything else. It is serving once the
 * runtime acknowledged its `tools/list` answer (the runtime acknowledges it
 * once the tools are recorded), or its `initialize` answer when the ready
 * frame's `toolsHash` already named its tools (the runtime keeps them and
 * does not list them). It reconnects by itself
 * (naming its connection, with `Last-Event-ID`) when the runtime asks, the
 * network fails or the stream falls silent; answers are posted with retries
 * (the runtime takes the same answer twice without effect).
 *
 * One connection serves an agent at a time: a second `serve` fails with
 * 409 APPLICATION_CONNECTED unless it asks `takeover`; the one taken over
 * stops serving and reports APPLICATION_REPLACED (`replaced`, `onError`).
 * `close()` tells the runtime it drains, waits for the calls it holds (up
 * to 25 s, and never for one the runtime gave up on), then disconnects.
 */
import { Application } from "@agent-runtime/domain"
import type { HttpClient } from "@effect/platform"
import type { Duration, Schema } from "effect"
import { Cause, Deferred, Effect, Exit, Fiber, FiberId, JSONSchema, Scope, Stream } from "effect"
import * as EventStream from "./EventStream.ts"
import * as Dispatch from "./internal/dispatch.ts"
import * as Http from "./internal/http.ts"
import { ApiError, ApplicationReplaced, InvalidOptions, type SdkError, TransportError } from "./SdkError.ts"

/** What a tool's `execute` is given besides its arguments. */
export interface ToolContext {
  /** Aborted when the runtime cancels the call (the turn was aborted), or when serving stops without it. */
  readonly signal: AbortSignal
  /** The runtime's id of this call. */
  readonly callId: string
  /** The model's tool call id. */
  readonly toolCallId: string | undefined
  /** The request whose turn makes the call. */
  readonly requestId: string | undefined
  /** The same for every attempt of one model call, whatever happens: key your own writes by it. */
  readonly idempotencyKey: string | undefined
  /** The turn's actor, when there is one. */
  readonly actor: string | undefined
  /** The runtime's signed identity token for the call (`token` of `_meta["agent-runtime/identity"]`), when any. */
  readonly identity: string | undefined
  /** Epoch ms after which the runtime stops waiting, as the call arrived (progress extends it). */
  readonly deadline: number
  /** The call's whole `_meta`. */
  readonly meta: Readonly<Record<string, unknown>>
  /** Reports progress (`notifications/progress`): restarts the call's deadline and shows to watchers. */
  readonly progress: (progress: number, total?: number, message?: string) => void
}

/** direct: the model calls it itself; codemode: only from code; both. */
export type Exposure = "direct" | "codemode" | "both"

/** parallel (the default) runs with its neighbours; sequential runs alone. */
export type ExecutionMode = "parallel" | "sequential"

/** A JSON Schema object. */
export type JsonSchema = Readonly<Record<string, unknown>>

/** A tool the application serves. */
export interface Tool<A = unknown> {
  readonly name: string
  readonly description: string
  /** The JSON Schema of its arguments, as listed to the runtime. */
  readonly inputSchema: JsonSchema
  /** The Effect Schema its arguments are decoded with, when it was declared with one. */
  readonly schema: Schema.Schema<A, any> | undefined
  readonly exposure: Exposure | undefined
  readonly executionMode: ExecutionMode | undefined
  readonly deadlineMs: number | undefined
  /**
   * Runs a call. A string is answered as text; an object as its JSON text
   * and as `structuredContent`; anything else as its JSON text. A throw is a
   * failed call the model reads (`isError`).
   */
  readonly execute: (args: A, ctx: ToolContext) => unknown
}

/** An MCP tools/call result. */
export interface CallToolResult {
  readonly content: ReadonlyArray<{ readonly type: "text"; readonly text: string }>
  readonly isError?: boolean
  readonly structuredContent?: Readonly<Record<string, unknown>>
}

interface ToolOptions {
  /** 1 to 64 characters of A-Z a-z 0-9 _ - */
  readonly name: string
  readonly description: string
  readonly exposure?: Exposure | undefined
  readonly executionMode?: ExecutionMode | undefined
  /** How long the runtime waits for an answer (restarted by progress): 1,000 to 1,200,000; 15,000 by default. */
  readonly deadlineMs?: number | undefined
}

const namePattern = /^[A-Za-z0-9_-]{1,64}$/

const emptyObject: JsonSchema = { type: "object", properties: {} }

/**
 * The JSON Schema of an Effect Schema as MCP wants `inputSchema`: an object
 * at the top, with identified schemas (classes, annotated structs, `Int`)
 * written inline rather than as `$ref`s, which models read best; only a
 * recursive schema keeps its definition under `$defs`.
 */
export const jsonSchemaOf = (schema: Schema.Schema<any, any>): JsonSchema => {
  const definitions: Record<string, JSONSchema.JsonSchema7> = {}
  const root: JsonSchema = { ...JSONSchema.fromAST(schema.ast, { definitions, topLevelReferenceStrategy: "skip" }) }
  return Object.keys(definitions).length === 0 ? root : { ...root, $defs: definitions }
}

/**
 * Declares a tool. With `schema` (an Effect Schema of an object) the
 * arguments are typed, listed as its JSON Schema and checked before
 * `execute` runs: arguments that do not match are answered as a failed call
 * naming each problem, and `execute` gets the decoded value. With
 * `parameters` (a JSON Schema) the arguments are passed as they come.
 * Throws InvalidOptions for a malformed declaration.
 */
export function tool<S extends Schema.Schema<any, any, never>>(
  options: ToolOptions & {
    readonly schema: S
    readonly execute: (args: Schema.Schema.Type<S>, ctx: ToolContext) => unknown
  }
): Tool<Schema.Schema.Type<S>>
export function tool(
  options: ToolOptions & {
    readonly parameters?: JsonSchema | undefined
    readonly execute: (args: Record<string, unknown>, ctx: ToolContext) => unknown
  }
): Tool<Record<string, unknown>>
export function tool(
  options: ToolOptions & {
    readonly schema?: Schema.Schema<any, any, never>
    readonly parameters?: JsonSchema | undefined
    readonly execute: (args: any, ctx: ToolContext) => unknown
  }
): Tool<any> {
  const invalid = (message: string) => new InvalidOptions({ message: `tool ${options.name}: ${message}` })
  if (typeof options.name !== "string" || !namePattern.test(options.name)) {
    throw invalid("the name must be 1 to 64 characters of A-Z a-z 0-9 _ -")
  }
  if (typeof options.description !== "string") throw invalid("a description is required")
  if (typeof options.execute !== "function") throw invalid("execute must be a function")
  if (options.schema !== undefined && options.parameters !== undefined) {
    throw invalid("give either schema or parameters, not both")
  }
  const { deadlineMs } = options
  if (deadlineMs !== undefined && !(Number.isInteger(deadlineMs) && deadlineMs >= 1_000 && deadlineMs <= 1_200_000)) {
    throw invalid("deadlineMs must be an integer from 1000 to 1200000")
  }
  const inputSchema = options.schema !== undefined
    ? jsonSchemaOf(options.schema)
    : options.parameters ?? emptyObject
  if (inputSchema.type !== "object") throw invalid("the arguments must be described as an object")
  return {
    name: options.name,
    description: options.description,
    inputSchema,
    schema: options.schema,
    exposure: options.exposure,
    executionMode: options.executionMode,
    deadlineMs,
    execute: options.execute
  }
}

/** The tools as `tools/list` answers them. */
export const listTools = (tools: ReadonlyArray<Tool<any>>): ReadonlyArray<Dispatch.ListedTool> =>
  tools.map(Dispatch.listTool)

/**
 * The hash `initialize` reports and the ready frame names: `sha256:` and
 * the base64url SHA-256 of the canonical JSON (keys sorted at every depth)
 * of the `tools/list` answer's `tools`.
 */
export const toolsHash = (tools: ReadonlyArray<Tool<any>>): string => Application.toolsHash(listTools(tools))

/** The agent to serve: its id and its own token (`aat_…`). */
export interface Agent {
  readonly baseUrl: string | URL
  readonly agentId: string
  readonly token: string
}

export interface Options {
  /** Replace the connection serving the agent now (a rolling deploy); else a second one gets 409 APPLICATION_CONNECTED. */
  readonly takeover?: boolean | undefined
  /** Aborting it closes the server, as `close()` does. */
  readonly signal?: AbortSignal | undefined
  /** What went wrong while serving: ApplicationReplaced, a refused reconnect, an answer that could not be posted. */
  readonly onError?: ((error: SdkError) => void) | undefined
  /** How long `close()` waits for the calls it holds; 25,000 ms by default. */
  readonly closeTimeoutMs?: number | undefined
  /** `serverInfo` of the `initialize` answer. */
  readonly serverInfo?: { readonly name: string; readonly version: string } | undefined
  /** A silent stream is dead after this long; 20 s by default. */
  readonly watchdog?: Duration.DurationInput | undefined
  /** The fetch the Promise API uses; the global one by default. */
  readonly fetch?: typeof globalThis.fetch | undefined
}

/** Why serving stopped. */
export type Ended =
  | { readonly reason: "closed" }
  | { readonly reason: "replaced"; readonly error: ApplicationReplaced }
  | { readonly reason: "failed"; readonly error: SdkError }

export interface Server {
  readonly agentId: string
  /** The connection serving now (the latest ready frame's). */
  readonly connection: string | undefined
  /** The hash of the tools served. */
  readonly toolsHash: string
  /**
   * The `toolsHash` of the latest ready frame: the tools the runtime holds from this agent's application
   * (null when none). When it equals `toolsHash` the runtime does not list them again.
   */
  readonly runtimeToolsHash: string | null | undefined
  /** `tools/call` messages received, per tool name. */
  readonly calls: Readonly<Record<string, number>>
  /** Calls held now (running, or their answer being posted). */
  readonly inFlight: number
  /** Settles when the connection is taken over; never rejects. */
  readonly replaced: Promise<ApplicationReplaced>
  /** Settles when serving stops, for whatever reason; never rejects. */
  readonly done: Promise<Ended>
  /**
   * Stops serving: sends `notifications/agent-runtime/draining`, waits for
   * the calls it holds (up to `timeoutMs`, 25 s by default; not for calls
   * the runtime cancelled or stopped waiting for), aborts what is left and
   * disconnects. Calling it again returns the same promise.
   */
  readonly close: (options?: { readonly timeoutMs?: number | undefined }) => Promise<void>
}

const defaultCloseTimeoutMs = 25_000

const deferredPromise = <A>() => {
  let resolve!: (value: A) => void
  const promise = new Promise<A>((done) => (resolve = done))
  return { promise, resolve }
}

/**
 * Serves `tools` for the agent, in Effect: succeeds once the runtime holds
 * the tools (it acknowledged the `tools/list` answer, or kept the tools by
 * their hash), so a prompt sent next gets them; fails with 409
 * APPLICATION_CONNECTED, 401, 404... when the first connection is refused,
 * ApplicationReplaced when it is taken over before that. Serving runs in
 * the scope; closing the scope disconnects at once, `close()` drains first.
 */
export const make = (
  agent: Agent,
  tools: ReadonlyArray<Tool<any>>,
  options: Options = {}
): Effect.Effect<Server, SdkError, HttpClient.HttpClient | Scope.Scope> =>
  Effect.gen(function*() {
    const target = yield* Http.target(agent.baseUrl, agent.token)
    const names = new Set<string>()
    for (const declared of tools) {
      if (names.has(declared.name)) {
        return yield* Effect.fail(new InvalidOptions({ message: `two tools are named ${declared.name}` }))
      }
      names.add(declared.name)
    }
    const context = yield* Effect.context<HttpClient.HttpClient>()
    const scope = yield* Effect.scope
    const path = `/clients/${Http.segment(agent.agentId)}`
    const state = {
      connection: undefined as string | undefined,
      stopped: false,
      runtimeToolsHash: undefined as string | null | undefined,
      /** Whether the runtime lists the current connection's tools: its first ready frame named other ones. */
      listing: true,
      /** The runtime's initialize and tools/list requests not answered yet, by JSON-RPC id. */
      handshake: new Map<string | number, string>(),
      /** Completed to drop the current connection and make it again. */
      kick: Deferred.unsafeMake<void>(FiberId.none)
    }
    const replaced = deferredPromise<ApplicationReplaced>()
    const done = deferredPromise<Ended>()
    const report = (error: SdkError) => {
      try {
        options.onError?.(error)
      } catch {
        // the application's handler failing changes nothing here
      }
    }
    const end = (ended: Ended) => {
      state.stopped = true
      done.resolve(ended)
    }

    const post: Dispatch.Post = (message, connection) =>
      Http.json(target, {
        method: "POST",
        path: `${path}/mcp`,
        json: message,
        headers: { [Application.connectionHeader]: connection },
        retry: true
      }).pipe(
        Effect.provide(context),
        Effect.zipRight(Effect.suspend(() => accepted(message, connection))),
        Effect.catchAll((error) =>
          Effect.sync(() => {
            if (error._tag === "ApiError" && error.status === 404) {
              // The runtime does not know this connection (the agent moved, or it was dropped): reconnect. The
              // next connection waits on a new trigger.
              if (connection === state.connection) {
                const kick = state.kick
                state.kick = Deferred.unsafeMake<void>(FiberId.none)
                Deferred.unsafeDone(kick, Exit.void)
              }
              return
            }
            // 409: the call ended before this answer (CONFLICT), or the connection was taken over
            // (APPLICATION_REPLACED, which `event: closed` reports).
            if (error._tag === "ApiError" && error.status === 409) return
            if (!state.stopped) report(error)
          })
        )
      )

    const dispatcher = yield* Dispatch.make({ tools, post, serverInfo: options.serverInfo })
    /** Completed once the runtime holds the tools (see `accepted`); failed when serving stops before. */
    const ready = yield* Deferred.make<void, SdkError>()

    /**
     * An answer the runtime acknowledged. It acknowledges the tools/list answer once the tools are recorded and
     * the connection serves, the initialize answer once it asked for the tools or (kept by hash) serves.
     */
    const accepted = (message: Readonly<Record<string, unknown>>, connection: string): Effect.Effect<void> => {
      const id = message.id
      const method = typeof id === "string" || typeof id === "number" ? state.handshake.get(id) : undefined
      if (method === undefined || !("result" in message)) return Effect.void
      state.handshake.delete(id as string | number)
      const holds = method === "tools/list" || (method === "initialize" && !state.listing)
      return holds && connection === state.connection ? Effect.asVoid(Deferred.succeed(ready, undefined)) : Effect.void
    }

    const frames = EventStream.make({
      baseUrl: target.baseUrl,
      token: target.token,
      path: `${path}/events`,
      // Before the first ready frame: takeover if asked; after it: the connection reconnecting as itself.
      query: () =>
        state.connection === undefined
          ? { takeover: options.takeover === true ? "true" : undefined }
          : { connection: state.connection },
      watchdog: options.watchdog,
      reconnectWhen: Effect.suspend(() => Deferred.await(state.kick))
    })

    const onFrame = (frame: EventStream.Frame): Effect.Effect<void> => {
      switch (frame.event) {
        case "ready": {
          const data = frame.data as { readonly connection?: unknown; readonly toolsHash?: unknown } | undefined
          state.runtimeToolsHash = typeof data?.toolsHash === "string" ? data.toolsHash : null
          if (typeof data?.connection === "string" && data.connection !== state.connection) {
            // A new connection: its handshake lists the tools unless this frame names them.
            state.connection = data.connection
            state.listing = state.runtimeToolsHash !== dispatcher.toolsHash
            state.handshake.clear()
          }
          return Effect.void
        }
        case "mcp": {
          if (state.connection === undefined) return Effect.void
          const data = (frame.data as { readonly message?: unknown } | undefined)?.message as
            | { readonly id?: unknown; readonly method?: unknown }
            | undefined
          if (
            (data?.method === "initialize" || data?.method === "tools/list") &&
            (typeof data.id === "string" || typeof data.id === "number")
          ) {
            state.handshake.set(data.id, data.method)
          }
          return dispatcher.handle(data, state.connection)
        }
        case "closed": {
          const error = new ApplicationReplaced({
            message: "this connection was taken over by another; it no longer serves the agent's tools",
            connection: state.connection ?? null
          })
          return Effect.andThen(
            Effect.sync(() => {
              state.stopped = true
              dispatcher.abortAll("the connection was replaced")
              replaced.resolve(error)
              report(error)
              end({ reason: "replaced", error })
            }),
            Deferred.fail(ready, error)
          )
        }
        default:
          return Effect.void
      }
    }

    const reader = yield* frames.pipe(
      Stream.runForEach(onFrame),
      Effect.onExit((exit) =>
        Effect.gen(function*() {
          if (Exit.isSuccess(exit)) {
            yield* Deferred.fail(ready, new TransportError({ message: "the event stream ended before serving" }))
            return end({ reason: "closed" })
          }
          if (yield* Deferred.failCause(ready, exit.cause)) return
          if (Cause.isInterruptedOnly(exit.cause)) return
          const error = Cause.squash(exit.cause)
          const reported = error instanceof ApiError || error instanceof InvalidOptions
            ? error
            : new TransportError({ message: "serving failed", cause: error })
          report(reported)
          end({ reason: "failed", error: reported })
        })
      ),
      Effect.forkIn(scope)
    )
    yield* Deferred.await(ready)

    const drain = (timeoutMs: number) =>
      Effect.gen(function*() {
        const until = Date.now() + timeoutMs
        if (!state.stopped && state.connection !== undefined) {
          yield* post({ jsonrpc: "2.0", method: "notifications/agent-runtime/draining" }, state.connection).pipe(
            Effect.timeout(timeoutMs),
            Effect.ignore
          )
          while (!state.stopped && dispatcher.awaited().length > 0 && Date.now() < until) {
            yield* Effect.sleep(50)
          }
        }
        dispatcher.abortAll("the server is closing")
        yield* Fiber.interrupt(reader)
        yield* dispatcher.interruptAll
        end({ reason: "closed" })
      })

    let closing: Promise<void> | undefined
    const close = (closeOptions?: { readonly timeoutMs?: number | undefined }) => (closing ??= Effect.runPromise(
      drain(closeOptions?.timeoutMs ?? options.closeTimeoutMs ?? defaultCloseTimeoutMs)
    ))

    if (options.signal !== undefined) {
      const signal = options.signal
      if (signal.aborted) void close()
      else signal.addEventListener("abort", () => void close(), { once: true })
    }

    return {
      agentId: agent.agentId,
      get connection() {
        return state.connection
      },
      toolsHash: dispatcher.toolsHash,
      get runtimeToolsHash() {
        return state.runtimeToolsHash
      },
      get calls() {
        return { ...dispatcher.calls }
      },
      get inFlight() {
        return dispatcher.held.size
      },
      replaced: replaced.promise,
      done: done.promise,
      close
    }
  })

/**
 * Serves `tools` for the agent on fetch: resolves once the runtime holds the
 * tools (see `make`), so a prompt sent next gets them; rejects with the SDK
 * error that refused the first connection (ApiError 409
 * APPLICATION_CONNECTED without `takeover`), or ApplicationReplaced.
 * Network failures before it are retried as the event stream does, until
 * `options.signal` is aborted.
 */
export const serve = async (
  agent: Agent,
  tools: ReadonlyArray<Tool<any>>,
  options: Options = {}
): Promise<Server> => {
  const scope = Effect.runSync(Scope.make())
  const exit = await Effect.runPromiseExit(
    make(agent, tools, options).pipe(Scope.extend(scope), Effect.provide(Http.fetchLayer(options.fetch))),
    // Until the first connection is made, the signal stops the attempts.
    options.signal === undefined ? {} : { signal: options.signal }
  )
  if (Exit.isFailure(exit)) {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    if (Cause.isInterruptedOnly(exit.cause)) throw options.signal?.reason ?? new Error("serve was aborted")
    throw Cause.squash(exit.cause)
  }
  const server = exit.value
  void server.done.then(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  return server
}
