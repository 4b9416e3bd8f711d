/**
 * A client speaking the wire of camelRun's TypeScript client, written from
 * what that client documents and sends (docs/moving-from-camelrun.md): its
 * JSON transport (headers, retries, an error's `code` read from `code` or a
 * `CODE:` prefix, every 2xx a JSON body), its agent ids checked as it checks
 * them, its request envelope `{id, method, params}`, and its event stream read
 * as it reads it (frames split on a blank line, `event: ready` and
 * `event: closed` only with data, `mcp` frames without ids, a reconnect from
 * the cursor it kept, 401/403/410 final, 404 tried again). The compatibility
 * suite drives the service through it, so a change that breaks a camelRun
 * application fails there. Promise-based, as the client it stands for.
 */
import * as Crypto from "node:crypto"

/** The largest frame (and request body) the camelRun client takes, in UTF-8 bytes. */
export const frameBytes = 1_100_000

/** What the camelRun client requires of an agent id and a volume id. */
export const agentIdPattern = /^client_[a-f0-9]{40}$/
export const volumeIdPattern = /^vol_[a-f0-9]{24}$/

/** A refused call: the status, the body's `error`, and its code as the client reads it. */
export class WireError extends Error {
  readonly status: number
  readonly code: string | undefined
  readonly body: unknown
  constructor(status: number, message: string, code: string | undefined, body: unknown) {
    super(message)
    this.status = status
    this.code = code
    this.body = body
  }
}

const codeOf = (body: any): string | undefined =>
  typeof body?.code === "string" ? body.code : /^([A-Z][A-Z0-9_]+):/.exec(String(body?.error ?? ""))?.[1]

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Every call the transport made, for tests that check what went over the wire. */
export interface Sent {
  readonly method: string
  readonly path: string
  readonly status: number
}

export interface Transport {
  readonly base: string
  readonly fetch: typeof globalThis.fetch
  readonly sent: Array<Sent>
  /**
   * A JSON call: bearer and JSON content type on every call, no redirects followed, a 2xx read as JSON (a
   * 204 or an empty body fails, as in the client), 5xx and network failures tried again up to 4 times when
   * `retry`, 429 up to 8 times always.
   */
  readonly json: (
    path: string,
    token: string,
    options?: {
      readonly method?: string
      readonly body?: unknown
      readonly headers?: Record<string, string>
      readonly retry?: boolean
    }
  ) => Promise<any>
  /** A bytes call (files): the response as it came, a non-2xx thrown as a WireError. */
  readonly raw: (
    path: string,
    token: string | undefined,
    options?: { readonly method?: string; readonly body?: Uint8Array; readonly headers?: Record<string, string> }
  ) => Promise<Response>
}

/** `fetchImpl` may send each call to another node, as a load balancer in front of a cluster would. */
export const transport = (base: string, fetchImpl: typeof globalThis.fetch = globalThis.fetch): Transport => {
  const sent: Array<Sent> = []
  const json: Transport["json"] = async (path, token, options = {}) => {
    const method = options.method ?? "GET"
    for (let attempt = 0;; attempt++) {
      try {
        const response = await fetchImpl(base + path, {
          method,
          headers: {
            authorization: `Bearer ${token}`,
            "content-type": "application/json",
            ...options.headers
          },
          ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
          redirect: "manual",
          signal: AbortSignal.timeout(10_000)
        })
        sent.push({ method, path, status: response.status })
        if (response.status >= 300 && response.status < 400) {
          throw new WireError(response.status, "Runtime redirects are not allowed", undefined, undefined)
        }
        if (response.ok) return await response.json()
        const body: any = await response.json().catch(() => ({}))
        throw new WireError(response.status, body.error ?? `HTTP ${response.status}`, codeOf(body), body)
      } catch (error) {
        const status = error instanceof WireError ? error.status : 0
        const limited = status === 429
        if (limited ? attempt >= 7 : options.retry === false || attempt >= 3 || (status > 0 && status < 500)) {
          throw error
        }
        await sleep(Math.min(10_000, (limited ? 500 : 100) * 2 ** attempt))
      }
    }
  }
  const raw: Transport["raw"] = async (path, token, options = {}) => {
    const method = options.method ?? "GET"
    const response = await fetchImpl(base + path, {
      method,
      headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...options.headers },
      ...(options.body === undefined ? {} : { body: options.body }),
      redirect: "manual"
    })
    sent.push({ method, path, status: response.status })
    if (!response.ok) {
      const body: any = await response.json().catch(() => ({}))
      throw new WireError(response.status, body.error ?? `HTTP ${response.status}`, codeOf(body), body)
    }
    return response
  }
  return { base, fetch: fetchImpl, sent, json, raw }
}

