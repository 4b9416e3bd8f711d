/**
 * What a fuzz run (see `Fuzz`) works on: the gateway's request shapes,
 * written here as JSON Schema since the gateway has no schema document; a
 * node's settings for the run; and two tenants with something of
 * everything, whose ids the generators fill in and whose secrets no answer
 * may hold.
 */
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import type * as FakeUpstream from "./FakeUpstream.ts"
import {
  type Fill,
  type Id,
  type JsonSchema,
  type Operation,
  type Parameter,
  restOperations,
  type Security,
  type Surface
} from "./Fuzz.ts"
import * as HttpClient from "./Http.ts"
import type * as TestNode from "./TestNode.ts"

// ---------------------------------------------------------------------------
// The gateway's request shapes

// The gateway has no schema document; these are its three protocols' request bodies as the official
// SDKs send them (the fields the gateway reads, and a few it passes through).
const text = { type: "string", maxLength: 200 }
const toolSchema = {
  type: "object",
  properties: { type: { const: "object" }, properties: { type: "object", additionalProperties: { type: "object" } } }
}
const gatewayComponents: Record<string, JsonSchema> = {
  ChatMessage: {
    anyOf: [
      {
        type: "object",
        required: ["role", "content"],
        properties: {
          role: { enum: ["system", "developer", "user", "assistant"] },
          content: {
            anyOf: [text, {
              type: "array",
              maxItems: 3,
              items: {
                anyOf: [
                  { type: "object", required: ["type", "text"], properties: { type: { const: "text" }, text } },
                  {
                    type: "object",
                    required: ["type", "image_url"],
                    properties: {
                      type: { const: "image_url" },
                      image_url: { type: "object", required: ["url"], properties: { url: { type: "string" } } }
                    }
                  }
                ]
              }
            }]
          },
          name: { type: "string" }
        }
      },
      {
        type: "object",
        required: ["role", "tool_calls"],
        properties: {
          role: { const: "assistant" },
          content: { type: "null" },
          tool_calls: {
            type: "array",
            minItems: 1,
            maxItems: 2,
            items: {
              type: "object",
              required: ["id", "type", "function"],
              properties: {
                id: { type: "string" },
                type: { const: "function" },
                function: {
                  type: "object",
                  required: ["name", "arguments"],
                  properties: { name: { type: "string" }, arguments: { type: "string" } }
                }
              }
            }
          }
        }
      },
      {
        type: "object",
        required: ["role", "tool_call_id", "content"],
        properties: { role: { const: "tool" }, tool_call_id: { type: "string" }, content: text }
      }
    ]
  },
  ResponsesItem: {
    anyOf: [
      {
        type: "object",
        required: ["role", "content"],
        properties: {
          role: { enum: ["user", "assistant", "system", "developer"] },
          content: {
            anyOf: [text, {
              type: "array",
              maxItems: 3,
              items: {
                type: "object",
                required: ["type", "text"],
                properties: { type: { enum: ["input_text", "output_text"] }, text }
              }
            }]
          }
        }
      },
      {
        type: "object",
        required: ["type", "call_id", "name", "arguments"],
        properties: {
          type: { const: "function_call" },
          call_id: { type: "string" },
          name: { type: "string" },
          arguments: { type: "string" }
        }
      },
      {
        type: "object",
        required: ["type", "call_id", "output"],
        properties: { type: { const: "function_call_output" }, call_id: { type: "string" }, output: text }
      }
    ]
  },
  AnthropicMessage: {
    type: "object",
    required: ["role", "content"],
    properties: {
      role: { enum: ["user", "assistant"] },
      content: {
        anyOf: [text, {
          type: "array",
          minItems: 1,
          maxItems: 3,
          items: {
            anyOf: [
              { type: "object", required: ["type", "text"], properties: { type: { const: "text" }, text } },
              {
                type: "object",
                required: ["type", "id", "name", "input"],
                properties: {
                  type: { const: "tool_use" },
                  id: { type: "string" },
                  name: { type: "string" },
                  input: { type: "object" }
                }
              },
              {
                type: "object",
                required: ["type", "tool_use_id", "content"],
                properties: { type: { const: "tool_result" }, tool_use_id: { type: "string" }, content: text }
              },
              {
                type: "object",
                required: ["type", "thinking", "signature"],
                properties: { type: { const: "thinking" }, thinking: text, signature: { type: "string" } }
              },
              {
                type: "object",
                required: ["type", "source"],
                properties: {
                  type: { const: "image" },
                  source: {
                    type: "object",
                    required: ["type", "media_type", "data"],
                    properties: {
                      type: { const: "base64" },
                      media_type: { enum: ["image/png", "image/jpeg"] },
                      data: { type: "string" }
                    }
                  }
                }
              }
            ]
          }
        }]
      }
    }
  }
}

