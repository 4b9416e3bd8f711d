/**
 * A scriptable fake model provider for tests and benchmarks: one node:http
 * server on 127.0.0.1 that speaks the OpenAI chat completions, OpenAI
 * responses and Anthropic messages wire protocols the way the official SDKs
 * send and parse them. Scripted steps are answered in order (per model first,
 * then any model); with none queued it answers a short "ok".
 *
 * The request path is plain node:http and promises, not Effect: benchmarks
 * hit it at high concurrency, and it has no failure worth typing. Effect only
 * owns its lifetime (`start` closes it with the scope).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Timers from "node:timers/promises"

/** A scripted wait; it does not keep the process alive (a reply held for minutes outlives a benchmark run). */
const sleep = (ms: number) => Timers.setTimeout(ms, undefined, { ref: false })

export interface ToolCall {
  /** Defaults to a protocol-shaped id (`call_...`, `toolu_...`). */
  readonly id?: string
  readonly name: string
  /** A value is sent as its JSON; a string is sent verbatim (so tests can send broken JSON). */
  readonly arguments: unknown
}

/**
 * Token counts, each written verbatim into its protocol's field: `input` is
 * `prompt_tokens` / `input_tokens` (OpenAI counts cached tokens inside it,
 * Anthropic does not), `output` is `completion_tokens` / `output_tokens`
 * (reasoning included), `cacheWrite` exists on Anthropic only.
 */
export interface Usage {
  readonly input?: number
  readonly output?: number
  readonly cacheRead?: number
  readonly cacheWrite?: number
  readonly reasoning?: number
}

export type StopReason = "stop" | "length" | "tool_calls"

export interface ErrorReply {
  readonly status: number
  readonly message?: string
  /** Seconds, sent as the `retry-after` header. */
  readonly retryAfter?: number
}

export interface Step {
  readonly text?: string
  readonly thinking?: string
  readonly toolCalls?: ReadonlyArray<ToolCall>
  readonly usage?: Usage
  /** Defaults to `tool_calls` when there are tool calls, else `stop`. */
  readonly stopReason?: StopReason
  /** Answers this error, in the protocol's own body, instead of a reply. */
  readonly error?: ErrorReply
  /**
   * Destroys the connection after this many SSE events (0: before any
   * answer). A non-streamed request is dropped before any answer.
   */
  readonly cutAfterEvents?: number
  /** Overrides the server's `latencyMs` for this reply. */
  readonly latencyMs?: number
  /** Overrides the server's `tokenDelayMs` for this reply. */
  readonly tokenDelayMs?: number
}

export type Protocol =
  | "openai-chat"
  | "openai-responses"
  | "anthropic-messages"
  | "anthropic-count-tokens"
  | "models"
  | "unknown"

export interface RecordedRequest {
  readonly method: string
  /** The path without its query. */
  readonly path: string
  /** The request target as received, query included. */
  readonly url: string
  /** Lowercased names; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>
  /** The parsed JSON body; the raw text when it is not JSON; undefined when empty. */
  readonly body: unknown
  readonly protocol: Protocol
  /** `performance.timeOrigin + performance.now()` when the request arrived, for latency figures. */
  readonly receivedAt: number
}

export interface ScriptOptions {
  /** Only requests for this model take the step. */
  readonly model?: string
}

export interface Options {
  /** Wait before answering each model request (time to first byte). */
  readonly latencyMs?: number
  /** Wait before each streamed delta; a non-streamed reply waits for all of them. */
  readonly tokenDelayMs?: number
  /** 0 (the default) takes a free port. */
  readonly port?: number
  /** Ids listed by GET /v1/models. */
  readonly models?: ReadonlyArray<string>
  /** Only the latest this many requests are kept (10,000 by default), so long benchmarks stay flat. */
  readonly maxRecorded?: number
}

export interface FakeUpstream {
  /** Base URL without a path, e.g. `http://127.0.0.1:1234`. */
  readonly url: string
  readonly port: number
  /** Queues steps, answered in order. */
  readonly script: (step: Step | ReadonlyArray<Step>, options?: ScriptOptions) => void
  readonly requests: () => ReadonlyArray<RecordedRequest>
  /** Forgets queued steps and recorded requests. */
  readonly reset: () => void
}