/** The camelRun client's hash of its tools: lowercase hex SHA-256 of their JSON as it serialises them. */
export const toolsHash = (tools: ReadonlyArray<unknown>) =>
  Crypto.createHash("sha256").update(JSON.stringify(tools)).digest("hex")

/** An MCP tool as the camelRun client lists it. */
export interface McpTool {
  readonly name: string
  readonly description: string
  readonly inputSchema: Record<string, unknown>
  readonly _meta?: Record<string, unknown>
}

export interface Credentials {
  readonly id: string
  readonly token: string
  readonly expiresAt: number | null
}

export interface ConnectOptions {
  /** Serve the tools (the application's connection); otherwise follow with `watch=1`. */
  readonly attach: boolean
  readonly takeover?: boolean
  readonly tools?: ReadonlyArray<McpTool>
  /** A tools/call's result (a CallToolResult), or a throw for a JSON-RPC error. */
  readonly call?: (name: string, args: Record<string, unknown>, params: any) => Promise<unknown>
  /** Declare the tools with a configure when the ready frame's hash differs (default true). */
  readonly syncTools?: boolean
  /** How often a waited-on request is polled besides the stream (the client's default: 30 s). */
  readonly pollMs?: number
}

export interface Frame {
  readonly id: number | undefined
  readonly event: string | undefined
  readonly data: any
}

export interface Connection {
  readonly credentials: Credentials
  /** Every frame with data it read, in order (ready, closed, mcp, and the agent's frames). */
  readonly frames: Array<Frame>
  /** The agent's events and responses it handled, each once, in cursor order. */
  readonly events: Array<{ readonly id: number; readonly data: any }>
  /** tools/call messages it was sent. */
  readonly calls: Array<any>
  /** Configure requests the tool sync sent. */
  readonly syncs: Array<string>
  /** Streams opened (the first one included), and why each ended. */
  readonly streams: Array<{ readonly status: number; ended?: string }>
  /** Errors it reported (as the client's onError would): replaced, refused, stalled... */
  readonly errors: Array<WireError | Error>
  readonly cursor: () => number
  readonly connection: () => string | undefined
  readonly attached: () => boolean
  /** Resolves at the first ready (and its state read); rejects when the first connect is refused for good. */
  readonly ready: Promise<void>
  /** Sends `{id, method, params}`; resolves with the request's record. */
  readonly send: (method: string, params: Record<string, unknown>, id?: string) => Promise<any>
  /** A request's outcome, from the first of: its record, a response frame, the state at a ready, the poll. */
  readonly outcome: (id: string) => Promise<any>
  /** `send`, then the outcome's result; an outcome with `error` rejects. */
  readonly request: (method: string, params: Record<string, unknown>, id?: string) => Promise<any>
  /** Tells the runtime it drains, waits for its calls in flight (up to `drainMs`), then closes. */
  readonly close: (drainMs?: number) => Promise<void>
}

/**
 * Opens the agent's stream as the camelRun client does and keeps it open, reconnecting from its cursor,
 * until `close`.
 */
