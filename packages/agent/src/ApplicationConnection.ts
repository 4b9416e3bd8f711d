/**
 * The agent's application connection, as its owner holds it: the MCP session
 * in which the runtime is the client and the application serves the agent's
 * tools (docs/application-tools.md). The connection's stream may be served by
 * any node; what the owner sends it travels as `Frame`s, and the node serving
 * it passes on the application's messages and a heartbeat.
 *
 * One connection serves the tools at a time. A call goes to it once, with a
 * deadline; when no answer comes (deadline, connection lost) the model is told
 * the outcome is unknown, and the call is never sent again.
 */
import { Application } from "@agent-runtime/domain"
import type { Scope } from "effect"
import { Deferred, Duration, Effect, Either, Option, Queue, Schedule, Stream } from "effect"
import * as Crypto from "node:crypto"
import type { Frame } from "./Agent.ts"
import { ApplicationConnected, CallEnded, ConnectionReplaced, ConnectionUnknown } from "./AgentError.ts"
import type { ApplicationTool } from "./AgentStore.ts"
import {
  type Answer,
  askedAgain,
  asTools,
  defaultDeadlineMs,
  idempotencyKey,
  type Lost,
  maxCallMs,
  notConnected,
  parseTools,
  toToolResult,
  unanswered
} from "./internal/applicationWire.ts"
import type * as Tools from "./Tools.ts"

export {
  asTools,
  audience,
  defaultDeadlineMs,
  idempotencyKey,
  notConnected,
  parseTools,
  toToolResult
} from "./internal/applicationWire.ts"

export const protocolVersion = "2025-06-18"

/** How long the application has to answer initialize and tools/list. */
const sessionRequestTimeout = Duration.seconds(10)
/** How often the owner sends a keep-alive frame, and the node serving the stream a heartbeat. */
export const keepAliveInterval = Duration.seconds(2)
/** A connection not heard from (heartbeat, answer) for this long is gone: its node or socket was lost. */
const silenceLimit = Duration.seconds(8)
/** A connection whose stream dropped may come back (naming itself) within this long and keep its calls. */
const reattachGrace = Duration.seconds(5)
/** How long a replaced connection may answer the calls it holds. */
const replacedGrace = Duration.seconds(30)
/**
 * How long a call waits for a connection to serve it before it fails as not connected (it was not sent): long
 * enough for an application to follow its agent to the next owner after a drain or a crash.
 */
const reconnectWait = Duration.seconds(10)
/**
 * How long a turn starting while the serving connection is in its handshake (initialize, tools/list) waits for
 * it, so it gets the tools being listed; after it, the turn runs with the tools listed before (if any). The
 * handshake itself may take up to twice `sessionRequestTimeout` before the connection is dropped.
 */
export const initializingWait = Duration.seconds(10)
/**
 * How long the answer to initialize or tools/list waits, before it is acknowledged, for what it started: the
 * tools recorded and the connection serving, or the listing asked for.
 */
const takenWait = Duration.seconds(5)
/** Answers for calls that ended are recognised (retries, late answers) for this many calls. */
const endedMemory = 1_000

type State = "initializing" | "ready" | "draining" | "replaced"

interface Call {
  readonly answer: Deferred.Deferred<Answer, Lost>
  readonly started: number
  readonly deadlineMs: number
  deadline: number
  readonly onProgress: (progress: unknown) => Effect.Effect<void>
  /** Completed once the answer took effect: its acknowledgement (the application's POST) waits for it. */
  readonly taken: Deferred.Deferred<void> | undefined
}

interface Connection {
  readonly id: string
  state: State
  /** The stream attached now; frames sent while none is wait in `backlog`. `null` ends a stream. */
  sink: Queue.Queue<Frame | null> | undefined
  backlog: Array<Frame | null>
  detachedAt: number
  lastHeard: number
  /** The runtime's requests (initialize, tools/list, tools/call) waiting for an answer, by JSON-RPC id. */
  readonly waiting: Map<string, Call>
  /** The `toolsHash` its first ready frame named: initialize's hash must equal it for the listing to be skipped. */
  readonly announcedHash: string | null
  /** Completed once its handshake asked for the tools, or ended: the initialize answer's acknowledgement waits. */
  readonly listing: Deferred.Deferred<void>
  /** Completed when its handshake ends, however it ends: the tools/list answer's acknowledgement waits. */
  readonly initialized: Deferred.Deferred<void>
}