const modelField = { type: "string", minLength: 1 }
const keyScopeHeader: Parameter = {
  name: "x-agent-runtime-key-scope",
  in: "header",
  required: false,
  schema: { type: "string" }
}
const anthropicVersion: Parameter = {
  name: "anthropic-version",
  in: "header",
  required: true,
  schema: { enum: ["2023-06-01"] }
}

const messagesBody = (maxTokensRequired: boolean) => ({
  type: "object",
  required: maxTokensRequired ? ["model", "max_tokens", "messages"] : ["model", "messages"],
  properties: {
    model: modelField,
    max_tokens: { type: "integer", minimum: 1, maximum: 4096 },
    messages: { type: "array", minItems: 1, maxItems: 3, items: { $ref: "#/components/schemas/AnthropicMessage" } },
    system: {
      anyOf: [text, {
        type: "array",
        maxItems: 2,
        items: { type: "object", required: ["type", "text"], properties: { type: { const: "text" }, text } }
      }]
    },
    stream: { type: "boolean" },
    temperature: { type: "number", minimum: 0, maximum: 1 },
    stop_sequences: { type: "array", maxItems: 2, items: { type: "string" } },
    tools: {
      type: "array",
      maxItems: 2,
      items: {
        type: "object",
        required: ["name", "input_schema"],
        properties: { name: { type: "string", pattern: "^[a-z_]{1,20}$" }, description: text, input_schema: toolSchema }
      }
    },
    tool_choice: { type: "object", required: ["type"], properties: { type: { enum: ["auto", "any", "none"] } } },
    thinking: {
      type: "object",
      required: ["type", "budget_tokens"],
      properties: { type: { const: "enabled" }, budget_tokens: { type: "integer", minimum: 1024, maximum: 4000 } }
    },
    metadata: { type: "object", properties: { user_id: { type: "string" } } }
  }
})

const gatewayOperation = (
  method: string,
  path: string,
  body: JsonSchema | undefined,
  options: {
    readonly surface?: Surface
    readonly security?: Security
    readonly parameters?: ReadonlyArray<Parameter>
  } = {}
): Operation => ({
  listener: "gateway",
  method,
  path,
  parameters: options.parameters ?? [keyScopeHeader],
  body,
  security: options.security ?? "gateway",
  surface: options.surface ?? "chat",
  components: gatewayComponents
})