export const connect = (wire: Transport, credentials: Credentials, options: ConnectOptions): Connection => {
  if (!agentIdPattern.test(credentials.id)) throw new Error("Invalid session id")
  const base = `/clients/${credentials.id}`
  const tools = options.tools ?? []
  const frames: Array<Frame> = []
  const events: Array<{ id: number; data: any }> = []
  const calls: Array<any> = []
  const syncs: Array<string> = []
  const streams: Array<{ status: number; ended?: string }> = []
  const errors: Array<WireError | Error> = []
  const waiters = new Map<string, { promise: Promise<any>; settle: (outcome: any) => void }>()
  const active = new Map<string, AbortController>()
  let cursor = 0
  let connection: string | undefined
  let attaching = options.attach
  let closed = false
  let firstConnect = true
  let stream: AbortController | undefined
  let readyResolve!: () => void
  let readyReject!: (error: unknown) => void
  const ready = new Promise<void>((resolve, reject) => {
    readyResolve = resolve
    readyReject = reject
  })
  ready.catch(() => {})

  const waiter = (id: string) => {
    let entry = waiters.get(id)
    if (entry === undefined) {
      let settle!: (outcome: any) => void
      const promise = new Promise<any>((resolve) => (settle = resolve))
      entry = { promise, settle }
      waiters.set(id, entry)
    }
    return entry
  }
  const settle = (id: string, outcome: unknown) => {
    if (outcome !== undefined && outcome !== null) waiter(id).settle(outcome)
  }

  const postMcp = (message: unknown, retry = true) =>
    wire.json(`${base}/mcp`, credentials.token, {
      method: "POST",
      body: message,
      headers: { "x-agent-connection": connection ?? "" },
      retry
    })

  const answer = async (message: any) => {
    const reply = (body: Record<string, unknown>) => postMcp({ jsonrpc: "2.0", id: message.id, ...body })
    switch (message.method) {
      case "initialize":
        return reply({
          result: {
            protocolVersion: typeof message.params?.protocolVersion === "string"
              ? message.params.protocolVersion
              : "2025-06-18",
            capabilities: { tools: {} },
            serverInfo: { name: "agent-runtime-sdk", version: "1.0.0" }
          }
        })
      case "ping":
        return reply({ result: {} })
      case "tools/list":
        return reply({ result: { tools } })
      case "tools/call": {
        calls.push(message)
        const controller = new AbortController()
        active.set(String(message.id), controller)
        try {
          const result = await options.call!(message.params.name, message.params.arguments ?? {}, message.params)
          return await reply({ result })
        } catch (error) {
          return await reply({ error: { code: -32603, message: String(error).slice(0, 2048) } })
        } finally {
          active.delete(String(message.id))
        }
      }
      default:
        return reply({ error: { code: -32601, message: `Unknown method ${message.method}` } })
    }
  }

  const onMcp = (message: any) => {
    if (typeof message?.method !== "string") return
    if (message.id === undefined) {
      if (message.method === "notifications/cancelled") active.get(String(message.params?.requestId))?.abort()
      return
    }
    answer(message).catch((error) => errors.push(error))
  }

  const readState = async () => {
    const state = await wire.json(`${base}/state`, credentials.token)
    for (const request of state.requests) settle(request.id, request.outcome)
    return state
  }

  const syncTools = async (hash: string) => {
    if (toolsHash(tools) === hash) return
    const id = Crypto.randomUUID()
    syncs.push(id)
    await send("configure", { mcp: { tools } }, id)
    await outcome(id)
  }

  const handle = async (block: string) => {
    const lines = block.split("\n")
    const data = lines.filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trimStart()).join("\n")
    if (data === "") return
    const idLine = lines.find((line) => line.startsWith("id:"))
    const event = lines.find((line) => line.startsWith("event:"))?.slice(6).trim()
    const parsed = JSON.parse(data)
    const id = idLine === undefined ? undefined : Number(idLine.slice(3))
    frames.push({ id, event, data: parsed })
    if (lines.includes("event: closed")) {
      attaching = false
      throw new WireError(409, "Another process took over this agent's tools", "APPLICATION_REPLACED", parsed)
    }
    if (lines.includes("event: ready")) {
      connection = parsed.connection ?? undefined
      if (attaching && typeof parsed.toolsHash === "string" && parsed.toolsHash !== "" && options.syncTools !== false) {
        syncTools(parsed.toolsHash).catch((error) => errors.push(error))
      }
      await readState()
      firstConnect = false
      readyResolve()
      return
    }
    if (id === undefined) {
      if (parsed.type === "mcp") onMcp(parsed.message)
      return
    }
    if (!Number.isSafeInteger(id) || id <= 0) throw new Error("Invalid SSE cursor")
    if (parsed.type === "snapshot") {
      cursor = id
      return
    }
    if (id <= cursor) return
    cursor = id
    events.push({ id, data: parsed })
    if (parsed.type === "response") settle(parsed.id, parsed.outcome)
  }

  const openOnce = async (): Promise<"again" | "now" | "stop"> => {
    const controller = new AbortController()
    stream = controller
    const mode = !attaching ? "&watch=1" : options.takeover === true && connection === undefined ? "&takeover=true" : ""
    const response = await wire.fetch(`${wire.base}${base}/events?snapshot=1${mode}`, {
      headers: {
        authorization: `Bearer ${credentials.token}`,
        accept: "text/event-stream",
        "last-event-id": String(cursor),
        ...(attaching && connection !== undefined ? { "x-agent-connection": connection } : {})
      },
      redirect: "manual",
      signal: controller.signal
    })
    const record: { status: number; ended?: string } = { status: response.status }
    streams.push(record)
    if (response.status === 409) {
      const body: any = await response.json().catch(() => ({}))
      if (codeOf(body) === "APPLICATION_CONNECTED") {
        const error = new WireError(409, body.error ?? "APPLICATION_CONNECTED", "APPLICATION_CONNECTED", body)
        if (firstConnect) throw error
        errors.push(error)
        attaching = false
        return "again"
      }
      const state = await readState()
      cursor = state.cursor
      return "now"
    }
    if (!response.ok) {
      const body: any = await response.json().catch(() => ({}))
      const error = new WireError(response.status, `Event stream HTTP ${response.status}`, codeOf(body), body)
      if ([401, 403, 410].includes(response.status) || (response.status >= 300 && response.status < 400)) {
        throw error
      }
      errors.push(error)
      return "again"
    }
    if (!response.headers.get("content-type")?.startsWith("text/event-stream")) {
      errors.push(new Error("Expected an SSE response"))
      return "again"
    }
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader()
    let buffer = ""
    let watchdog: ReturnType<typeof setTimeout> | undefined
    const touch = () => {
      clearTimeout(watchdog)
      watchdog = setTimeout(() => {
        record.ended = "stalled"
        controller.abort()
      }, 20_000)
    }
    touch()
    try {
      for (;;) {
        const chunk = await reader.read()
        if (chunk.done) break
        touch()
        buffer += chunk.value
        let end: number
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          if (Buffer.byteLength(block) > frameBytes) throw new Error("SSE frame too large")
          await handle(block)
        }
        if (Buffer.byteLength(buffer) > frameBytes) throw new Error("SSE frame too large")
      }
      record.ended ??= "ended"
    } catch (error) {
      record.ended ??= String(error)
      if (error instanceof WireError && error.code === "APPLICATION_REPLACED") errors.push(error)
      else if (!closed) errors.push(error as Error)
    } finally {
      clearTimeout(watchdog)
    }
    return "again"
  }

  const loop = async () => {
    let backoff = 250
    while (!closed) {
      let next: "again" | "now" | "stop"
      try {
        next = await openOnce()
      } catch (error) {
        if (closed) return
        errors.push(error as Error)
        if (error instanceof WireError && error.status !== 0) {
          readyReject(error)
          closed = true
          return
        }
        next = "again"
      }
      if (next === "now") continue
      if (closed) return
      await sleep(backoff)
      backoff = Math.min(5000, backoff * 2)
    }
  }
  loop()

  const send = async (method: string, params: Record<string, unknown>, id: string = Crypto.randomUUID()) => {
    const record = await wire.json(`${base}/requests`, credentials.token, {
      method: "POST",
      body: { id, method, params }
    })
    settle(id, record.outcome)
    return record
  }

  const outcome = (id: string) => {
    const entry = waiter(id)
    const poll = setInterval(() => {
      wire.json(`${base}/requests/${encodeURIComponent(id)}`, credentials.token).then(
        (record) => settle(id, record.outcome),
        () => {}
      )
    }, options.pollMs ?? 30_000)
    return entry.promise.finally(() => clearInterval(poll))
  }

  const request = async (method: string, params: Record<string, unknown>, id: string = Crypto.randomUUID()) => {
    await send(method, params, id)
    const settled = await outcome(id)
    if ("error" in settled) {
      throw new WireError(0, settled.error ?? "Unknown failure", settled.code, settled)
    }
    return settled.result
  }

  const close = async (drainMs = 25_000) => {
    if (attaching && connection !== undefined && drainMs > 0 && active.size > 0) {
      await postMcp({ jsonrpc: "2.0", method: "notifications/agent-runtime/draining" }, false).catch(() => {})
      const until = Date.now() + drainMs
      while (active.size > 0 && Date.now() < until) await sleep(25)
    }
    closed = true
    stream?.abort()
    for (const controller of active.values()) controller.abort()
  }

  return {
    credentials,
    frames,
    events,
    calls,
    syncs,
    streams,
    errors,
    cursor: () => cursor,
    connection: () => connection,
    attached: () => attaching,
    ready,
    send,
    outcome,
    request,
    close
  }
}
