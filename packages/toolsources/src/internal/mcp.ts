/**
 * A remote MCP server over streamable HTTP, with the official SDK's client.
 *
 * One session per source (per cache entry) serves its listings and calls;
 * it is opened on first use and again after the server ended it (a 404 on
 * its session id). Every HTTP request goes through a `fetch` that adds the
 * auth headers (a fresh identity token each time) and sends it through the
 * egress rules.
 *
 * The SDK does not fail a request whose response stream breaks; it waits
 * for its timeout. So a call carries an id in `_meta`
 * (`agent-runtime/callId`), the `fetch` recognizes the POST carrying it and
 * watches its response, and a stream that ends before the answer makes the
 * call `connection_lost` at once.
 *
 * Tools map onto `SourceTool`: `_meta["agent-runtime/deadlineMs"]` and
 * `_meta["agent-runtime/executionMode"]` when the server sets them. Without
 * an execution mode a tool runs in parallel, unless its annotations call it
 * destructive (`destructiveHint: true` and not `readOnlyHint: true`): then
 * sequentially, since its order against the response's other calls matters.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ErrorCode, McpError, type Tool } from "@modelcontextprotocol/sdk/types.js"
import { Deferred, Duration, Effect, Either, FiberId, Runtime } from "effect"
import * as Crypto from "node:crypto"
import * as Elicitation from "../Elicitation.ts"
import type { Caller, CallResult, McpSource, SourceTool } from "../ToolSources.ts"
import * as Driver from "./driver.ts"
import * as Names from "./names.ts"
import * as Outcome from "./outcome.ts"

const defaultDeadlineMs = 60_000
const callIdKey = "agent-runtime/callId"
/**
 * Our watch sees a response stream end before the SDK has parsed its last
 * bytes (they pass through its decoders first): the moment it gets to hand on
 * an answer before the call counts as lost.
 */
const streamEndGraceMs = 50
/** A server whose cursors never end still gets a listing. */
const maxPages = 100
const closeTimeout = Duration.seconds(2)

interface Session {
  readonly client: Client
  readonly transport: StreamableHTTPClientTransport
  /** The server answered 404 to the session id: it ended the session, and the next request needs a new one. */
  expired: boolean
}

interface PendingCall {
  readonly caller: Caller
  /** Told when the response carrying the call's answer ends or breaks. */
  readonly streamEnded: () => void
}

/** The tools/call a request body carries, if it is one of ours still waiting. */
const callIdOf = (body: unknown): string | undefined => {
  if (typeof body !== "string") return undefined
  try {
    const message = JSON.parse(body) as { method?: unknown; params?: { _meta?: Record<string, unknown> } }
    const id = message.method === "tools/call" ? message.params?._meta?.[callIdKey] : undefined
    return typeof id === "string" ? id : undefined
  } catch {
    return undefined
  }
}

/** `body` as it is read, telling `ended` once it ends or breaks. */
const watched = (body: ReadableStream<Uint8Array>, ended: () => void) => {
  const reader = body.getReader()
  return new ReadableStream<Uint8Array>({
    pull: (controller) =>
      reader.read().then(({ done, value }) => {
        if (!done) return controller.enqueue(value)
        controller.close()
        ended()
      }, (error: unknown) => {
        controller.error(error)
        ended()
      }),
    cancel: (reason) => reader.cancel(reason)
  })
}

const sourceClosed = new Driver.ListingFailed({ reason: "the tool source was closed" })

/** Why a listing failed, in plain words. */
const reasonOf = (error: unknown): string => {
  if (error instanceof StreamableHTTPError) {
    return error.code !== undefined && error.code > 0
      ? `the MCP server answered ${error.code}` :
      `the MCP server's answer was not understood`
  }
  if (error instanceof McpError) {
    return error.code === ErrorCode.RequestTimeout
      ? "the MCP server did not answer in time"
      : `the MCP server answered with an error: ${error.message}`
  }
  return Outcome.sendFailure(error).reason
}

const partText = (part: Record<string, unknown>): string => {
  if (part.type === "text" && typeof part.text === "string") return part.text
  if (part.type === "image" || part.type === "audio") return `[${part.type} ${String(part.mimeType)}, not shown]`
  const resource = part.resource as { text?: unknown } | undefined
  if (part.type === "resource" && typeof resource?.text === "string") return resource.text
  return JSON.stringify(part)
}

const toCallResult = (answer: Record<string, unknown>): CallResult => {
  const parts = Array.isArray(answer.content) ? answer.content as Array<Record<string, unknown>> : []
  const texts = parts.map(partText)
  if (texts.length === 0 && answer.structuredContent !== undefined) texts.push(JSON.stringify(answer.structuredContent))
  const isError = answer.isError === true
  return {
    content: texts.map((text) => ({ type: "text" as const, text })),
    isError,
    ...(isError ? { code: "failed" } : {})
  }
}