/** The gateway's routes: the three protocols, count_tokens, the model list and the operator's slot setting. */
export const gatewayOperations: ReadonlyArray<Operation> = [
  gatewayOperation("POST", "/v1/chat/completions", {
    type: "object",
    required: ["model", "messages"],
    properties: {
      model: modelField,
      messages: { type: "array", minItems: 1, maxItems: 3, items: { $ref: "#/components/schemas/ChatMessage" } },
      max_tokens: { type: "integer", minimum: 1, maximum: 4096 },
      max_completion_tokens: { type: "integer", minimum: 1, maximum: 4096 },
      stream: { type: "boolean" },
      stream_options: { type: "object", properties: { include_usage: { type: "boolean" } } },
      temperature: { type: "number", minimum: 0, maximum: 2 },
      n: { type: "integer", minimum: 1, maximum: 1 },
      stop: { anyOf: [{ type: "string" }, { type: "array", maxItems: 2, items: { type: "string" } }] },
      tools: {
        type: "array",
        maxItems: 2,
        items: {
          type: "object",
          required: ["type", "function"],
          properties: {
            type: { const: "function" },
            function: {
              type: "object",
              required: ["name"],
              properties: {
                name: { type: "string", pattern: "^[a-z_]{1,20}$" },
                description: text,
                parameters: toolSchema
              }
            }
          }
        }
      },
      tool_choice: { anyOf: [{ enum: ["auto", "none", "required"] }, { type: "object" }] },
      reasoning_effort: { enum: ["low", "medium", "high"] },
      response_format: { type: "object", properties: { type: { enum: ["text", "json_object"] } } },
      user: { type: "string" }
    }
  }),
  gatewayOperation("POST", "/v1/responses", {
    type: "object",
    required: ["model", "input"],
    properties: {
      model: modelField,
      input: {
        anyOf: [text, {
          type: "array",
          minItems: 1,
          maxItems: 3,
          items: { $ref: "#/components/schemas/ResponsesItem" }
        }]
      },
      instructions: text,
      max_output_tokens: { type: "integer", minimum: 16, maximum: 4096 },
      stream: { type: "boolean" },
      temperature: { type: "number", minimum: 0, maximum: 2 },
      tools: {
        type: "array",
        maxItems: 2,
        items: {
          type: "object",
          required: ["type", "name"],
          properties: {
            type: { const: "function" },
            name: { type: "string", pattern: "^[a-z_]{1,20}$" },
            description: text,
            parameters: toolSchema,
            strict: { type: "boolean" }
          }
        }
      },
      reasoning: {
        type: "object",
        properties: { effort: { enum: ["low", "medium", "high"] }, summary: { enum: ["auto", "detailed"] } }
      },
      store: { type: "boolean" },
      previous_response_id: { type: "string" },
      text: {
        type: "object",
        properties: { format: { type: "object", properties: { type: { enum: ["text", "json_object"] } } } }
      }
    }
  }),
  gatewayOperation("POST", "/v1/messages", messagesBody(true), {
    surface: "messages",
    parameters: [keyScopeHeader, anthropicVersion]
  }),
  gatewayOperation("POST", "/v1/messages/count_tokens", messagesBody(false), {
    surface: "messages",
    parameters: [keyScopeHeader, anthropicVersion]
  }),
  gatewayOperation("GET", "/v1/models", undefined, { parameters: [] }),
  gatewayOperation("GET", "/v1/admin/tenants/{id}/gateway", undefined, {
    security: "operator",
    parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }]
  }),
  gatewayOperation(
    "PUT",
    "/v1/admin/tenants/{id}/gateway",
    {
      type: "object",
      required: ["streamSlots"],
      properties: { streamSlots: { anyOf: [{ type: "integer", minimum: 1, maximum: 10000 }, { type: "null" }] } }
    },
    { security: "operator", parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }] }
  )
]

// ---------------------------------------------------------------------------
// The world a run needs

/**
 * Node settings for a fuzz run: a small body limit (oversized bodies stay
 * cheap) and a catalog provider (`acme`) served by the fake upstream, so
 * key checks with the provider stay on loopback.
 */
export const env = (upstream: FakeUpstream.FakeUpstream, maxBodyBytes: number) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "fuzz-catalog-"))),
      (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
    )
    const catalogFile = Path.join(dir, "catalog.json")
    const catalog = {
      models: {
        "acme/model-1": {
          name: "Acme One",
          api: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          contextWindow: 32000,
          maxTokens: 4096,
          cost: { input: 1, output: 2, cacheRead: 0.1, cacheWrite: 0 }
        }
      }
    }
    yield* Effect.promise(() => Fs.writeFile(catalogFile, JSON.stringify(catalog)))
    return {
      ALLOW_PRIVATE_URLS: "true",
      MODEL_CATALOG_FILE: catalogFile,
      MAX_BODY_BYTES: String(maxBodyBytes),
      LOG_LEVEL: "Warn"
    }
  })

export interface World {
  readonly operations: ReadonlyArray<Operation>
  readonly fill: Fill
  /** The tenant's agent whose token is `fill.keys.agentToken`. */
  readonly agentId: string
  /** Every secret the world holds; none may appear in an answer. */
  readonly secrets: ReadonlyArray<string>
}