/** Any key starting with this is refused with 401 on every route. */
export const refusedKeyPrefix = "sk-invalid"

export const defaultModels: ReadonlyArray<string> = [
  "gpt-4o-mini",
  "gpt-5-mini",
  "claude-sonnet-4-6",
  "claude-haiku-4-5"
]

/**
 * Starts the server on 127.0.0.1; it closes with the scope, cutting open
 * connections.
 */
export const start = (options: Options = {}): Effect.Effect<FakeUpstream, never, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.async<{ readonly server: Http.Server; readonly state: State }>((resume) => {
        const state = makeState(options)
        const server = Http.createServer((req, res) => handle(state, req, res))
        // Longer than clients' idle timeouts, so a client never reuses a socket the server is closing.
        server.keepAliveTimeout = 65_000
        server.once("error", (error) => resume(Effect.die(error)))
        server.listen(options.port ?? 0, "127.0.0.1", () => resume(Effect.succeed({ server, state })))
      }),
      ({ server }) =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    ),
    ({ server, state }): FakeUpstream => {
      const port = (server.address() as AddressInfo).port
      return {
        url: `http://127.0.0.1:${port}`,
        port,
        script: (step, scriptOptions) => enqueue(state, step, scriptOptions?.model),
        requests: () => state.recorded.slice(-state.maxRecorded),
        reset: () => reset(state)
      }
    }
  )

// ---------------------------------------------------------------------------
// State and routing

interface State {
  readonly latencyMs: number
  readonly tokenDelayMs: number
  readonly models: ReadonlyArray<string>
  readonly maxRecorded: number
  readonly anyModel: Array<Step>
  readonly byModel: Map<string, Array<Step>>
  readonly recorded: Array<RecordedRequest>
}

const makeState = (options: Options): State => ({
  latencyMs: options.latencyMs ?? 0,
  tokenDelayMs: options.tokenDelayMs ?? 0,
  models: options.models ?? defaultModels,
  maxRecorded: options.maxRecorded ?? 10_000,
  anyModel: [],
  byModel: new Map(),
  recorded: []
})

const enqueue = (state: State, step: Step | ReadonlyArray<Step>, model: string | undefined) => {
  const steps: ReadonlyArray<Step> = Array.isArray(step) ? step : [step as Step]
  if (model === undefined) {
    for (const step of steps) state.anyModel.push(step)
    return
  }
  const queue = state.byModel.get(model)
  if (queue) { for (const step of steps) queue.push(step) }
  else state.byModel.set(model, [...steps])
}

const take = (state: State, model: string): Step | undefined => {
  const queue = state.byModel.get(model)
  if (queue !== undefined && queue.length > 0) return queue.shift()
  return state.anyModel.shift()
}

const reset = (state: State) => {
  state.anyModel.length = 0
  state.byModel.clear()
  state.recorded.length = 0
}

const record = (state: State, request: RecordedRequest) => {
  state.recorded.push(request)
  // Trimmed in batches so recording stays O(1) per request.
  if (state.recorded.length >= state.maxRecorded * 2) {
    state.recorded.splice(0, state.recorded.length - state.maxRecorded)
  }
}

const routes: Record<string, Protocol> = {
  "/v1/chat/completions": "openai-chat",
  "/chat/completions": "openai-chat",
  "/v1/responses": "openai-responses",
  "/responses": "openai-responses",
  "/v1/messages": "anthropic-messages",
  "/v1/messages/count_tokens": "anthropic-count-tokens",
  "/v1/models": "models",
  "/models": "models"
}

const protocolOf = (path: string): Protocol =>
  routes[path] ?? (path.startsWith("/v1/models/") || path.startsWith("/models/") ? "models" : "unknown")

const handle = (state: State, req: Http.IncomingMessage, res: Http.ServerResponse) => {
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    respond(state, req, res, Buffer.concat(chunks).toString("utf8")).catch(() => res.destroy())
  })
}