const toSourceTool = (tool: Tool, name: string): SourceTool => {
  const meta = tool._meta ?? {}
  const deadlineMs = Driver.deadlineOf(meta["agent-runtime/deadlineMs"])
  const destructive = tool.annotations?.destructiveHint === true && tool.annotations.readOnlyHint !== true
  return {
    name,
    description: tool.description ?? tool.title ?? "",
    parameters: tool.inputSchema,
    ...(deadlineMs === undefined ? {} : { deadlineMs }),
    executionMode: Driver.executionModeOf(meta["agent-runtime/executionMode"]) ??
      (destructive ? "sequential" : "parallel")
  }
}

export const driver = (
  source: McpSource,
  dependencies: Driver.Dependencies,
  onToolsChanged: () => void
): Driver.Driver => {
  const { egress, identity, runtime, scope } = dependencies
  const pending = new Map<string, PendingCall>()
  /** Offered name to the server's name, from the latest listing. */
  let serverNames = new Map<string, string>()
  /** Whose identity requests no call is behind carry (initialize, tools/list, the event stream). */
  let latest: Caller | undefined
  let live: Session | undefined
  let opening: Deferred.Deferred<Session, Driver.ListingFailed> | undefined
  let closed = false

  const fetchFor = (session: { expired: boolean }): typeof globalThis.fetch => async (input, init) => {
    const callId = callIdOf(init?.body)
    const call = callId === undefined ? undefined : pending.get(callId)
    const signed = await Runtime.runPromise(runtime)(
      Effect.either(Driver.authHeaders(identity, source.auth, call?.caller ?? latest!, source.url))
    )
    if (Either.isLeft(signed)) throw signed.left
    const headers = new Headers(init?.headers)
    for (const [name, value] of Object.entries(signed.right)) headers.set(name, value)
    const response = await egress.fetchFunction(input, { ...init, headers })
    if (response.status === 404 && headers.has("mcp-session-id")) session.expired = true
    if (call === undefined || !response.ok || response.body === null) return response
    return new Response(watched(response.body, call.streamEnded), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers
    })
  }

  const closeSession = (session: Session) =>
    Effect.promise(() => session.transport.terminateSession()).pipe(
      // A session the server ended needs no goodbye.
      Effect.when(() => !session.expired),
      Effect.timeout(closeTimeout),
      Effect.ignore,
      Effect.zipRight(Effect.promise(() => session.client.close()))
    )

  const open = Effect.gen(function*() {
    const url = yield* Effect.try({
      try: () => new URL(source.url),
      catch: () => new Driver.ListingFailed({ reason: "the URL is not valid" })
    })
    const session = { expired: false }
    const transport = new StreamableHTTPClientTransport(url, { fetch: fetchFor(session) })
    const client = new Client({ name: "agent-runtime", version: "1.0.0" }, {
      capabilities: {},
      listChanged: { tools: { autoRefresh: false, onChanged: () => onToolsChanged() } }
    })
    // The SDK reports event-stream hiccups here; calls and listings see their own failures.
    client.onerror = () => {}
    yield* Effect.tryPromise({
      try: (signal) => client.connect(transport, { signal }),
      catch: (error) => new Driver.ListingFailed({ reason: reasonOf(error) })
    }).pipe(Effect.onError(() => Effect.promise(() => client.close())))
    return Object.assign(session, { client, transport })
  })

  /** The live session, or one opened now; one opening at a time, whoever asks. */
  const sessionNow: Effect.Effect<Session, Driver.ListingFailed> = Effect.suspend(() => {
    if (closed) return Effect.fail(sourceClosed)
    if (live !== undefined && !live.expired) return Effect.succeed(live)
    if (live !== undefined) {
      const ended = live
      live = undefined
      return Effect.zipRight(Effect.forkIn(closeSession(ended), scope), sessionNow)
    }
    if (opening !== undefined) return Deferred.await(opening)
    const deferred = Deferred.unsafeMake<Session, Driver.ListingFailed>(FiberId.none)
    opening = deferred
    const opened = open.pipe(
      Effect.tap((session) =>
        closed
          ? Effect.zipRight(closeSession(session), Effect.fail(sourceClosed))
          : Effect.sync(() => live = session)
      ),
      Effect.exit,
      Effect.flatMap((exit) => {
        opening = undefined
        return Deferred.done(deferred, exit)
      })
    )
    // In the layer's scope: an interrupted caller must not cut the opening short for the others waiting on it.
    return Effect.zipRight(Effect.forkIn(opened, scope), Deferred.await(deferred))
  })

  const listTools = (session: Session) =>
    Effect.tryPromise({
      try: async (signal) => {
        const tools: Array<Tool> = []
        let cursor: string | undefined
        for (let page = 0; page < maxPages; page++) {
          const answer = await session.client.listTools(cursor === undefined ? undefined : { cursor }, { signal })
          for (const tool of answer.tools) tools.push(tool)
          cursor = answer.nextCursor
          if (cursor === undefined) break
        }
        return tools
      },
      catch: (error) => new Driver.ListingFailed({ reason: reasonOf(error) })
    })

  const list = (caller: Caller) =>
    Effect.suspend(() => {
      latest = caller
      return Effect.flatMap(sessionNow, (session) =>
        listTools(session).pipe(
          // The server ended the session: a new one, once.
          Effect.catchAll((failure) => session.expired ? Effect.flatMap(sessionNow, listTools) : Effect.fail(failure))
        ))
    }).pipe(Effect.map((tools) => {
      const names = Names.unique(tools.map((tool) => tool.name), /[^A-Za-z0-9_-]+/g)
      const offered = tools.flatMap((tool, index) =>
        Names.admits(source.tools, tool.name, names[index]!) ? [{ tool, name: names[index]! }] : []
      )
      serverNames = new Map(offered.map(({ name, tool }) => [name, tool.name]))
      return offered.map(({ name, tool }) => toSourceTool(tool, name))
    }))

  const callFailure = (session: Session, error: unknown, deadlineMs: number): CallResult => {
    if (error instanceof McpError) {
      if (error.code === ErrorCode.RequestTimeout) {
        // The SDK says which limit passed: the deadline, or the 20 minutes progress may extend it to.
        const total = (error.data as { maxTotalTimeout?: unknown } | undefined)?.maxTotalTimeout !== undefined
        return Outcome.timeout(total ? Driver.maxCallMs : deadlineMs)
      }
      if (error.code === ErrorCode.ConnectionClosed) return Outcome.connectionLost
      if (error.code === Elicitation.inputRequiredCode) {
        const ask = Elicitation.askOf(error.data)
        return ask === undefined ? Outcome.failed(Elicitation.unusable) : { ...Outcome.result(ask.message, false), ask }
      }
      return Outcome.failed(`The MCP server refused the call: ${error.message}`)
    }
    if (error instanceof StreamableHTTPError) {
      return session.expired
        ? Outcome.unavailable("the MCP server had ended the session (the next call opens a new one)")
        : Outcome.failed(`The MCP server answered ${error.code}: ${error.message}`)
    }
    return Outcome.ofSendFailure(error)
  }

  const callOn = (
    session: Session,
    caller: Caller,
    tool: SourceTool,
    args: Record<string, unknown>,
    onProgress: ((progress: unknown) => Effect.Effect<void>) | undefined,
    answer: unknown
  ) =>
    Effect.async<CallResult>((resume, interrupted) => {
      const deadlineMs = tool.deadlineMs ?? defaultDeadlineMs
      const callId = Crypto.randomUUID()
      // Aborted on interruption or a lost stream: either way the SDK sends notifications/cancelled.
      const abandon = new AbortController()
      let lost: ReturnType<typeof setTimeout> | undefined
      let done = false
      const settle = () => {
        done = true
        pending.delete(callId)
        clearTimeout(lost)
      }
      const finish = (result: CallResult) => {
        if (done) return
        settle()
        resume(Effect.succeed(result))
      }
      pending.set(callId, {
        caller,
        streamEnded: () => {
          lost = setTimeout(() => {
            if (done) return
            finish(Outcome.connectionLost)
            abandon.abort()
          }, streamEndGraceMs)
        }
      })
      session.client.callTool(
        {
          name: serverNames.get(tool.name) ?? tool.name,
          arguments: args,
          _meta: { [callIdKey]: callId, ...(answer === undefined ? {} : { [Elicitation.answerKey]: answer }) }
        },
        undefined,
        {
          signal: AbortSignal.any([interrupted, abandon.signal]),
          timeout: deadlineMs,
          resetTimeoutOnProgress: true,
          maxTotalTimeout: Driver.maxCallMs,
          // Always given: a progress token in the request is what lets the server extend the deadline.
          onprogress: (progress) => {
            if (onProgress !== undefined) Runtime.runFork(runtime)(onProgress(progress))
          }
        }
      ).then(
        (answer) => finish(toCallResult(answer)),
        (error: unknown) => finish(callFailure(session, error, deadlineMs))
      )
      return Effect.sync(settle)
    })

  return {
    list,
    call: (caller, tool, args, onProgress, answer) =>
      Effect.suspend(() => {
        latest = caller
        return Effect.either(sessionNow)
      }).pipe(Effect.flatMap((session) =>
        Either.isLeft(session)
          ? Effect.succeed(Outcome.unavailable(`the MCP server could not be reached (${session.left.reason})`))
          : callOn(session.right, caller, tool, args, onProgress, answer)
      )),
    close: Effect.suspend(() => {
      closed = true
      const session = live
      live = undefined
      return session === undefined ? Effect.void : closeSession(session)
    })
  }
}
