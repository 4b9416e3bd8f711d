/**
 * A real MCP server for tool source tests: the official SDK's `Server` over
 * its `StreamableHTTPServerTransport` with stateful sessions, on a loopback
 * port. (The SDK's `McpServer` wrapper needs zod schemas, and this package
 * does not depend on zod; the tools here are plain JSON Schema.)
 *
 * Tools: `add({a, b})`, `echo({text})`, `slow({ms, progressEveryMs?})`
 * (progress every `progressEveryMs`, default 200, 0 for none; deadline 1 s in
 * its `_meta`) and `fail()` (an `isError` result); more can be added and
 * removed while it runs, each change announced with
 * `notifications/tools/list_changed`.
 *
 * It records every JSON-RPC message it receives (a call sent twice shows),
 * with the verified identity claims under `runtime` auth, and the request
 * ids of `notifications/cancelled`. Under `runtime` auth the bearer token
 * must be an identity token valid against the runtime's JWKS (audience: this
 * server's URL) and equal the `x-agent-runtime-identity` header; the check
 * uses node:crypto, as this package does not depend on jose.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type Tool as ToolDefinition
} from "@modelcontextprotocol/sdk/types.js"
import { Effect, type Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { text as readText } from "node:stream/consumers"
import { setTimeout as sleep } from "node:timers/promises"

export type Auth =
  | "none"
  | { readonly bearer: string }
  | { readonly runtime: { readonly jwksUrl: string; readonly issuer?: string } }

export interface Options {
  readonly auth?: Auth
}

export interface RunContext {
  readonly signal: AbortSignal
  /** Sends `notifications/progress` when the caller asked for progress. */
  readonly progress: (progress: number) => Promise<void>
  /** The request's `_meta` (the runtime's ids, and the answer to what the call asked before). */
  readonly meta: Record<string, unknown>
}

export interface Tool extends ToolDefinition {
  /** What a call answers; by default the arguments as JSON. */
  readonly run?: (args: Record<string, any>, context: RunContext) => Promise<CallToolResult>
}

/** One JSON-RPC message as received. */
export interface Received {
  readonly method: string
  readonly id?: string | number
  // Tests read fields of any message; the assertion is the schema.
  readonly params?: Record<string, any>
  readonly session?: string
  /** The verified identity token's claims, under `runtime` auth. */
  readonly claims?: Record<string, unknown>
}

export interface McpTestServer {
  /** The MCP endpoint. */
  readonly url: string
  readonly received: ReadonlyArray<Received>
  /** How many `tools/call` requests named `tool`. */
  readonly count: (tool: string) => number
  /** The request ids of `notifications/cancelled` received. */
  readonly cancelled: ReadonlyArray<string | number>
  /** Sessions open now. */
  readonly sessions: () => number
  /** Adds (or replaces) a tool and tells every session the list changed. */
  readonly addTool: (tool: Tool) => Effect.Effect<void>
  readonly removeTool: (name: string) => Effect.Effect<void>
  /** Answers every request with `status` until given `undefined`. */
  readonly failRequests: (status: number | undefined) => Effect.Effect<void>
  /** Cuts every open connection (calls in flight and event streams) without an answer. */
  readonly dropConnections: Effect.Effect<void>
  /** Ends every session on the server's side: requests naming one get 404. */
  readonly endSessions: Effect.Effect<void>
}

const text = (value: string, isError = false): CallToolResult => ({
  content: [{ type: "text", text: value }],
  ...(isError ? { isError } : {})
})

const numbers = (...names: ReadonlyArray<string>) => ({
  type: "object" as const,
  properties: Object.fromEntries(names.map((name) => [name, { type: "number" }])),
  required: [...names]
})