type Json = { readonly [key: string]: unknown }

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const respond = async (state: State, req: Http.IncomingMessage, res: Http.ServerResponse, raw: string) => {
  const url = req.url ?? "/"
  const query = url.indexOf("?")
  const path = query === -1 ? url : url.slice(0, query)
  const method = req.method ?? "GET"
  let body: unknown = undefined
  let parsed = true
  if (raw !== "") {
    try {
      body = JSON.parse(raw)
    } catch {
      body = raw
      parsed = false
    }
  }
  if (path.startsWith("/_fake/")) return admin(state, method, path, url, body, parsed, res)

  const protocol = protocolOf(path)
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value
  }
  record(state, { method, path, url, headers, body, protocol, receivedAt: performance.timeOrigin + performance.now() })

  const anthropic = protocol === "anthropic-messages" || protocol === "anthropic-count-tokens"
  const fail = (status: number, message: string, param: string | null = null) =>
    sendError(res, anthropic, { status, message }, param)

  if (protocol === "unknown") return fail(404, `Invalid URL (${method} ${path})`)
  // Keys made to be refused, so key verification and refused-key paths can be tested end to end.
  const presented = headers["x-api-key"] ?? headers.authorization?.replace(/^Bearer /i, "") ?? ""
  if (presented.startsWith(refusedKeyPrefix)) return fail(401, "Incorrect API key provided.")
  if (protocol === "models") {
    if (method !== "GET") return fail(404, `Invalid URL (${method} ${path})`)
    return models(state, path, headers["anthropic-version"] !== undefined, res)
  }
  if (method !== "POST") return fail(404, `Invalid URL (${method} ${path})`)
  if (!parsed || !isObject(body)) return fail(400, "We could not parse the JSON body of your request.")
  if (protocol === "anthropic-count-tokens") {
    // Deterministic and unlike a local estimate, so callers can tell whose count they got.
    return sendJson(res, 200, { input_tokens: Math.ceil(raw.length / 4) }, { "request-id": requestId() })
  }
  if (typeof body.model !== "string") {
    return anthropic ? fail(400, "model: Field required") : fail(400, "you must provide a model parameter", "model")
  }
  if (protocol !== "openai-responses" && !Array.isArray(body.messages)) {
    return anthropic
      ? fail(400, "messages: Field required")
      : fail(400, "Missing required parameter: 'messages'.", "messages")
  }
  if (anthropic && typeof body.max_tokens !== "number") return fail(400, "max_tokens: Field required")

  const step = take(state, body.model) ?? {}
  const latencyMs = step.latencyMs ?? state.latencyMs
  const tokenDelayMs = step.tokenDelayMs ?? state.tokenDelayMs
  if (latencyMs > 0) await sleep(latencyMs)
  if (step.error !== undefined) return sendError(res, anthropic, step.error, null)

  const reply = makeReply(step, body.model, raw.length)
  const stream = body.stream === true
  if (!stream) {
    if (step.cutAfterEvents !== undefined) return void req.socket.destroy()
    if (tokenDelayMs > 0) await sleep(tokenDelayMs * reply.deltas)
  }
  const timing = { tokenDelayMs, cutAfterEvents: step.cutAfterEvents }
  switch (protocol) {
    case "openai-chat": {
      const includeUsage = isObject(body.stream_options) && body.stream_options.include_usage === true
      return stream
        ? sendStream(res, chatChunks(reply, includeUsage), timing, openAiHeaders())
        : sendJson(res, 200, chatCompletion(reply), openAiHeaders())
    }
    case "openai-responses":
      return stream
        ? sendStream(res, responseEvents(reply, body), timing, openAiHeaders())
        : sendJson(res, 200, responseObject(reply, body), openAiHeaders())
    case "anthropic-messages":
      return stream
        ? sendStream(res, anthropicEvents(reply), timing, { "request-id": requestId() })
        : sendJson(res, 200, anthropicMessage(reply), { "request-id": requestId() })
  }
}

