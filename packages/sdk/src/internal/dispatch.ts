/**
 * One application's side of the MCP session: the runtime's messages (the
 * `data` of `mcp` frames) in, the answers out through `post`. Calls run
 * concurrently, each in its own fiber; the calls in hand are kept until
 * their answer is posted, so a closing server knows what to wait for.
 */
import { Application } from "@agent-runtime/domain"
import { Effect, Either, FiberSet, ParseResult, Schema, type Scope } from "effect"
import type { CallToolResult, Tool, ToolContext } from "../Serve.ts"
import { version } from "./version.ts"

/** The MCP revision the runtime speaks. */
export const protocolVersion = "2025-06-18"

export const errorCodes = {
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603
} as const

/** A tool's deadline when it names none (the runtime's default). */
export const defaultDeadlineMs = 15_000

/** Progress extends a call's deadline, up to this long from its start. */
export const maxCallMs = 20 * 60_000

/** A call the application holds. */
export interface HeldCall {
  readonly id: string | number
  readonly tool: string
  readonly connection: string
  readonly controller: AbortController
  readonly startedAt: number
  /** Epoch ms after which the runtime no longer waits (extended by progress). */
  deadline: number
  /** The runtime cancelled it (`notifications/cancelled`): nobody waits for its answer. */
  cancelled: boolean
}

/** An MCP tool as `tools/list` lists it. */
export interface ListedTool {
  readonly name: string
  readonly description: string
  readonly inputSchema: Readonly<Record<string, unknown>>
  readonly _meta?: Readonly<Record<string, unknown>>
}

export type Post = (message: Readonly<Record<string, unknown>>, connection: string) => Effect.Effect<void>

export interface Options {
  readonly tools: ReadonlyArray<Tool<any>>
  readonly post: Post
  readonly serverInfo?: { readonly name: string; readonly version: string } | undefined
}

export interface Dispatcher {
  /** Handles one message of the runtime received on `connection`; what it starts runs on in the background. */
  readonly handle: (message: unknown, connection: string) => Effect.Effect<void>
  /** The listed tools and their hash. */
  readonly listed: ReadonlyArray<ListedTool>
  readonly toolsHash: string
  /** `tools/call` messages received, per tool name. */
  readonly calls: Record<string, number>
  /** Calls in hand, by JSON-RPC id. */
  readonly held: Map<string | number, HeldCall>
  /** Whether the runtime said its node is draining. */
  readonly runtimeDraining: () => boolean
  /** Calls someone still waits for: held, not cancelled, before their deadline. */
  readonly awaited: () => ReadonlyArray<HeldCall>
  /** Aborts the signals of every held call. */
  readonly abortAll: (reason: string) => void
  /** Stops the running calls (their answers are not posted). */
  readonly interruptAll: Effect.Effect<void>
}

/** The tools/list entry of a tool. */
export const listTool = (tool: Tool<any>): ListedTool => {
  const meta: Record<string, unknown> = {}
  if (tool.exposure !== undefined) meta["agent-runtime/exposure"] = tool.exposure
  if (tool.executionMode !== undefined) meta["agent-runtime/executionMode"] = tool.executionMode
  if (tool.deadlineMs !== undefined) meta["agent-runtime/deadlineMs"] = tool.deadlineMs
  return {
    name: tool.name,
    description: tool.description,
    inputSchema: tool.inputSchema,
    ...(Object.keys(meta).length > 0 ? { _meta: meta } : {})
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const isId = (u: unknown): u is string | number => typeof u === "string" || typeof u === "number"

const text = (value: string) => ({ type: "text" as const, text: value })

/** The answer of a tool's return value: text for a string, JSON text and structuredContent for an object. */
export const toResult = (value: unknown): CallToolResult => {
  if (typeof value === "string") return { content: [text(value)] }
  if (value === undefined || value === null) return { content: [] }
  let json: string | undefined
  try {
    json = JSON.stringify(value)
  } catch (cause) {
    return errorResult(`the tool's result is not JSON: ${messageOf(cause)}`)
  }
  if (json === undefined) return { content: [] }
  if (isRecord(value)) {
    // structuredContent is the object as JSON reads it back (no undefined fields, dates as strings).
    return { content: [text(json)], structuredContent: JSON.parse(json) as Record<string, unknown> }
  }
  return { content: [text(json)] }
}

export const messageOf = (cause: unknown): string => {
  if (cause instanceof Error) return cause.message.length > 0 ? cause.message : cause.name
  if (typeof cause === "string") return cause
  try {
    return JSON.stringify(cause) ?? String(cause)
  } catch {
    return String(cause)
  }
}

/** A tool's own failure, which the model reads. */
export const errorResult = (message: string): CallToolResult => ({ content: [text(message)], isError: true })

/** What is wrong with arguments that do not match a tool's schema, path by path. */
export const invalidArguments = (name: string, error: ParseResult.ParseError): CallToolResult => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) =>
    issue.path.length === 0 ? issue.message : `${issue.path.join(".")}: ${issue.message}`
  )
  return errorResult(`invalid arguments for ${name}: ${issues.join("; ")}`)
}

