/**
 * What the gateway tests share: a world whose tenant has one custom provider
 * per upstream protocol (all served by the fake upstream), the official
 * clients pointed at the gateway, and one call shape per inbound protocol
 * whose answer is read back into the same plain form, streamed or not.
 */
import { type FakeUpstream, Http, type TestNode, TestWorld } from "@agent-runtime/testing"
import Anthropic from "@anthropic-ai/sdk"
import { Context, Effect, Layer, type Scope } from "effect"
import OpenAI from "openai"
import Pg from "pg"

export type Inbound = "chat" | "responses" | "messages"
export type Upstream = "openai-completions" | "openai-responses" | "anthropic-messages"

export const inbounds: ReadonlyArray<Inbound> = ["chat", "responses", "messages"]
export const upstreams: ReadonlyArray<Upstream> = ["openai-completions", "openai-responses", "anthropic-messages"]

/** The custom provider serving each upstream protocol; its one model is `m1`. */
export const providerOf: Record<Upstream, string> = {
  "openai-completions": "up-chat",
  "openai-responses": "up-resp",
  "anthropic-messages": "up-msg"
}

/** The fake upstream's name for each protocol, as it records requests. */
export const recordedProtocol: Record<Upstream, FakeUpstream.Protocol> = {
  "openai-completions": "openai-chat",
  "openai-responses": "openai-responses",
  "anthropic-messages": "anthropic-messages"
}

export const modelOf = (upstream: Upstream) => `${providerOf[upstream]}/m1`

export interface Tenant {
  readonly id: string
  readonly token: string
}

export const createTenant = (node: TestNode.TestNode, name: string) =>
  Effect.map(
    Http.client(node.rest).post("/v1/admin/tenants", { token: node.operatorToken, json: { name } }),
    (response) => response.body as Tenant
  )

/** The three custom providers, each pointing at the fake upstream with its own key. */
export const addProviders = (node: TestNode.TestNode, upstream: FakeUpstream.FakeUpstream, tenant: Tenant) =>
  Effect.forEach(upstreams, (type) =>
    Effect.tap(
      Http.client(node.rest).put(`/v1/providers/${providerOf[type]}`, {
        token: tenant.token,
        json: {
          type,
          baseUrl: type === "anthropic-messages" ? upstream.url : `${upstream.url}/v1`,
          apiKey: `sk-${providerOf[type]}-key`,
          models: [{
            id: "m1",
            contextWindow: 200_000,
            maxOutputTokens: 4096,
            reasoning: true,
            input: ["text", "image"],
            pricing: { input: 1, output: 2 }
          }]
        }
      }),
      (response) =>
        Effect.sync(() => {
          if (response.status !== 200) throw new Error(`provider ${type}: ${response.status} ${response.text}`)
        })
    ), { discard: true })

export const openai = (gateway: string, apiKey: string) =>
  new OpenAI({ apiKey, baseURL: `${gateway}/v1`, maxRetries: 0 })
export const anthropic = (gateway: string, apiKey: string) => new Anthropic({ apiKey, baseURL: gateway, maxRetries: 0 })

/** A conversation in protocol-neutral terms, written into each protocol's request. */
export interface Ask {
  readonly model: string
  readonly stream: boolean
  readonly system?: string
  readonly prompt?: string
  readonly tools?: boolean
  /** A previous call of get_weather({city: Paris}) answered "sunny". */
  readonly toolRound?: boolean
  /** Extra fields merged into the request body as the protocol names them. */
  readonly extra?: Record<string, unknown>
}

export interface Answer {
  readonly text: string
  readonly reasoning: string
  readonly signature: string | undefined
  readonly toolCalls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly args: unknown }>
  /** Input counts the cached tokens too (as OpenAI reports it); output includes reasoning. */
  readonly usage: { readonly input: number; readonly output: number } | undefined
  readonly stop: string
}

const weatherSchema = { type: "object", properties: { city: { type: "string" } } }

const chatRequest = (ask: Ask) => {
  const messages: Array<any> = []
  if (ask.system !== undefined) messages.push({ role: "system", content: ask.system })
  messages.push({ role: "user", content: ask.prompt ?? "hi" })
  if (ask.toolRound === true) {
    messages.push({
      role: "assistant",
      content: null,
      tool_calls: [{
        id: "call_w1",
        type: "function",
        function: { name: "get_weather", arguments: '{"city":"Paris"}' }
      }]
    })
    messages.push({ role: "tool", tool_call_id: "call_w1", content: "sunny" })
  }
  return {
    model: ask.model,
    messages,
    max_tokens: 1000,
    ...(ask.tools === true || ask.toolRound === true
      ? {
        tools: [
          { type: "function", function: { name: "get_weather", description: "weather", parameters: weatherSchema } },
          { type: "function", function: { name: "get_time", description: "time", parameters: weatherSchema } }
        ]
      }
      : {}),
    ...ask.extra
  }
}