const admin = (
  state: State,
  method: string,
  path: string,
  url: string,
  body: unknown,
  parsed: boolean,
  res: Http.ServerResponse
) => {
  if (method === "POST" && path === "/_fake/script") {
    const steps = Array.isArray(body) ? body : [body]
    if (!parsed || !steps.every(isObject)) {
      return sendJson(res, 400, { error: "body must be a step or an array of steps" })
    }
    const model = new URLSearchParams(url.slice(path.length)).get("model") ?? undefined
    enqueue(state, steps as ReadonlyArray<Step>, model)
    return sendJson(res, 200, { queued: steps.length })
  }
  if (method === "GET" && path === "/_fake/requests") {
    return sendJson(res, 200, state.recorded.slice(-state.maxRecorded))
  }
  if (method === "POST" && path === "/_fake/reset") {
    reset(state)
    return sendJson(res, 200, { reset: true })
  }
  return sendJson(res, 404, { error: `no admin route ${method} ${path}` })
}

// ---------------------------------------------------------------------------
// Writing answers

interface Frame {
  readonly text: string
  /** A token delta: tokenDelayMs applies before it. */
  readonly delta: boolean
}

interface Timing {
  readonly tokenDelayMs: number
  readonly cutAfterEvents: number | undefined
}

const sendJson = (res: Http.ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}) => {
  const text = JSON.stringify(value)
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...headers
  })
  res.end(text)
}

const sendStream = async (
  res: Http.ServerResponse,
  frames: ReadonlyArray<Frame>,
  timing: Timing,
  headers: Record<string, string>
) => {
  const cut = timing.cutAfterEvents
  if (cut !== undefined && cut <= 0) return void res.socket?.destroy()
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...headers })
  for (let i = 0; i < frames.length; i++) {
    const frame = frames[i]!
    if (frame.delta && timing.tokenDelayMs > 0) await sleep(timing.tokenDelayMs)
    if (res.destroyed) return
    if (cut !== undefined && i + 1 >= cut) {
      // Destroyed once the event is handed to the socket, so the client does see it.
      return void res.write(frame.text, () => res.destroy())
    }
    res.write(frame.text)
  }
  // Asked to cut after the last event: the body still never ends properly.
  if (cut !== undefined) return void res.destroy()
  res.end()
}

const openAiHeaders = () => ({ "x-request-id": requestId() })

const openAiErrors: Record<number, readonly [type: string, code: string | null, message: string]> = {
  400: ["invalid_request_error", null, "Invalid request."],
  401: ["invalid_request_error", "invalid_api_key", "Incorrect API key provided."],
  403: ["invalid_request_error", null, "You are not allowed to use this model."],
  404: ["invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."],
  429: ["requests", "rate_limit_exceeded", "Rate limit reached for requests."],
  500: ["server_error", null, "The server had an error while processing your request. Sorry about that!"],
  503: ["server_error", null, "The engine is currently overloaded, please try again later."],
  529: ["server_error", "overloaded", "The engine is currently overloaded, please try again later."]
}

const anthropicErrors: Record<number, readonly [type: string, message: string]> = {
  400: ["invalid_request_error", "Invalid request."],
  401: ["authentication_error", "invalid x-api-key"],
  403: ["permission_error", "Your API key does not have permission to use the specified resource."],
  404: ["not_found_error", "The requested resource could not be found."],
  413: ["request_too_large", "Request exceeds the maximum allowed number of bytes."],
  429: ["rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."],
  500: ["api_error", "Internal server error"],
  504: ["timeout_error", "Request timed out"],
  529: ["overloaded_error", "Overloaded"]
}

const sendError = (res: Http.ServerResponse, anthropic: boolean, error: ErrorReply, param: string | null) => {
  const id = requestId()
  const headers: Record<string, string> = anthropic ? { "request-id": id } : { "x-request-id": id }
  if (error.retryAfter !== undefined) headers["retry-after"] = String(error.retryAfter)
  const server = error.status >= 500
  if (anthropic) {
    const [type, message] = anthropicErrors[error.status] ??
      (server ? ["api_error", "Internal server error"] : ["invalid_request_error", "Invalid request."])
    return sendJson(res, error.status, {
      type: "error",
      error: { type, message: error.message ?? message },
      request_id: id
    }, headers)
  }
  const [type, code, message] = openAiErrors[error.status] ??
    (server ? ["server_error", null, "The server had an error."] : ["invalid_request_error", null, "Invalid request."])
  return sendJson(res, error.status, { error: { message: error.message ?? message, type, param, code } }, headers)
}

