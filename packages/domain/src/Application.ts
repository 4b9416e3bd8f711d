/**
 * The application connection's wire: the JSON-RPC 2.0 messages an
 * application posts to `POST /clients/{id}/mcp`, and what the runtime
 * answers. The session itself is described in docs/application-tools.md.
 */
import { Schema } from "effect"
import * as Crypto from "node:crypto"

/** The header naming the connection a message belongs to (the `connection` of its ready frame). */
export const connectionHeader = "agent-runtime-connection"

/** The same header under the name the camelRun client sends; either is taken. */
export const connectionHeaderAlias = "x-agent-connection"

/** The headers of `POST /clients/{id}/mcp`: the connection, under either name (one is required). */
export const ConnectionHeaders = Schema.Struct({
  [connectionHeader]: Schema.optional(Schema.String),
  [connectionHeaderAlias]: Schema.optional(Schema.String.annotations({ description: "the same, as camelRun names it" }))
}).pipe(
  Schema.filter((headers) =>
    headers[connectionHeader] !== undefined || headers[connectionHeaderAlias] !== undefined
      ? headers[connectionHeader] === undefined || headers[connectionHeaderAlias] === undefined ||
        headers[connectionHeader] === headers[connectionHeaderAlias] ||
        { path: [connectionHeaderAlias], message: `names another connection than ${connectionHeader}` }
      : { path: [connectionHeader], message: `is required (or ${connectionHeaderAlias})` }
  )
)

/** The connection the headers name. */
export const connectionOf = (headers: typeof ConnectionHeaders.Type): string =>
  headers[connectionHeader] ?? headers[connectionHeaderAlias]!

const JsonRpcId = Schema.Union(Schema.String, Schema.Number)

const Params = Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))

export const JsonRpcRequest = Schema.Struct({
  jsonrpc: Schema.Literal("2.0"),
  id: JsonRpcId,
  method: Schema.String,
  params: Params
}).annotations({ identifier: "JsonRpcRequest" })

export const JsonRpcNotification = Schema.Struct({
  jsonrpc: Schema.Literal("2.0"),
  method: Schema.String,
  params: Params
}).annotations({ identifier: "JsonRpcNotification" })

export const JsonRpcResult = Schema.Struct({
  jsonrpc: Schema.Literal("2.0"),
  id: JsonRpcId,
  result: Schema.Unknown
}).annotations({ identifier: "JsonRpcResult" })

export const JsonRpcError = Schema.Struct({
  jsonrpc: Schema.Literal("2.0"),
  id: Schema.NullOr(JsonRpcId),
  error: Schema.Struct({ code: Schema.Number, message: Schema.String, data: Schema.optional(Schema.Unknown) })
}).annotations({ identifier: "JsonRpcError" })

/** One message from the application: a response to the runtime's request, a notification, or a request (ping). */
// The error first: a result's `result` may be anything, so an error message would pass for a result without it.
export const JsonRpcMessage = Schema.Union(JsonRpcError, JsonRpcResult, JsonRpcRequest, JsonRpcNotification)
  .annotations({ identifier: "JsonRpcMessage", description: "one JSON-RPC 2.0 message" })
export type JsonRpcMessage = typeof JsonRpcMessage.Type

export class McpAccepted extends Schema.Class<McpAccepted>("McpAccepted")({
  accepted: Schema.Literal(true)
}) {}

/**
 * The hash of a tools/list answer's `tools`, as the ready frame's `toolsHash` names it: the lowercase hex
 * SHA-256 of their JSON as `JSON.stringify` writes it (keys in the order sent). It is the camelRun client's
 * form, which decides whether to declare its tools again from it; a JSON parse and stringify keeps the
 * order, so the runtime computes from what it was sent what the sender computed before sending it.
 */
export const toolsHash = (tools: ReadonlyArray<unknown>): string =>
  Crypto.createHash("sha256").update(JSON.stringify(tools)).digest("hex")
