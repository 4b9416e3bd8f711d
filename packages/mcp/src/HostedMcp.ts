/**
 * The account's own MCP server (`/mcp`): a coding agent acts as the account
 * through tools that are the REST API's own operations. Each tool is one
 * operation of the API's OpenAPI document (itself made from the schemas the
 * API decodes with): its input holds the operation's path, query and header
 * parameters by name and its JSON body as `body`; a call is that request,
 * made to the node's REST API with the caller's own token, so it is
 * authorized, validated and answered exactly as the REST call is. The answer
 * is the tool's structured result (a list as `{data}`); an error answer is
 * `isError` with the API's `{error, code}`.
 *
 * Streamable HTTP without sessions: each POST carries its JSON-RPC messages
 * and is answered with JSON, and the server keeps nothing between requests,
 * so any node answers any request behind a load balancer.
 */
import { Api } from "@agent-runtime/domain"
import { OpenApi } from "@effect/platform"
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js"
import {
  CallToolRequestSchema,
  type CallToolResult,
  ListToolsRequestSchema,
  type Tool
} from "@modelcontextprotocol/sdk/types.js"
import { Context, Effect, Layer } from "effect"

/** The operations offered as tools, by operationId: what an account does, not what only an operator does. */
export const operations: ReadonlyArray<string> = [
  "me.get",
  "models.list",
  ...["list", "get", "put", "delete"].map((name) => `providers.${name}`),
  "keys.put",
  "keys.delete",
  "keyScopes.list",
  "keyScopes.get",
  ...[
    "create",
    "upsert",
    "list",
    "get",
    "delete",
    "prompt",
    "fork",
    "continue",
    "abort",
    "configure",
    "request",
    "state",
    "history",
    "events"
  ].map((name) => `agents.${name}`),
  ...["create", "list", "get", "messages", "events", "abort", "delete"].map((name) => `runs.${name}`),
  ...["list", "answer", "inbox", "answerAll"].map((name) => `inputs.${name}`),
  ...["create", "list", "get", "update", "remove"].map((name) => `definitions.${name}`),
  ...["create", "listForAgent", "cancel", "list"].map((name) => `schedules.${name}`),
  ...["create", "list", "get", "remove", "fork", "snapshot", "snapshots", "changes", "files"].map((name) =>
    `volumes.${name}`
  ),
  ...["create", "list", "get", "update", "remove", "deliveries", "attempts", "resend"].map((name) =>
    `webhooks.${name}`
  ),
  "billing.usage",
  "billing.get",
  "billing.ledger"
]

/** Event reads answer a page of events (the poll form): a tool answers once, it does not stream. */
const polled = new Set(["agents.events", "runs.events"])

interface Parameter {
  readonly name: string
  readonly in: "path" | "query" | "header"
}

/** One tool, and the request it makes. */
export interface Operation {
  readonly operationId: string
  readonly tool: Tool
  readonly method: string
  /** The path with `{name}` for each path parameter. */
  readonly path: string
  readonly parameters: ReadonlyArray<Parameter>
}

type Node = Record<string, any>

/** The component schemas `node` refers to, and those they refer to, named as `$defs` under the tool's input. */
const referenced = (node: unknown, components: Node, found: Record<string, unknown> = {}): Record<string, unknown> => {
  if (Array.isArray(node)) {
    for (const item of node) referenced(item, components, found)
  } else if (typeof node === "object" && node !== null) {
    for (const [key, value] of Object.entries(node)) {
      if (key === "$ref" && typeof value === "string" && value.startsWith("#/$defs/")) {
        const name = value.slice("#/$defs/".length)
        if (found[name] === undefined && components[name] !== undefined) {
          found[name] = components[name]
          referenced(components[name], components, found)
        }
      } else referenced(value, components, found)
    }
  }
  return found
}

/** The document's references to its components, as references to the tool input's own `$defs`. */
const localRefs = <A>(node: A): A => JSON.parse(JSON.stringify(node).replaceAll('"#/components/schemas/', '"#/$defs/'))

const toolName = (operationId: string) => operationId.replace(".", "_")