const models = (state: State, path: string, anthropic: boolean, res: Http.ServerResponse) => {
  const openAi = (id: string) => ({ id, object: "model", created: 1_735_689_600, owned_by: "fake-upstream" })
  const claude = (id: string) => ({ type: "model", id, display_name: id, created_at: "2025-01-01T00:00:00Z" })
  const slash = path.indexOf("/", path.indexOf("models"))
  if (slash !== -1) {
    const id = decodeURIComponent(path.slice(slash + 1))
    if (!state.models.includes(id)) {
      return sendError(res, anthropic, { status: 404, message: `model ${id} not found` }, "model")
    }
    return sendJson(res, 200, anthropic ? claude(id) : openAi(id))
  }
  // The Anthropic SDK lists models at the same path, so answer in its shape when it is the caller.
  if (anthropic) {
    return sendJson(res, 200, {
      data: state.models.map(claude),
      has_more: false,
      first_id: state.models[0] ?? null,
      last_id: state.models.at(-1) ?? null
    })
  }
  return sendJson(res, 200, { object: "list", data: state.models.map(openAi) })
}

// ---------------------------------------------------------------------------
// The reply, independent of protocol

interface Call {
  readonly id: string | undefined
  readonly name: string
  /** The arguments as JSON text. */
  readonly arguments: string
}

interface Reply {
  readonly model: string
  readonly text: string
  readonly thinking: string
  readonly toolCalls: ReadonlyArray<Call>
  readonly stop: StopReason
  readonly usage: Required<Usage>
  /** How many deltas a stream of it has: a non-streamed reply waits this many token delays. */
  readonly deltas: number
}

const makeReply = (step: Step, model: string, bodyLength: number): Reply => {
  const toolCalls = (step.toolCalls ?? []).map((call): Call => ({
    id: call.id,
    name: call.name,
    arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments ?? {})
  }))
  const text = step.text ?? (step.thinking === undefined && toolCalls.length === 0 ? "ok" : "")
  const thinking = step.thinking ?? ""
  const generated = text.length + thinking.length + toolCalls.reduce((sum, call) => sum + call.arguments.length, 0)
  const usage = step.usage ?? {}
  return {
    model,
    text,
    thinking,
    toolCalls,
    stop: step.stopReason ?? (toolCalls.length > 0 ? "tool_calls" : "stop"),
    usage: {
      input: usage.input ?? Math.ceil(bodyLength / 4),
      output: usage.output ?? Math.max(1, Math.ceil(generated / 4)),
      cacheRead: usage.cacheRead ?? 0,
      cacheWrite: usage.cacheWrite ?? 0,
      reasoning: usage.reasoning ?? Math.ceil(thinking.length / 4)
    },
    deltas: words(text).length + words(thinking).length +
      toolCalls.reduce((sum, call) => sum + pieces(call.arguments).length, 0)
  }
}

/** Splits text into word deltas (leading space kept) that join back to it exactly. */
const words = (text: string): Array<string> => {
  const out: Array<string> = text.match(/\s*\S+/g) ?? []
  const length = out.reduce((sum, word) => sum + word.length, 0)
  if (length < text.length) {
    if (out.length === 0) out.push(text)
    else out[out.length - 1] += text.slice(length)
  }
  return out
}

/** Splits tool arguments into deltas of a few characters, never inside a surrogate pair. */
const pieces = (text: string, size = 8): Array<string> => {
  const out: Array<string> = []
  let start = 0
  while (start < text.length) {
    let end = Math.min(start + size, text.length)
    const last = text.charCodeAt(end - 1)
    if (last >= 0xd800 && last <= 0xdbff && end < text.length) end++
    out.push(text.slice(start, end))
    start = end
  }
  return out
}

const hex = () => Crypto.randomUUID().replaceAll("-", "")
const requestId = () => `req_${hex()}`
const now = () => Math.floor(Date.now() / 1000)

// ---------------------------------------------------------------------------
// OpenAI chat completions