const responsesRequest = (ask: Ask) => {
  const input: Array<any> = [{ role: "user", content: ask.prompt ?? "hi" }]
  if (ask.toolRound === true) {
    input.push({ type: "function_call", call_id: "call_w1", name: "get_weather", arguments: '{"city":"Paris"}' })
    input.push({ type: "function_call_output", call_id: "call_w1", output: "sunny" })
  }
  return {
    model: ask.model,
    input,
    max_output_tokens: 1000,
    ...(ask.system === undefined ? {} : { instructions: ask.system }),
    ...(ask.tools === true || ask.toolRound === true
      ? {
        tools: [
          { type: "function", name: "get_weather", description: "weather", parameters: weatherSchema, strict: false },
          { type: "function", name: "get_time", description: "time", parameters: weatherSchema, strict: false }
        ]
      }
      : {}),
    ...ask.extra
  }
}

const messagesRequest = (ask: Ask) => {
  const messages: Array<any> = [{ role: "user", content: ask.prompt ?? "hi" }]
  if (ask.toolRound === true) {
    messages.push({
      role: "assistant",
      content: [{ type: "tool_use", id: "toolu_w1", name: "get_weather", input: { city: "Paris" } }]
    })
    messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_w1", content: "sunny" }] })
  }
  return {
    model: ask.model,
    max_tokens: 1000,
    messages,
    ...(ask.system === undefined ? {} : { system: ask.system }),
    ...(ask.tools === true || ask.toolRound === true
      ? {
        tools: [
          { name: "get_weather", description: "weather", input_schema: weatherSchema },
          { name: "get_time", description: "time", input_schema: weatherSchema }
        ]
      }
      : {}),
    ...ask.extra
  }
}

const parse = (text: string) => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const viaChat = async (client: OpenAI, ask: Ask): Promise<Answer> => {
  const body = chatRequest(ask) as any
  if (!ask.stream) {
    const completion = await client.chat.completions.create(body)
    const message = completion.choices[0]!.message as any
    return {
      text: message.content ?? "",
      reasoning: message.reasoning_content ?? "",
      signature: undefined,
      toolCalls: (message.tool_calls ?? []).map((call: any) => ({
        id: call.id,
        name: call.function.name,
        args: parse(call.function.arguments)
      })),
      usage: completion.usage === undefined
        ? undefined
        : { input: completion.usage.prompt_tokens, output: completion.usage.completion_tokens },
      stop: completion.choices[0]!.finish_reason
    }
  }
  // The SDK's stream helper reassembles chunks and checks their grammar (tool call indexes, ids).
  const runner = client.chat.completions.stream({ ...body, stream_options: { include_usage: true } })
  let reasoning = ""
  let usage: Answer["usage"]
  runner.on("chunk", (chunk: any) => {
    reasoning += chunk.choices[0]?.delta?.reasoning_content ?? ""
    if (chunk.usage) usage = { input: chunk.usage.prompt_tokens, output: chunk.usage.completion_tokens }
  })
  const completion = await runner.finalChatCompletion()
  const message = completion.choices[0]!.message
  return {
    text: message.content ?? "",
    reasoning,
    signature: undefined,
    toolCalls: (message.tool_calls ?? []).map((call: any) => ({
      id: call.id,
      name: call.function.name,
      args: parse(call.function.arguments)
    })),
    usage,
    stop: completion.choices[0]!.finish_reason
  }
}

const fromResponse = (response: OpenAI.Responses.Response): Answer => {
  const reasoning = response.output.filter((item) => item.type === "reasoning") as Array<any>
  return {
    // The stream helper's final response has no `output_text`; the items are what both carry.
    text: response.output.flatMap((item) =>
      item.type === "message" ? item.content.flatMap((part) => (part.type === "output_text" ? [part.text] : [])) : []
    ).join(""),
    reasoning: reasoning.flatMap((item) => item.summary.map((part: any) => part.text)).join(""),
    signature: reasoning[0]?.encrypted_content ?? undefined,
    toolCalls: response.output.flatMap((item) =>
      item.type === "function_call" ? [{ id: item.call_id, name: item.name, args: parse(item.arguments) }] : []
    ),
    usage: response.usage === undefined || response.usage === null
      ? undefined
      : { input: response.usage.input_tokens, output: response.usage.output_tokens },
    stop: response.status ?? ""
  }
}