const secret = (prefix: string) => `${prefix}-${Crypto.randomBytes(12).toString("hex")}`

/**
 * Two tenants with something of everything (custom providers for the three
 * protocols, keys, a key scope, agents, tokens, a settled request), the
 * secrets they hold, and the real ids the generators fill in.
 */
export const make = (
  node: TestNode.TestNode,
  upstream: FakeUpstream.FakeUpstream,
  options: { readonly maxBodyBytes: number; readonly longPollSeconds: number }
) =>
  Effect.gen(function*() {
    const api = HttpClient.client(node.rest)
    const ok = (what: string) => (response: HttpClient.Response) =>
      response.status < 300
        ? Effect.succeed(response.body)
        : Effect.die(new Error(`fuzz world: ${what} answered ${response.status} ${response.text}`))
    const operator = node.operatorToken
    const tenant = yield* api.post("/v1/admin/tenants", { token: operator, json: { name: "fuzz" } }).pipe(
      Effect.flatMap(ok("tenant"))
    )
    const other = yield* api.post("/v1/admin/tenants", { token: operator, json: { name: "fuzz-other" } }).pipe(
      Effect.flatMap(ok("other tenant"))
    )
    const key: string = tenant.token
    const secrets = [key, other.token as string, operator]
    const provider = (token: string, path: string, type: string) => {
      const apiKey = secret("sk-fuzz")
      const header = secret("hdr-fuzz")
      secrets.push(apiKey, header)
      return api.put(path, {
        token,
        json: {
          type,
          baseUrl: type === "anthropic-messages" ? upstream.url : `${upstream.url}/v1`,
          apiKey,
          headers: { "x-fuzz-secret": header },
          models: [{
            id: "m1",
            contextWindow: 100_000,
            maxOutputTokens: 4096,
            reasoning: true,
            input: ["text", "image"]
          }]
        }
      }).pipe(Effect.flatMap(ok(path)))
    }
    // The gateway's targets, one per upstream protocol; REST fuzzing changes only the fz-* ones.
    yield* provider(key, "/v1/providers/up-chat", "openai-completions")
    yield* provider(key, "/v1/providers/up-resp", "openai-responses")
    yield* provider(key, "/v1/providers/up-msg", "anthropic-messages")
    yield* provider(key, "/v1/providers/fz-1", "openai-completions")
    yield* provider(key, "/v1/providers/fz-2", "anthropic-messages")
    yield* provider(other.token, "/v1/providers/fzb-only", "openai-completions")
    const storedKey = (token: string, path: string) => {
      const apiKey = secret("sk-fuzz-key")
      secrets.push(apiKey)
      return api.put(path, { token, json: { apiKey, verify: false } }).pipe(Effect.flatMap(ok(path)))
    }
    yield* storedKey(key, "/v1/keys/acme")
    yield* storedKey(key, "/v1/key-scopes/team/providers/acme")
    yield* storedKey(other.token, "/v1/key-scopes/teamb/providers/acme")
    yield* storedKey(operator, "/v1/admin/platform-keys/acme")
    yield* provider(key, "/v1/key-scopes/team/model-providers/sp1", "openai-completions")

    const agent = (token: string, json: unknown, path = "/v1/agents") =>
      (path === "/v1/agents" ? api.post(path, { token, json }) : api.put(path, { token, json })).pipe(
        Effect.flatMap(ok(path))
      )
    const main = yield* agent(key, { model: "up-chat/m1" })
    const keyed = yield* agent(key, { model: "up-msg/m1" }, "/v1/agents/by-key/k1")
    const doomed = [yield* agent(key, { model: "up-chat/m1" }), yield* agent(key, { model: "up-chat/m1" })]
    const foreignAgent = yield* agent(other.token, { model: "fzb-only/m1" })
    const prompt = yield* api.post(`/v1/agents/${main.id}/prompt`, { token: key, json: { text: "hello" } }).pipe(
      Effect.flatMap(ok("prompt"))
    )
    yield* api.get(`/v1/agents/${main.id}/requests/${prompt.id}?wait=20`, { token: key })

    const token = (token: string, name: string) =>
      api.post("/v1/tokens", { token, json: { name } }).pipe(Effect.flatMap(ok("token")))
    const disposable = [yield* token(key, "fuzz-a"), yield* token(key, "fuzz-b"), yield* token(key, "fuzz-c")]
    const foreignToken = yield* token(other.token, "fuzz-other")
    const revoked = yield* token(key, "revoked")
    yield* api.delete(`/v1/tokens/${revoked.id}`, { token: key }).pipe(Effect.flatMap(ok("revoke")))
    secrets.push(revoked.token)

    const document = yield* api.get("/v1/openapi.json").pipe(Effect.flatMap(ok("openapi.json")))
    const mine = (...values: ReadonlyArray<string>): Array<Id> => values.map((value) => ({ value }))
    const theirs = (...values: ReadonlyArray<string>): Array<Id> => values.map((value) => ({ value, foreign: true }))

    const ids = (operation: Operation, parameter: string): ReadonlyArray<Id> => {
      const { method, path } = operation
      // The slot setting of the tenant the gateway calls run as stays as it is; the other tenant's may change.
      if (operation.listener === "gateway") return method === "PUT" ? mine(other.id) : mine(other.id, tenant.id)
      if (path.startsWith("/clients/")) return parameter === "id" ? mine(main.id) : mine(prompt.id)
      if (path === "/v1/tokens/{id}") {
        return [...mine(...disposable.map((token) => token.id as string)), ...theirs(foreignToken.id)]
      }
      if (path === "/v1/agents/by-key/{key}") {
        return mine("k1", "k2")
      }
      if (path === "/v1/agents/{keyOrId}/credentials") {
        return [...mine("k1", keyed.id, main.id), ...theirs(foreignAgent.id)]
      }
      if (path.startsWith("/v1/agents/{id}")) {
        if (parameter === "requestId") return mine(prompt.id)
        return method === "DELETE"
          ? [...mine(...doomed.map((agent) => agent.id as string)), ...theirs(foreignAgent.id)]
          : [...mine(main.id, keyed.id), ...theirs(foreignAgent.id)]
      }
      if (path.startsWith("/v1/providers/")) {
        return method === "GET"
          ? [...mine("up-chat", "fz-1", "openai"), ...theirs("fzb-only")]
          : mine("fz-1", "fz-2", "fz-new")
      }
      if (path.startsWith("/v1/keys/") || path.startsWith("/v1/admin/platform-keys/")) return mine("acme")
      if (path.startsWith("/v1/key-scopes/")) {
        if (parameter === "scope") return [...mine("team", "team2"), ...(method === "PUT" ? [] : theirs("teamb"))]
        if (parameter === "provider") return mine("acme")
        return mine("sp1", "sp2")
      }
      if (path.startsWith("/v1/admin/tenants/")) return mine(tenant.id, other.id)
      // Never the node's own runner address: a drain would stop the node under test.
      return []
    }
    const models = ["up-chat/m1", "up-resp/m1", "up-msg/m1", "acme/model-1", "sp1/m1", "fzb-only/m1"]
    const named: Readonly<Record<string, ReadonlyArray<string>>> = {
      model: models,
      keyScope: ["team", "teamb"],
      "x-agent-runtime-key-scope": ["team", "teamb"],
      baseUrl: [`${upstream.url}/v1`, upstream.url],
      requestId: [prompt.id],
      after: [disposable[0].id, foreignToken.id],
      "idempotency-key": ["k1", "k3"],
      provider: ["acme", "openai"]
    }
    const fill: Fill = {
      keys: {
        apiKey: key,
        foreignKey: other.token,
        revokedKey: revoked.token,
        agentToken: main.token,
        foreignAgentToken: foreignAgent.token,
        operatorToken: operator,
        tenantId: tenant.id,
        foreignTenantId: other.id
      },
      ids,
      values: (name) => named[name],
      maxBodyBytes: options.maxBodyBytes,
      longPollSeconds: options.longPollSeconds
    }
    return {
      operations: [...restOperations(document), ...gatewayOperations],
      fill,
      agentId: main.id,
      secrets
    } satisfies World
  })