const chatUsage = (usage: Required<Usage>) => ({
  prompt_tokens: usage.input,
  completion_tokens: usage.output,
  total_tokens: usage.input + usage.output,
  prompt_tokens_details: { cached_tokens: usage.cacheRead, audio_tokens: 0 },
  completion_tokens_details: {
    reasoning_tokens: usage.reasoning,
    audio_tokens: 0,
    accepted_prediction_tokens: 0,
    rejected_prediction_tokens: 0
  }
})

const callIds = (reply: Reply) => reply.toolCalls.map((call) => call.id ?? `call_${hex().slice(0, 24)}`)

const chatCompletion = (reply: Reply) => {
  const ids = callIds(reply)
  return {
    id: `chatcmpl-${hex()}`,
    object: "chat.completion",
    created: now(),
    model: reply.model,
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: reply.text === "" && reply.toolCalls.length > 0 ? null : reply.text,
        refusal: null,
        annotations: [],
        ...(reply.thinking === "" ? {} : { reasoning_content: reply.thinking }),
        ...(reply.toolCalls.length === 0 ? {} : {
          tool_calls: reply.toolCalls.map((call, i) => ({
            id: ids[i],
            type: "function",
            function: { name: call.name, arguments: call.arguments }
          }))
        })
      },
      logprobs: null,
      finish_reason: reply.stop
    }],
    usage: chatUsage(reply.usage),
    service_tier: "default",
    system_fingerprint: "fp_fake"
  }
}

const chatChunks = (reply: Reply, includeUsage: boolean): Array<Frame> => {
  const ids = callIds(reply)
  const base = {
    id: `chatcmpl-${hex()}`,
    object: "chat.completion.chunk",
    created: now(),
    model: reply.model,
    service_tier: "default",
    system_fingerprint: "fp_fake"
  }
  // With include_usage, every chunk but the last carries `usage: null`.
  const noUsage = includeUsage ? { usage: null } : {}
  const frames: Array<Frame> = []
  const chunk = (delta: object, delta_: boolean, finish: StopReason | null = null) =>
    frames.push({
      text: `data: ${
        JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...noUsage })
      }\n\n`,
      delta: delta_
    })
  // As OpenAI: content "" opens a text reply, null one made only of tool calls.
  chunk(
    { role: "assistant", content: reply.text === "" && reply.toolCalls.length > 0 ? null : "", refusal: null },
    false
  )
  for (const piece of words(reply.thinking)) chunk({ reasoning_content: piece }, true)
  for (const piece of words(reply.text)) chunk({ content: piece }, true)
  reply.toolCalls.forEach((call, index) => {
    chunk(
      { tool_calls: [{ index, id: ids[index], type: "function", function: { name: call.name, arguments: "" } }] },
      false
    )
    for (const piece of pieces(call.arguments)) chunk({ tool_calls: [{ index, function: { arguments: piece } }] }, true)
  })
  chunk({}, false, reply.stop)
  if (includeUsage) {
    frames.push({
      text: `data: ${JSON.stringify({ ...base, choices: [], usage: chatUsage(reply.usage) })}\n\n`,
      delta: false
    })
  }
  frames.push({ text: "data: [DONE]\n\n", delta: false })
  return frames
}

// ---------------------------------------------------------------------------
// OpenAI responses

const responsesUsage = (usage: Required<Usage>) => ({
  input_tokens: usage.input,
  input_tokens_details: { cached_tokens: usage.cacheRead },
  output_tokens: usage.output,
  output_tokens_details: { reasoning_tokens: usage.reasoning },
  total_tokens: usage.input + usage.output
})

/** The finished output items, in output order. */
const responseOutput = (reply: Reply) => {
  const status = reply.stop === "length" ? "incomplete" : "completed"
  const output: Array<Record<string, unknown>> = []
  if (reply.thinking !== "") {
    output.push({ id: `rs_${hex()}`, type: "reasoning", summary: [{ type: "summary_text", text: reply.thinking }] })
  }
  if (reply.text !== "" || reply.toolCalls.length === 0) {
    output.push({
      id: `msg_${hex()}`,
      type: "message",
      status,
      role: "assistant",
      content: [{ type: "output_text", annotations: [], logprobs: [], text: reply.text }]
    })
  }
  const ids = callIds(reply)
  reply.toolCalls.forEach((call, i) =>
    output.push({
      id: `fc_${hex()}`,
      type: "function_call",
      status: "completed",
      arguments: call.arguments,
      call_id: ids[i],
      name: call.name
    })
  )
  return output
}