const viaResponses = async (client: OpenAI, ask: Ask): Promise<Answer> => {
  const body = responsesRequest(ask) as any
  if (!ask.stream) return fromResponse(await client.responses.create(body))
  const stream = client.responses.stream(body)
  return fromResponse(await stream.finalResponse())
}

const fromMessage = (message: Anthropic.Message): Answer => {
  const thinking = message.content.filter((block) => block.type === "thinking") as Array<any>
  return {
    text: message.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join(""),
    reasoning: thinking.map((block) => block.thinking).join(""),
    signature: thinking[0]?.signature || undefined,
    toolCalls: message.content.flatMap((block) =>
      block.type === "tool_use" ? [{ id: block.id, name: block.name, args: block.input }] : []
    ),
    usage: {
      input: message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0) +
        (message.usage.cache_creation_input_tokens ?? 0),
      output: message.usage.output_tokens
    },
    stop: message.stop_reason ?? ""
  }
}

const viaMessages = async (client: Anthropic, ask: Ask): Promise<Answer> => {
  const body = messagesRequest(ask) as any
  if (!ask.stream) return fromMessage(await client.messages.create(body))
  return fromMessage(await client.messages.stream(body).finalMessage())
}

/** One call through the gateway in `inbound`'s protocol with its official client. */
export const ask = (gateway: string, apiKey: string, inbound: Inbound, request: Ask) =>
  Effect.promise(() =>
    inbound === "chat"
      ? viaChat(openai(gateway, apiKey), request)
      : inbound === "responses"
      ? viaResponses(openai(gateway, apiKey), request)
      : viaMessages(anthropic(gateway, apiKey), request)
  )

/** The tool result the upstream received, read from its request in its own protocol. */
export const toolResultIn = (request: FakeUpstream.RecordedRequest): { id: string; content: string } | undefined => {
  const body = request.body as any
  switch (request.protocol) {
    case "openai-chat": {
      const message = body.messages.find((message: any) => message.role === "tool")
      return message &&
        {
          id: message.tool_call_id,
          content: typeof message.content === "string"
            ? message.content
            : message.content.map((part: any) => part.text).join("")
        }
    }
    case "openai-responses": {
      const item = body.input.find((item: any) => item.type === "function_call_output")
      return item &&
        {
          id: item.call_id,
          content: typeof item.output === "string" ? item.output : item.output.map((part: any) => part.text).join("")
        }
    }
    default: {
      for (const message of body.messages) {
        if (!Array.isArray(message.content)) continue
        const block = message.content.find((block: any) => block.type === "tool_result")
        if (block) {
          return {
            id: block.tool_use_id,
            content: typeof block.content === "string"
              ? block.content
              : block.content.map((part: any) => part.text).join("")
          }
        }
      }
      return undefined
    }
  }
}

/** The world with the tenant and its providers made. */
export const setup = Effect.gen(function*() {
  const world = yield* TestWorld.TestWorld
  const tenant = yield* createTenant(world.node, "gateway")
  yield* addProviders(world.node, world.upstream, tenant)
  return { ...world, tenant, gateway: world.node.gateway }
})

export class GatewayWorld extends Context.Tag("GatewayWorld")<
  GatewayWorld,
  Effect.Effect.Success<typeof setup>
>() {}

export const layer = (
  env?: (upstream: FakeUpstream.FakeUpstream) => Effect.Effect<Record<string, string>, never, Scope.Scope>
) => Layer.effect(GatewayWorld, setup).pipe(Layer.provide(TestWorld.layer(env)))

export interface UsageRow {
  readonly provider: string
  readonly model: string
  readonly kind: string
  readonly keySource: string
  readonly input: number
  readonly output: number
  readonly costUsd: number
}

/** The tenant's usage records, oldest first, once at least `count` exist (they are written in batches). */
export const usageRows = (databaseUrl: string, tenantId: string, count: number) =>
  Effect.acquireUseRelease(
    Effect.promise(async () => {
      const client = new Pg.Client({ connectionString: databaseUrl })
      await client.connect()
      return client
    }),
    (client) =>
      Effect.promise(async () => {
        for (let attempt = 0;; attempt++) {
          const { rows } = await client.query(
            `SELECT provider, model, kind, key_source AS "keySource", input::float8 AS input, output::float8 AS output,
              cost_usd::float8 AS "costUsd" FROM usage_records WHERE tenant_id = $1 ORDER BY at, id`,
            [tenantId]
          )
          if (rows.length >= count || attempt > 50) return rows as Array<UsageRow>
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      }),
    (client) => Effect.promise(() => client.end())
  )