export interface CallContext {
  readonly toolCallId: string
  readonly requestId: string
  readonly actor: string | undefined
  readonly update: Tools.ToolContext["update"]
  /** What started the turn (its request's method: prompt, continue), for the identity token's `origin`. */
  readonly origin: string
  /**
   * Whether a call waits for the application to connect (it may be reconnecting after a move) before it fails
   * as not connected; a run that was allowed to run disconnected does not wait.
   */
  readonly waitForConnection: boolean
  /** The answer to the input this call asked before, when it is made again with it. */
  readonly answer?: Tools.ToolContext["answer"]
  /** The approval a person gave this call, named in the identity claims. */
  readonly approval?: Tools.ToolContext["approval"]
  /** What the tool gave with its ask, for the call made again (see `askedAgain`). */
  readonly resume?: unknown
}

export interface ApplicationConnection {
  /**
   * Attaches a stream: the serving connection named by `connection`, else a
   * new one, which serves the tools unless another does (ApplicationConnected,
   * unless `takeover`). The stream starts with `Ready` and ends when the
   * connection does.
   */
  readonly connect: (options: {
    readonly connection?: string | undefined
    readonly takeover: boolean
  }) => Effect.Effect<Stream.Stream<Frame>, ApplicationConnected>
  /**
   * A message from the application on `connection`. An answer to initialize or tools/list returns once it took
   * effect (up to 5 s): the tools recorded and the connection serving, or (initialize) the listing asked for;
   * so an application acknowledged for its tools/list answer knows a prompt sent now gets those tools.
   */
  readonly receive: (
    connection: string,
    message: Application.JsonRpcMessage
  ) => Effect.Effect<void, ConnectionUnknown | ConnectionReplaced | CallEnded>
  /** The node serving `connection`'s stream still holds it. */
  readonly heartbeat: (connection: string) => Effect.Effect<void, ConnectionUnknown>
  /** Whether a connection serves the agent's tools now. */
  readonly connected: () => boolean
  /**
   * Waits up to `wait` for a connection to serve the tools; whether one does, or one is in its handshake (a
   * turn waits for that: `awaitInitialized`).
   */
  readonly awaitConnected: (wait: Duration.DurationInput) => Effect.Effect<boolean>
  /**
   * Waits up to `wait` while the serving connection is in its handshake (initialize, tools/list), so a turn
   * starting now gets the tools it lists; at once when none is. False when the wait ran out first.
   */
  readonly awaitInitialized: (wait: Duration.DurationInput) => Effect.Effect<boolean>
  /** The agent's application tools as the model's tools, their calls sent on the serving connection. */
  readonly tools: (
    listed: ReadonlyArray<ApplicationTool>,
    context: Omit<CallContext, "toolCallId" | "update">
  ) => Tools.Application["tools"]
  /** The node drains: the serving connection is told, and gets no new calls. */
  readonly drain: Effect.Effect<void>
}

export interface Options {
  readonly agentId: string
  /** The hash of the tools the agent has now (null when its application never listed any). */
  readonly toolsHash: () => string | null
  /** Keeps tools a connection listed: the agent's own, wherever it runs next. */
  readonly saveTools: (tools: ReadonlyArray<ApplicationTool>, hash: string) => Effect.Effect<void>
  /** Records which connection serves the tools (null: none), so `connected` reads the same on every node. */
  readonly saveConnection: (connection: string | null) => Effect.Effect<void>
  /**
   * The identity sent with a call as `_meta["agent-runtime/identity"]`: its claims, and the signed token of
   * them as `token` when one could be signed (see docs/application-tools.md).
   */
  readonly identity: (call: { readonly actor: string | undefined; readonly origin: string }) => Effect.Effect<
    Record<string, unknown>
  >
}

const newId = (prefix: string) => `${prefix}_${Crypto.randomBytes(12).toString("base64url")}`