const responseShell = (reply: Reply, body: Json, id: string, createdAt: number) => ({
  id,
  object: "response",
  created_at: createdAt,
  background: false,
  error: null,
  instructions: body.instructions ?? null,
  max_output_tokens: body.max_output_tokens ?? null,
  model: reply.model,
  parallel_tool_calls: body.parallel_tool_calls ?? true,
  previous_response_id: body.previous_response_id ?? null,
  reasoning: {
    effort: isObject(body.reasoning) ? body.reasoning.effort ?? null : null,
    summary: isObject(body.reasoning) ? body.reasoning.summary ?? null : null
  },
  service_tier: "default",
  store: body.store ?? true,
  temperature: body.temperature ?? 1,
  text: body.text ?? { format: { type: "text" } },
  tool_choice: body.tool_choice ?? "auto",
  tools: body.tools ?? [],
  top_p: body.top_p ?? 1,
  truncation: body.truncation ?? "disabled",
  user: null,
  metadata: body.metadata ?? {}
})

const finished = (reply: Reply, body: Json, id: string, createdAt: number, output: Array<unknown>) => {
  const incomplete = reply.stop === "length"
  return {
    ...responseShell(reply, body, id, createdAt),
    status: incomplete ? "incomplete" : "completed",
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    output,
    usage: responsesUsage(reply.usage)
  }
}

const responseObject = (reply: Reply, body: Json) =>
  finished(reply, body, `resp_${hex()}`, now(), responseOutput(reply))

const responseEvents = (reply: Reply, body: Json): Array<Frame> => {
  const id = `resp_${hex()}`
  const createdAt = now()
  const output = responseOutput(reply)
  const frames: Array<Frame> = []
  let sequence = 0
  const event = (type: string, fields: object, delta = false) =>
    frames.push({
      text: `event: ${type}\ndata: ${JSON.stringify({ type, ...fields, sequence_number: sequence++ })}\n\n`,
      delta
    })
  const pending = {
    ...responseShell(reply, body, id, createdAt),
    status: "in_progress",
    incomplete_details: null,
    output: [],
    usage: null
  }
  event("response.created", { response: pending })
  event("response.in_progress", { response: pending })
  output.forEach((item, output_index) => {
    const item_id = item.id as string
    switch (item.type) {
      case "reasoning": {
        event("response.output_item.added", { output_index, item: { ...item, summary: [] } })
        const part = { type: "summary_text", text: "" }
        event("response.reasoning_summary_part.added", { item_id, output_index, summary_index: 0, part })
        for (const delta of words(reply.thinking)) {
          event("response.reasoning_summary_text.delta", { item_id, output_index, summary_index: 0, delta }, true)
        }
        const text = reply.thinking
        event("response.reasoning_summary_text.done", { item_id, output_index, summary_index: 0, text })
        event("response.reasoning_summary_part.done", {
          item_id,
          output_index,
          summary_index: 0,
          part: { ...part, text }
        })
        break
      }
      case "message": {
        event("response.output_item.added", { output_index, item: { ...item, status: "in_progress", content: [] } })
        const part = { type: "output_text", annotations: [], logprobs: [], text: "" }
        event("response.content_part.added", { item_id, output_index, content_index: 0, part })
        for (const delta of words(reply.text)) {
          event("response.output_text.delta", { item_id, output_index, content_index: 0, delta, logprobs: [] }, true)
        }
        const text = reply.text
        event("response.output_text.done", { item_id, output_index, content_index: 0, text, logprobs: [] })
        event("response.content_part.done", { item_id, output_index, content_index: 0, part: { ...part, text } })
        break
      }
      case "function_call": {
        const args = item.arguments as string
        event("response.output_item.added", { output_index, item: { ...item, status: "in_progress", arguments: "" } })
        for (const delta of pieces(args)) {
          event("response.function_call_arguments.delta", { item_id, output_index, delta }, true)
        }
        event("response.function_call_arguments.done", { item_id, output_index, arguments: args })
        break
      }
    }
    event("response.output_item.done", { output_index, item })
  })
  const response = finished(reply, body, id, createdAt, output)
  event(response.status === "incomplete" ? "response.incomplete" : "response.completed", { response })
  return frames
}