/** Runs a tool on its arguments: validated when it has a schema; a throw becomes an `isError` result. */
export const runTool = (tool: Tool<any>, args: unknown, ctx: ToolContext): Effect.Effect<CallToolResult> => {
  let input: unknown = args ?? {}
  if (tool.schema !== undefined) {
    const decoded = Schema.decodeUnknownEither(tool.schema, { errors: "all", onExcessProperty: "ignore" })(input)
    if (Either.isLeft(decoded)) return Effect.succeed(invalidArguments(tool.name, decoded.left))
    input = decoded.right
  }
  return Effect.tryPromise({
    try: async () => tool.execute(input, ctx),
    catch: (cause) => cause
  }).pipe(
    Effect.map(toResult),
    Effect.catchAll((cause) => Effect.succeed(errorResult(messageOf(cause))))
  )
}

const response = (id: string | number, result: unknown) => ({ jsonrpc: "2.0", id, result })

const failure = (id: string | number, code: number, message: string) => ({
  jsonrpc: "2.0",
  id,
  error: { code, message }
})

const metaString = (meta: Record<string, unknown>, key: string): string | undefined => {
  const value = meta[key]
  return typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined
}

export const make = (options: Options): Effect.Effect<Dispatcher, never, Scope.Scope> =>
  Effect.gen(function*() {
    const fibers = yield* FiberSet.make()
    const byName = new Map(options.tools.map((tool) => [tool.name, tool]))
    const listed = options.tools.map(listTool)
    const hash = Application.toolsHash(listed)
    const calls: Record<string, number> = {}
    const held = new Map<string | number, HeldCall>()
    let runtimeDraining = false
    const serverInfo = options.serverInfo ?? { name: "agent-runtime-sdk", version }

    const background = (effect: Effect.Effect<void>) => Effect.asVoid(FiberSet.run(fibers, effect))

    const answer = (id: string | number, result: unknown, connection: string) =>
      background(options.post(response(id, result), connection))

    const progressOf = (entry: HeldCall, tool: Tool<any>, token: string | number) => {
      // At most one progress post in flight per call; a newer one waiting replaces an older.
      let sending = false
      let pending: Record<string, unknown> | undefined
      const send = (params: Record<string, unknown>): void => {
        if (sending) {
          pending = params
          return
        }
        sending = true
        Effect.runFork(
          options.post({ jsonrpc: "2.0", method: "notifications/progress", params }, entry.connection).pipe(
            Effect.ensuring(Effect.sync(() => {
              sending = false
              const next = pending
              pending = undefined
              if (next !== undefined && held.get(entry.id) === entry) send(next)
            }))
          )
        )
      }
      return (progress: number, total?: number, message?: string): void => {
        if (held.get(entry.id) !== entry) return
        const now = Date.now()
        entry.deadline = Math.max(
          entry.deadline,
          Math.min(now + (tool.deadlineMs ?? defaultDeadlineMs), entry.startedAt + maxCallMs)
        )
        send({
          progressToken: token,
          progress,
          ...(total === undefined ? {} : { total }),
          ...(message === undefined ? {} : { message })
        })
      }
    }

    const call = (id: string | number, params: Record<string, unknown>, connection: string) => {
      const name = params.name
      if (typeof name !== "string") {
        return background(options.post(failure(id, errorCodes.invalidParams, "params.name is required"), connection))
      }
      calls[name] = (calls[name] ?? 0) + 1
      const tool = byName.get(name)
      if (tool === undefined) {
        return background(options.post(failure(id, errorCodes.invalidParams, `Unknown tool: ${name}`), connection))
      }
      const meta = isRecord(params._meta) ? params._meta : {}
      const now = Date.now()
      const deadline = meta["agent-runtime/deadline"]
      const entry: HeldCall = {
        id,
        tool: name,
        connection,
        controller: new AbortController(),
        startedAt: now,
        deadline: typeof deadline === "number" ? deadline : now + (tool.deadlineMs ?? defaultDeadlineMs),
        cancelled: false
      }
      held.set(id, entry)
      const progressToken = meta.progressToken
      const ctx: ToolContext = {
        signal: entry.controller.signal,
        callId: metaString(meta, "agent-runtime/callId") ?? String(id),
        toolCallId: metaString(meta, "agent-runtime/toolCallId"),
        requestId: metaString(meta, "agent-runtime/requestId"),
        idempotencyKey: metaString(meta, "agent-runtime/idempotencyKey"),
        actor: metaString(meta, "agent-runtime/actor"),
        // The claims object carries the signed token; a runtime before it sent the token alone.
        identity: metaString(meta, "agent-runtime/identity") ??
          metaString((meta["agent-runtime/identity"] ?? {}) as Record<string, unknown>, "token"),
        deadline: entry.deadline,
        meta,
        progress: progressOf(entry, tool, isId(progressToken) ? progressToken : id)
      }
      return background(
        runTool(tool, params.arguments, ctx).pipe(
          Effect.flatMap((result) => options.post(response(id, result), connection)),
          Effect.ensuring(Effect.sync(() => {
            if (held.get(id) === entry) held.delete(id)
          }))
        )
      )
    }

    const request = (id: string | number, method: string, params: Record<string, unknown>, connection: string) => {
      switch (method) {
        case "initialize":
          return answer(id, {
            protocolVersion: typeof params.protocolVersion === "string" ? params.protocolVersion : protocolVersion,
            capabilities: { tools: { listChanged: false } },
            serverInfo,
            _meta: { "agent-runtime/toolsHash": hash }
          }, connection)
        case "tools/list":
          return answer(id, { tools: listed }, connection)
        case "tools/call":
          return call(id, params, connection)
        case "ping":
          return answer(id, {}, connection)
        default:
          return background(
            options.post(failure(id, errorCodes.methodNotFound, `Method not found: ${method}`), connection)
          )
      }
    }

    const notification = (method: string, params: Record<string, unknown>) =>
      Effect.sync(() => {
        switch (method) {
          case "notifications/cancelled": {
            const entry = isId(params.requestId) ? held.get(params.requestId) : undefined
            if (entry !== undefined) {
              entry.cancelled = true
              entry.controller.abort(
                new Error(typeof params.reason === "string" ? params.reason : "cancelled by the runtime")
              )
            }
            return
          }
          case "notifications/agent-runtime/draining":
            runtimeDraining = true
            return
        }
      })

    const handleOne = (message: unknown, connection: string): Effect.Effect<void> => {
      if (!isRecord(message) || typeof message.method !== "string") return Effect.void // a response, or not JSON-RPC
      const params = isRecord(message.params) ? message.params : {}
      return isId(message.id)
        ? request(message.id, message.method, params, connection)
        : notification(message.method, params)
    }

    return {
      handle: (message, connection) =>
        Array.isArray(message)
          ? Effect.forEach(message, (one) => handleOne(one, connection), { discard: true })
          : handleOne(message, connection),
      listed,
      toolsHash: hash,
      calls,
      held,
      runtimeDraining: () => runtimeDraining,
      awaited: () => {
        const now = Date.now()
        return [...held.values()].filter((entry) => !entry.cancelled && entry.deadline > now)
      },
      abortAll: (reason) => {
        for (const entry of held.values()) entry.controller.abort(new Error(reason))
      },
      interruptAll: FiberSet.clear(fibers)
    }
  })