const builtins: ReadonlyArray<Tool> = [
  {
    name: "add",
    description: "Adds two numbers.",
    inputSchema: numbers("a", "b"),
    annotations: { readOnlyHint: true },
    run: async ({ a, b }) => text(String(a + b))
  },
  {
    name: "echo",
    description: "Answers the text it is given.",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    _meta: { "agent-runtime/executionMode": "sequential" },
    run: async (args) => text(args.text)
  },
  {
    name: "slow",
    description: "Waits, reporting progress.",
    inputSchema: {
      type: "object",
      properties: { ms: { type: "number" }, progressEveryMs: { type: "number" } },
      required: ["ms"]
    },
    _meta: { "agent-runtime/deadlineMs": 1000 },
    run: async ({ ms, progressEveryMs = 200 }, { progress, signal }) => {
      const started = Date.now()
      let reported = 0
      const timer = progressEveryMs > 0
        ? setInterval(() => void progress(++reported).catch(() => {}), progressEveryMs)
        : undefined
      try {
        await sleep(ms, undefined, { signal })
      } catch {
        // cancelled
      } finally {
        clearInterval(timer)
      }
      return text(`slept ${Date.now() - started} ms`)
    }
  },
  {
    name: "fail",
    description: "Always fails.",
    inputSchema: { type: "object", properties: {} },
    annotations: { destructiveHint: true },
    run: async () => text("it failed, as it always does", true)
  }
]

const reply = (response: Http.ServerResponse, status: number, body: string) => {
  response.writeHead(status, { "content-type": "text/plain" })
  response.end(body)
}

const decodePart = (part: string) => JSON.parse(Buffer.from(part, "base64url").toString("utf8"))

/** The claims of an EdDSA JWT valid against the key set at `jwksUrl` for `audience`, or why not. */
const verifyToken = async (
  token: string,
  options: { readonly jwksUrl: string; readonly issuer?: string },
  audience: string
): Promise<Record<string, any> | string> => {
  const [header, payload, signature] = token.split(".")
  if (signature === undefined) return "not a JWT"
  const { alg, kid } = decodePart(header!)
  if (alg !== "EdDSA") return `unexpected alg ${alg}`
  const { keys } = await (await fetch(options.jwksUrl)).json() as { keys: Array<Crypto.JsonWebKey> }
  const jwk = keys.find((key) => key.kid === kid)
  if (jwk === undefined) return `no key ${kid}`
  const key = Crypto.createPublicKey({ key: jwk, format: "jwk" })
  if (!Crypto.verify(null, Buffer.from(`${header}.${payload}`), key, Buffer.from(signature, "base64url"))) {
    return "bad signature"
  }
  const claims = decodePart(payload!)
  if (claims.aud !== audience) return `audience ${claims.aud} is not ${audience}`
  if (options.issuer !== undefined && claims.iss !== options.issuer) return `issuer ${claims.iss}`
  if (typeof claims.exp !== "number" || claims.exp <= Date.now() / 1000) return "expired"
  return claims
}

