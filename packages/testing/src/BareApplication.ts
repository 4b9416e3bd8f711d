/**
 * An application that speaks the connection's wire itself, without our SDK
 * (docs/application-tools.md): it opens `GET /clients/{id}/events`, answers
 * initialize, tools/list and tools/call as their `mcp` frames arrive by
 * POST /clients/{id}/mcp, and keeps every call it got with when it came.
 * For the wire tests and the tool-call benchmark.
 */
import type { Scope } from "effect"
import { Deferred, Effect, Runtime } from "effect"
import * as Http from "./Http.ts"

export interface Call {
  readonly message: any
  /** When its frame was read, and when its answer was posted (epoch ms, sub-millisecond). */
  readonly receivedAt: number
  answeredAt: number
}

export interface Options {
  readonly base: string
  readonly agentId: string
  readonly token: string
  /** Query of the events request, e.g. `?takeover=true`. */
  readonly query?: string
  readonly tools: ReadonlyArray<Record<string, unknown>>
  /** A call's result; by default one text naming the tool. */
  readonly answer?: (message: any) => unknown
  /** Calls left unanswered (kept in `calls`), for the test to answer itself with `post`. */
  readonly hold?: (message: any) => boolean
  /** How long to wait before answering a request of the runtime (initialize, tools/list...); Infinity: never. */
  readonly delayMs?: (message: any) => number
}

const now = () => performance.timeOrigin + performance.now()

/** A call answered with a JSON-RPC error instead of a result (for `Options.answer`). */
export const rpcError = (code: number, message: string, data?: unknown) => ({
  [rpcErrorMark]: { code, message, ...(data === undefined ? {} : { data }) }
})

const rpcErrorMark = "__rpcError"

export const connect = (options: Options) =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    const response = yield* Effect.promise(() =>
      fetch(`${options.base}/clients/${options.agentId}/events${options.query ?? ""}`, {
        headers: { accept: "text/event-stream", authorization: `Bearer ${options.token}` },
        signal: controller.signal
      })
    )
    if (response.status !== 200) return { _tag: "Refused", status: response.status } as const
    const frames: Array<Http.SseFrame> = []
    const calls: Array<Call> = []
    let connection = ""
    const post = (message: unknown) =>
      Http.request(options.base, "POST", `/clients/${options.agentId}/mcp`, {
        token: options.token,
        headers: { "agent-runtime-connection": connection },
        json: message
      })
    const answer = options.answer ??
      ((message: any) => ({ content: [{ type: "text", text: `${message.params.name} done` }] }))
    const reply = (message: any): unknown => {
      switch (message.method) {
        case "initialize":
          return {
            protocolVersion: message.params.protocolVersion,
            capabilities: { tools: {} },
            serverInfo: { name: "bare", version: "1" }
          }
        case "tools/list":
          return { tools: options.tools }
        case "tools/call":
          return answer(message)
        default:
          return {}
      }
    }
    const runtime = yield* Effect.runtime<never>()
    const ready = yield* Deferred.make<void>()
    // Frames are handled as they are parsed, so a call's frame is answered the moment it is read.
    const onFrame = (frame: Http.SseFrame) => {
      frames.push(frame)
      if (frame.event === "ready") {
        connection = JSON.parse(frame.data!).connection
        Deferred.unsafeDone(ready, Effect.void)
      }
      if (frame.event !== "mcp") return
      const message = JSON.parse(frame.data!).message
      if (message.id === undefined || message.method === undefined) return
      const receivedAt = now()
      const call: Call | undefined = message.method === "tools/call"
        ? { message, receivedAt, answeredAt: 0 }
        : undefined
      if (call !== undefined) calls.push(call)
      if (call !== undefined && options.hold?.(message) === true) return
      const delayMs = options.delayMs?.(message) ?? 0
      if (delayMs === Infinity) return
      const result = reply(message)
      if (call !== undefined) call.answeredAt = now()
      const error = (result as Record<string, unknown> | null)?.[rpcErrorMark]
      const answer = post(
        error === undefined ? { jsonrpc: "2.0", id: message.id, result } : { jsonrpc: "2.0", id: message.id, error }
      )
      Runtime.runFork(runtime)(delayMs > 0 ? Effect.delay(answer, delayMs) : answer)
    }
    void Http.readFrames(response, onFrame)
    yield* Deferred.await(ready)
    return { _tag: "Connected", connection, calls, frames, post, close: Effect.sync(() => controller.abort()) } as const
  })

export type BareApplication = Extract<Effect.Effect.Success<ReturnType<typeof connect>>, { _tag: "Connected" }>

/** Connects, or dies naming the status it was refused with. */
export const connected = (options: Options): Effect.Effect<BareApplication, never, Scope.Scope> =>
  Effect.flatMap(connect(options), (app) =>
    app._tag === "Connected"
      ? Effect.succeed(app)
      : Effect.die(new Error(`the connection was refused with ${app.status}`)))