export const make = (options: Options): Effect.Effect<ApplicationConnection, never, Scope.Scope> =>
  Effect.gen(function*() {
    const connections = new Map<string, Connection>()
    let serving: Connection | undefined
    /** How calls that ended without an answer ended, to tell a late answer from a retry. */
    const ended = new Map<string, "answered" | "cancelled" | Lost>()
    const end = (callId: string, how: "answered" | "cancelled" | Lost) => {
      ended.set(callId, how)
      if (ended.size > endedMemory) ended.delete(ended.keys().next().value!)
    }

    const send = (connection: Connection, frame: Frame | null) =>
      Effect.suspend(() => {
        if (connection.sink === undefined) {
          connection.backlog.push(frame)
          return Effect.void
        }
        return Queue.offer(connection.sink, frame)
      })
    const message = (connection: Connection, body: Record<string, unknown>) =>
      send(connection, { _tag: "Mcp", message: { jsonrpc: "2.0", ...body } })

    /**
     * Ends a connection: what it was still asked gets no answer, and its stream ends. `record`: whether the
     * agent's row is told no connection serves it (not when the agent itself closes: the next owner's claim
     * clears it, and a closing node must not wait on its database).
     */
    const drop = (connection: Connection, why: Lost | "closed", record = true) =>
      Effect.gen(function*() {
        if (!connections.delete(connection.id)) return
        for (const [id, call] of connection.waiting) {
          yield* Deferred.fail(call.answer, "connection_lost")
          end(id, "connection_lost")
        }
        connection.waiting.clear()
        if (why === "closed") yield* send(connection, { _tag: "Closed", reason: "replaced" })
        yield* send(connection, null)
        if (serving === connection) {
          serving = undefined
          if (record) yield* options.saveConnection(null)
        }
        yield* Effect.logInfo("application connection ended").pipe(
          Effect.annotateLogs({ agentId: options.agentId, connection: connection.id, why })
        )
      })

    /** Asks the application something and waits for the answer (up to `deadlineMs`, extended by progress). */
    const ask = (
      connection: Connection,
      method: string,
      params: Record<string, unknown>,
      call: {
        readonly id: string
        readonly deadlineMs: number
        readonly onProgress: Call["onProgress"]
        readonly taken?: Deferred.Deferred<void>
      }
    ) =>
      Effect.gen(function*() {
        const now = Date.now()
        const waiting: Call = {
          answer: yield* Deferred.make<Answer, Lost>(),
          started: now,
          deadlineMs: call.deadlineMs,
          deadline: now + call.deadlineMs,
          onProgress: call.onProgress,
          taken: call.taken
        }
        connection.waiting.set(call.id, waiting)
        yield* message(connection, { id: call.id, method, params })
        while (true) {
          const left = waiting.deadline - Date.now()
          const answer = yield* Deferred.await(waiting.answer).pipe(
            Effect.timeoutTo({ duration: Math.max(0, left), onTimeout: Option.none, onSuccess: Option.some }),
            Effect.either
          )
          if (Either.isLeft(answer)) return Either.left(answer.left)
          if (Option.isSome(answer.right)) {
            end(call.id, "answered")
            return Either.right(answer.right.value)
          }
          // Progress may have moved the deadline while we waited.
          if (waiting.deadline <= Date.now()) {
            connection.waiting.delete(call.id)
            end(call.id, "timeout")
            return Either.left<Lost>("timeout")
          }
        }
      }).pipe(
        Effect.onInterrupt(() =>
          Effect.suspend(() => {
            if (!connection.waiting.delete(call.id)) return Effect.void
            end(call.id, "cancelled")
            return message(connection, {
              method: "notifications/cancelled",
              params: { requestId: call.id, reason: "the turn was aborted" }
            })
          })
        ),
        Effect.ensuring(Effect.sync(() => connection.waiting.delete(call.id))),
        Effect.ensuring(Effect.suspend(() => retireWhenDone(connection)))
      )

    const noProgress = () => Effect.void

    /** Lists the connection's tools and records them; the answer is acknowledged once `taken` completes. */
    const listTools = (connection: Connection, taken: Deferred.Deferred<void>) =>
      Effect.gen(function*() {
        const answer = yield* ask(connection, "tools/list", {}, {
          id: newId("list"),
          deadlineMs: Duration.toMillis(sessionRequestTimeout),
          onProgress: noProgress,
          taken
        })
        if (Either.isLeft(answer) || answer.right._tag === "Error") return false
        const listed = (answer.right.result as { tools?: unknown } | null)?.tools
        const raw = Array.isArray(listed) ? listed : []
        yield* options.saveTools(parseTools(raw), Application.toolsHash(raw))
        return true
      })

    /**
     * The session's start: initialize, then the tools unless the application says they are the ones its ready
     * frame named and we still have. The initialize answer is acknowledged once the listing is asked for or the
     * connection serves; the tools/list answer once the tools are recorded and the connection serves.
     */
    const initialize = (connection: Connection) =>
      Effect.gen(function*() {
        const answer = yield* ask(connection, "initialize", {
          protocolVersion,
          capabilities: {},
          clientInfo: { name: "agent-runtime", version: "1.0.0" }
        }, {
          id: newId("init"),
          deadlineMs: Duration.toMillis(sessionRequestTimeout),
          onProgress: noProgress,
          taken: connection.listing
        })
        if (Either.isLeft(answer) || answer.right._tag === "Error") {
          return yield* drop(connection, Either.isLeft(answer) ? answer.left : "connection_lost")
        }
        yield* message(connection, { method: "notifications/initialized" })
        const meta = (answer.right.result as { _meta?: Record<string, unknown> } | null)?._meta
        const hash = meta?.["agent-runtime/toolsHash"]
        if (hash === undefined || hash !== connection.announcedHash || hash !== options.toolsHash()) {
          yield* Deferred.succeed(connection.listing, undefined)
          if (!(yield* listTools(connection, connection.initialized))) return yield* drop(connection, "timeout")
        }
        if (connection.state !== "initializing") return
        connection.state = "ready"
        if (serving === connection) yield* options.saveConnection(connection.id)
      }).pipe(Effect.ensuring(Effect.andThen(
        Deferred.succeed(connection.listing, undefined),
        Deferred.succeed(connection.initialized, undefined)
      )))

    /** A replaced connection ends once its calls are answered (or after its grace). */
    const retireWhenDone = (connection: Connection) =>
      connection.state === "replaced" && connection.waiting.size === 0 && connections.has(connection.id)
        ? drop(connection, "closed")
        : Effect.void

    const scope = yield* Effect.scope
    const fork = <A, E>(effect: Effect.Effect<A, E>) => Effect.asVoid(Effect.forkIn(effect, scope))

    const replace = (connection: Connection) =>
      Effect.gen(function*() {
        connection.state = "replaced"
        yield* retireWhenDone(connection)
        yield* fork(Effect.delay(Effect.suspend(() => drop(connection, "closed")), replacedGrace))
      })

    /**
     * Connections whose stream went away and did not come back, or whose node went silent, are gone. Checked
     * every second while there are connections; an agent without one runs no checker.
     */
    let checking = false
    const checkLiveness = Effect.repeat(
      Effect.suspend(() =>
        Effect.forEach([...connections.values()], (connection) => {
          const now = Date.now()
          const detached = connection.sink === undefined &&
            now - connection.detachedAt > Duration.toMillis(reattachGrace)
          const silent = now - connection.lastHeard > Duration.toMillis(silenceLimit)
          return detached || silent ? drop(connection, "connection_lost") : Effect.void
        }, { discard: true })
      ),
      {
        schedule: Schedule.spaced("1 second"),
        // Cleared in the same step that ends the loop, so a connection made next starts a checker again.
        while: () => (checking = connections.size > 0)
      }
    )

    const connect = (request: { readonly connection?: string | undefined; readonly takeover: boolean }) =>
      Effect.gen(function*() {
        let connection = request.connection === undefined ? undefined : connections.get(request.connection)
        if (connection?.state === "replaced") connection = undefined
        const created = connection === undefined
        if (connection === undefined) {
          const holder = serving
          // A holder whose stream is gone (an application restarting, say) does not keep another out: the
          // newcomer replaces it, and its calls may still be answered within the grace.
          if (holder !== undefined && holder.state === "ready" && holder.sink !== undefined && !request.takeover) {
            return yield* new ApplicationConnected({ holder: holder.id })
          }
          connection = {
            id: newId("conn"),
            state: "initializing",
            sink: undefined,
            backlog: [],
            detachedAt: Date.now(),
            lastHeard: Date.now(),
            waiting: new Map(),
            announcedHash: options.toolsHash(),
            listing: yield* Deferred.make<void>(),
            initialized: yield* Deferred.make<void>()
          }
          connections.set(connection.id, connection)
          serving = connection
          if (!checking) {
            checking = true
            yield* fork(checkLiveness)
          }
          if (holder !== undefined) {
            if (holder.state === "initializing") yield* drop(holder, "connection_lost")
            else yield* replace(holder)
          }
          yield* fork(initialize(connection))
          yield* Effect.logInfo("application connected").pipe(
            Effect.annotateLogs({ agentId: options.agentId, connection: connection.id, takeover: request.takeover })
          )
        }
        const attached = connection
        const sink = yield* Queue.unbounded<Frame | null>()
        // A stream attached before (a reconnect naming the connection) ends: one stream per connection.
        if (attached.sink !== undefined) yield* Queue.offer(attached.sink, null)
        attached.sink = sink
        attached.lastHeard = Date.now()
        yield* Queue.offerAll(sink, attached.backlog.splice(0))
        // A new connection's first frame names the hash its handshake is decided by; a reattach, the tools now.
        const ready: Frame = {
          _tag: "Ready",
          connection: attached.id,
          toolsHash: created ? attached.announcedHash : options.toolsHash()
        }
        return Stream.make(ready).pipe(
          Stream.concat(Stream.fromQueue(sink).pipe(Stream.takeWhile((frame): frame is Frame => frame !== null))),
          Stream.merge(Stream.as(Stream.tick(keepAliveInterval), { _tag: "KeepAlive" } as Frame), {
            haltStrategy: "left"
          }),
          Stream.ensuring(Effect.sync(() => {
            if (attached.sink === sink) {
              attached.sink = undefined
              attached.detachedAt = Date.now()
            }
          }))
        )
      })

    const known = (id: string) =>
      Effect.suspend(() => {
        const connection = connections.get(id)
        if (connection === undefined) return Effect.fail(new ConnectionUnknown({ connection: id }))
        connection.lastHeard = Date.now()
        return Effect.succeed(connection)
      })

    const onNotification = (connection: Connection, method: string, params: Record<string, unknown>) =>
      Effect.gen(function*() {
        switch (method) {
          case "notifications/progress": {
            const call = connection.waiting.get(String(params.progressToken))
            if (call === undefined) return
            call.deadline = Math.min(call.started + maxCallMs, Date.now() + call.deadlineMs)
            const { progressToken: _token, ...progress } = params
            return yield* call.onProgress(progress)
          }
          case "notifications/agent-runtime/draining": {
            if (connection.state === "ready" || connection.state === "initializing") connection.state = "draining"
            if (serving === connection) {
              serving = undefined
              yield* options.saveConnection(null)
            }
            return
          }
          case "notifications/tools/list_changed": {
            if (connection.state !== "ready") return
            const taken = yield* Deferred.make<void>()
            yield* fork(listTools(connection, taken).pipe(Effect.ensuring(Deferred.succeed(taken, undefined))))
            return
          }
        }
      })

    const receive = (id: string, received: Application.JsonRpcMessage) =>
      Effect.gen(function*() {
        const connection = yield* known(id)
        if ("result" in received || "error" in received) {
          const callId = String(received.id)
          const call = connection.waiting.get(callId)
          if (call !== undefined) {
            connection.waiting.delete(callId)
            const answer: Answer = "result" in received
              ? { _tag: "Result", result: received.result }
              : { _tag: "Error", code: received.error.code, message: received.error.message, data: received.error.data }
            yield* Deferred.succeed(call.answer, answer)
            // Acknowledged once it took effect (initialize, tools/list; see `receive`), or after a while regardless.
            if (call.taken !== undefined) yield* Effect.ignore(Effect.timeout(Deferred.await(call.taken), takenWait))
            return
          }
          const how = ended.get(callId)
          // The same answer again (a retry of a post whose answer was lost), or one after an abort: taken, no effect.
          if (how === "answered" || how === "cancelled") return
          if (how !== undefined) return yield* new CallEnded({ callId, reason: how })
          if (connection.state === "replaced") return yield* new ConnectionReplaced({ connection: id })
          return yield* new CallEnded({ callId, reason: "no such call is waiting" })
        }
        if ("id" in received) {
          // A request from the application: the runtime answers ping, and nothing else.
          yield* message(
            connection,
            received.method === "ping"
              ? { id: received.id, result: {} }
              : { id: received.id, error: { code: -32601, message: `method not found: ${received.method}` } }
          )
          return
        }
        yield* onNotification(connection, received.method, received.params ?? {})
      })

    const heartbeat = (id: string) => Effect.asVoid(known(id))

    const connected = () => serving?.state === "ready"

    /** Whether a connection serves the tools, or is in its handshake and will. */
    const connecting = () => connected() || serving?.state === "initializing"

    const awaitUntil = (test: () => boolean, wait: Duration.DurationInput) =>
      Effect.repeat(Effect.sync(test), {
        until: (passed) => passed,
        schedule: Schedule.spaced("100 millis")
      }).pipe(Effect.timeoutTo({ duration: wait, onTimeout: test, onSuccess: () => true }))

    const awaitInitialized = (wait: Duration.DurationInput) =>
      Effect.gen(function*() {
        const until = Date.now() + Duration.toMillis(wait)
        while (true) {
          const connection = serving
          if (connection === undefined || connection.state !== "initializing") return true
          const left = until - Date.now()
          if (left <= 0) return false
          // Looked at again every 100 ms: a drain or a takeover may end the wait before the handshake ends.
          yield* Effect.ignore(Effect.timeout(Deferred.await(connection.initialized), Math.min(left, 100)))
        }
      })

    /** A call to `tool` on the serving connection: once, with its deadline. */
    const call = (tool: ApplicationTool, args: Record<string, unknown>, context: CallContext) =>
      Effect.gen(function*() {
        // An application reconnecting (after a move, a drain, a blip) or still in its handshake gets a moment.
        if (!connected() && context.waitForConnection) yield* awaitUntil(connected, reconnectWait)
        const connection = serving
        if (connection === undefined || connection.state !== "ready") return notConnected
        const callId = newId("call")
        const deadlineMs = tool.deadlineMs ?? defaultDeadlineMs
        const identity = yield* options.identity({ actor: context.actor, origin: context.origin })
        const again = askedAgain(context)
        const { approval } = context
        const answer = yield* ask(connection, "tools/call", {
          name: tool.name,
          arguments: args,
          ...again.params,
          _meta: {
            progressToken: callId,
            "agent-runtime/callId": callId,
            "agent-runtime/toolCallId": context.toolCallId,
            "agent-runtime/requestId": context.requestId,
            "agent-runtime/idempotencyKey": idempotencyKey(options.agentId, context.toolCallId),
            "agent-runtime/deadline": Date.now() + deadlineMs,
            ...(context.actor === undefined ? {} : { "agent-runtime/actor": context.actor }),
            "agent-runtime/identity": approval === undefined
              ? identity
              : { ...identity, approval: { input: approval.inputId, by: approval.by, at: approval.at } },
            ...again.meta
          }
        }, { id: callId, deadlineMs, onProgress: context.update })
        return Either.match(answer, {
          onLeft: (lost) => unanswered(lost, deadlineMs),
          onRight: (answered) => toToolResult(answered, tool.name, args)
        })
      })

    const tools = (listed: ReadonlyArray<ApplicationTool>, context: Omit<CallContext, "toolCallId" | "update">) =>
      asTools(
        listed,
        (tool, args, toolContext) =>
          call(tool, args, {
            ...context,
            toolCallId: toolContext.toolCallId,
            update: toolContext.update,
            ...(toolContext.answer === undefined ? {} : { answer: toolContext.answer }),
            ...(toolContext.approval === undefined ? {} : { approval: toolContext.approval }),
            ...(toolContext.resume === undefined ? {} : { resume: toolContext.resume })
          })
      )

    const drain = Effect.suspend(() => {
      const connection = serving
      if (connection === undefined) return Effect.void
      connection.state = connection.state === "replaced" ? "replaced" : "draining"
      serving = undefined
      return message(connection, { method: "notifications/agent-runtime/draining", params: {} })
    })

    yield* Effect.addFinalizer(() =>
      Effect.forEach([...connections.values()], (connection) => drop(connection, "connection_lost", false), {
        discard: true
      })
    )

    return {
      connect,
      receive,
      heartbeat,
      connected,
      awaitConnected: (wait) => awaitUntil(connecting, wait),
      awaitInitialized,
      tools,
      drain
    }
  })