export const start = (options: Options = {}): Effect.Effect<McpTestServer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const auth = options.auth ?? "none"
    const tools = new Map(builtins.map((tool) => [tool.name, tool]))
    const transports = new Map<string, StreamableHTTPServerTransport>()
    const servers = new Set<Server>()
    const received: Array<Received> = []
    const cancelled: Array<string | number> = []
    let failing: number | undefined
    let url = ""

    const makeServer = () => {
      const server = new Server({ name: "mcp-test-server", version: "1.0.0" }, {
        capabilities: { tools: { listChanged: true } }
      })
      server.setRequestHandler(ListToolsRequestSchema, async () => ({
        tools: [...tools.values()].map(({ run: _run, ...tool }) => tool)
      }))
      server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
        const tool = tools.get(request.params.name)
        if (tool === undefined) throw new McpError(ErrorCode.InvalidParams, `no tool ${request.params.name}`)
        const args = request.params.arguments ?? {}
        if (tool.run === undefined) return text(JSON.stringify(args))
        const token = request.params._meta?.progressToken
        return tool.run(args, {
          signal: extra.signal,
          meta: request.params._meta ?? {},
          progress: (progress) =>
            token === undefined
              ? Promise.resolve()
              : extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress } })
        })
      })
      return server
    }

    /** The verified claims (runtime), `{}` when no token is needed, or why the request is refused. */
    const authorize = async (request: Http.IncomingMessage): Promise<Record<string, any> | string> => {
      if (auth === "none") return {}
      const authorization = request.headers.authorization
      if ("bearer" in auth) return authorization === `Bearer ${auth.bearer}` ? {} : "wrong bearer token"
      const token = authorization?.startsWith("Bearer ") ? authorization.slice("Bearer ".length) : undefined
      if (token === undefined || request.headers["x-agent-runtime-identity"] !== token) {
        return "the identity token is missing, or the two headers differ"
      }
      return verifyToken(token, auth.runtime, url)
    }

    const handle = async (request: Http.IncomingMessage, response: Http.ServerResponse) => {
      const body = request.method === "POST" ? await readText(request) : ""
      if (new URL(request.url ?? "/", "http://localhost").pathname !== "/mcp") return reply(response, 404, "not found")
      if (failing !== undefined) return reply(response, failing, "failing on purpose")
      const claims = await authorize(request)
      if (typeof claims === "string") return reply(response, 401, claims)
      const parsed = body === "" ? undefined : JSON.parse(body)
      const session = request.headers["mcp-session-id"] as string | undefined
      for (const message of Array.isArray(parsed) ? parsed : parsed === undefined ? [] : [parsed]) {
        received.push({
          method: message.method,
          ...(message.id === undefined ? {} : { id: message.id }),
          ...(message.params === undefined ? {} : { params: message.params }),
          ...(session === undefined ? {} : { session }),
          ...(auth !== "none" && "runtime" in auth ? { claims } : {})
        })
        if (message.method === "notifications/cancelled") cancelled.push(message.params.requestId)
      }
      if (session !== undefined) {
        const transport = transports.get(session)
        if (transport === undefined) {
          response.writeHead(404, { "content-type": "application/json" })
          return response.end(JSON.stringify({
            jsonrpc: "2.0",
            error: { code: -32001, message: "Session not found" },
            id: null
          }))
        }
        return transport.handleRequest(request, response, parsed)
      }
      if (parsed?.method !== "initialize") return reply(response, 400, "no session")
      const server = makeServer()
      const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => Crypto.randomUUID(),
        onsessioninitialized: (id) => {
          transports.set(id, transport)
        }
      })
      transport.onclose = () => {
        if (transport.sessionId !== undefined) transports.delete(transport.sessionId)
        servers.delete(server)
      }
      servers.add(server)
      await server.connect(transport)
      return transport.handleRequest(request, response, parsed)
    }

    const http = Http.createServer((request, response) => {
      handle(request, response).catch((error: unknown) => {
        if (!response.headersSent) reply(response, 500, String(error))
        else response.destroy()
      })
    })

    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        http.listen(0, "127.0.0.1", () => {
          url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`
          resume(Effect.void)
        })
      }),
      () =>
        Effect.promise(async () => {
          await Promise.all([...transports.values()].map((transport) => transport.close()))
          http.closeAllConnections()
          await new Promise((resolve) => http.close(resolve))
        })
    )

    const announce = Effect.asVoid(
      Effect.promise(() => Promise.all([...servers].map((server) => server.sendToolListChanged().catch(() => {}))))
    )

    return {
      url,
      received,
      count: (tool) =>
        received.filter((message) => message.method === "tools/call" && message.params?.name === tool).length,
      cancelled,
      sessions: () => transports.size,
      addTool: (tool) => Effect.zipRight(Effect.sync(() => tools.set(tool.name, tool)), announce),
      removeTool: (name) => Effect.zipRight(Effect.sync(() => tools.delete(name)), announce),
      failRequests: (status) =>
        Effect.sync(() => {
          failing = status
        }),
      dropConnections: Effect.sync(() => http.closeAllConnections()),
      endSessions: Effect.asVoid(
        Effect.promise(() => Promise.all([...transports.values()].map((transport) => transport.close())))
      )
    }
  })