/** The tools, from the API's OpenAPI document. */
export const fromDocument = (document: Node): ReadonlyArray<Operation> => {
  const components: Node = localRefs(document.components?.schemas ?? {})
  const found: Array<Operation> = []
  for (const [path, item] of Object.entries<Node>(document.paths)) {
    for (const [method, operation] of Object.entries<Node>(item)) {
      if (!operations.includes(operation.operationId)) continue
      const parameters: Array<Parameter> = []
      const properties: Record<string, object> = {}
      const required: Array<string> = []
      for (const parameter of (operation.parameters ?? []) as Array<Node>) {
        // The poll form is fixed for event reads; the stream is for clients that hold a connection.
        if (polled.has(operation.operationId) && (parameter.name === "poll" || parameter.name === "snapshot")) {
          continue
        }
        parameters.push({ name: parameter.name, in: parameter.in })
        properties[parameter.name] = {
          ...localRefs(parameter.schema ?? {}),
          ...(parameter.description === undefined ? {} : { description: parameter.description })
        }
        if (parameter.required === true) required.push(parameter.name)
      }
      const body = operation.requestBody?.content?.["application/json"]?.schema
      if (body !== undefined) {
        properties.body = localRefs(body)
        if (operation.requestBody.required === true) required.push("body")
      }
      const input = { type: "object" as const, properties, required, additionalProperties: false }
      const defs = referenced(input, components)
      found.push({
        operationId: operation.operationId,
        method: method.toUpperCase(),
        path,
        parameters,
        tool: {
          name: toolName(operation.operationId),
          title: operation.summary,
          description: `${method.toUpperCase()} ${path}${
            operation.description === undefined ? "" : `: ${operation.description}`
          }`,
          inputSchema: Object.keys(defs).length === 0 ? input : { ...input, $defs: defs },
          annotations: {
            readOnlyHint: method === "get",
            destructiveHint: method === "delete",
            idempotentHint: method === "get" || method === "put" || method === "delete",
            openWorldHint: false
          }
        }
      })
    }
  }
  return found.sort((a, b) => a.tool.name.localeCompare(b.tool.name))
}

/** Calls the operation on the REST API at `rest` with the caller's token; the answer as a tool result. */
const call = async (
  rest: string,
  token: string,
  operation: Operation,
  args: Record<string, unknown>,
  signal: AbortSignal
): Promise<CallToolResult> => {
  const path = operation.path.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(String(args[name] ?? "")))
  const query = new URLSearchParams()
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: "application/json" }
  for (const parameter of operation.parameters) {
    const value = args[parameter.name]
    if (value === undefined || value === null || parameter.in === "path") continue
    if (parameter.in === "query") query.set(parameter.name, String(value))
    else headers[parameter.name] = String(value)
  }
  if (polled.has(operation.operationId)) query.set("poll", "1")
  const body = args.body === undefined ? undefined : JSON.stringify(args.body)
  if (body !== undefined) headers["content-type"] = "application/json"
  const search = query.size === 0 ? "" : `?${query}`
  const response = await fetch(`${rest}${path}${search}`, {
    method: operation.method,
    headers,
    ...(body === undefined ? {} : { body }),
    signal
  })
  const text = await response.text()
  let json: unknown = undefined
  try {
    json = text === "" ? {} : JSON.parse(text)
  } catch {
    // not JSON: answered as the text it is
  }
  const structured = json === undefined
    ? undefined
    : typeof json === "object" && json !== null && !Array.isArray(json)
    ? json as Record<string, unknown>
    : { data: json }
  return {
    content: [{ type: "text", text: text === "" ? `${response.status}` : text }],
    ...(structured === undefined ? {} : { structuredContent: structured }),
    ...(response.ok ? {} : { isError: true })
  }
}

export class HostedMcp extends Context.Tag("@agent-runtime/mcp/HostedMcp")<HostedMcp, {
  /** The tools offered, one per operation. */
  readonly operations: ReadonlyArray<Operation>
  /**
   * Answers one MCP request (a POST of JSON-RPC messages) for the caller whose bearer `token` it carries;
   * the REST API is reached at the `rest` root the layer was given.
   */
  readonly handle: (request: Request, token: string) => Effect.Effect<Response>
}>() {}

export const make = (options: {
  /** The REST API's root on this node (its own listener). */
  readonly rest: Effect.Effect<string>
}) =>
  Effect.sync(() => {
    const found = fromDocument(OpenApi.fromApi(Api.Api))
    const byName = new Map(found.map((operation) => [operation.tool.name, operation]))
    const handle = (request: Request, token: string) =>
      Effect.flatMap(options.rest, (rest) =>
        Effect.promise(async (signal) => {
          const server = new Server({ name: "agent-runtime", version: "1.0.0" }, {
            capabilities: { tools: {} },
            instructions: "Tools to act as this account on the agent runtime: each is one REST API operation " +
              "(see its description for the method and path). Prompt an agent with agents_prompt, then read " +
              "its outcome with agents_request (wait up to 25 s) and its events with agents_events."
          })
          server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: found.map((found) => found.tool) }))
          server.setRequestHandler(CallToolRequestSchema, async (call_, extra) => {
            const operation = byName.get(call_.params.name)
            if (operation === undefined) {
              return { content: [{ type: "text", text: `no tool ${call_.params.name}` }], isError: true }
            }
            return call(rest, token, operation, call_.params.arguments ?? {}, AbortSignal.any([signal, extra.signal]))
          })
          const transport = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: true })
          await server.connect(transport)
          try {
            return await transport.handleRequest(request)
          } finally {
            await server.close()
          }
        }))
    return HostedMcp.of({ operations: found, handle })
  })

export const layer = (options: { readonly rest: Effect.Effect<string> }): Layer.Layer<HostedMcp> =>
  Layer.effect(HostedMcp, make(options))