// ---------------------------------------------------------------------------
// Anthropic messages

const anthropicStop = { stop: "end_turn", length: "max_tokens", tool_calls: "tool_use" } as const

const anthropicUsage = (usage: Required<Usage>) => ({
  input_tokens: usage.input,
  cache_creation_input_tokens: usage.cacheWrite,
  cache_read_input_tokens: usage.cacheRead,
  output_tokens: usage.output,
  service_tier: "standard"
})

// Opaque to clients, who only hand it back; fixed per thinking text so replays match.
const signature = (thinking: string) => Crypto.createHash("sha256").update(thinking).digest("base64")

const toolUseIds = (reply: Reply) => reply.toolCalls.map((call) => call.id ?? `toolu_01${hex().slice(0, 22)}`)

const parseInput = (json: string): unknown => {
  try {
    return JSON.parse(json)
  } catch {
    return json
  }
}

const anthropicMessage = (reply: Reply) => {
  const ids = toolUseIds(reply)
  const content: Array<object> = []
  if (reply.thinking !== "") {
    content.push({ type: "thinking", thinking: reply.thinking, signature: signature(reply.thinking) })
  }
  if (reply.text !== "" || reply.toolCalls.length === 0) content.push({ type: "text", text: reply.text })
  reply.toolCalls.forEach((call, i) =>
    content.push({ type: "tool_use", id: ids[i], name: call.name, input: parseInput(call.arguments) })
  )
  return {
    id: `msg_01${hex().slice(0, 22)}`,
    type: "message",
    role: "assistant",
    model: reply.model,
    content,
    stop_reason: anthropicStop[reply.stop],
    stop_sequence: null,
    usage: anthropicUsage(reply.usage)
  }
}

const anthropicEvents = (reply: Reply): Array<Frame> => {
  const ids = toolUseIds(reply)
  const frames: Array<Frame> = []
  const event = (type: string, fields: object, delta = false) =>
    frames.push({ text: `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`, delta })
  const usage = anthropicUsage(reply.usage)
  event("message_start", {
    message: {
      id: `msg_01${hex().slice(0, 22)}`,
      type: "message",
      role: "assistant",
      model: reply.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      // The real API counts the first output token here; message_delta carries the total.
      usage: { ...usage, output_tokens: Math.min(1, usage.output_tokens) }
    }
  })
  let index = 0
  // The API sends a ping after the first block starts.
  const block = (content_block: object) => {
    event("content_block_start", { index, content_block })
    if (index === 0) event("ping", {})
  }
  if (reply.thinking !== "") {
    block({ type: "thinking", thinking: "", signature: "" })
    for (const thinking of words(reply.thinking)) {
      event("content_block_delta", { index, delta: { type: "thinking_delta", thinking } }, true)
    }
    event("content_block_delta", { index, delta: { type: "signature_delta", signature: signature(reply.thinking) } })
    event("content_block_stop", { index })
    index++
  }
  if (reply.text !== "" || reply.toolCalls.length === 0) {
    block({ type: "text", text: "" })
    for (const text of words(reply.text)) {
      event("content_block_delta", { index, delta: { type: "text_delta", text } }, true)
    }
    event("content_block_stop", { index })
    index++
  }
  reply.toolCalls.forEach((call, i) => {
    block({ type: "tool_use", id: ids[i], name: call.name, input: {} })
    // The API opens every tool input with an empty fragment.
    event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: "" } })
    for (const partial_json of pieces(call.arguments)) {
      event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json } }, true)
    }
    event("content_block_stop", { index })
    index++
  })
  event("message_delta", {
    delta: { stop_reason: anthropicStop[reply.stop], stop_sequence: null },
    usage: {
      input_tokens: usage.input_tokens,
      cache_creation_input_tokens: usage.cache_creation_input_tokens,
      cache_read_input_tokens: usage.cache_read_input_tokens,
      output_tokens: usage.output_tokens
    }
  })
  event("message_stop", {})
  return frames
}
