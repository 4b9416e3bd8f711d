import { describe, expect, it } from "@effect/vitest"
import { Either, ParseResult, Schema } from "effect"
import { AgentInput, AgentKey, ConfigureInput } from "../src/Agent.ts"
import { AnswerInputs } from "../src/Input.ts"
import {
  CustomProviderInput,
  isForbiddenModelHeader,
  KeyInput,
  KeyScopeEntryInput,
  ModelHeaders
} from "../src/Provider.ts"
import * as Run from "../src/Run.ts"
import { PromptInput, SpendLimitInput } from "../src/Run.ts"
import { ScheduleInput } from "../src/Schedule.ts"
import { BrowserTokenInput } from "../src/Session.ts"
import { WebhookEndpointInput, WebhookEndpointUpdate } from "../src/Webhook.ts"

const accepts = <A, I>(schema: Schema.Schema<A, I>, input: unknown): A => {
  const result = Schema.decodeUnknownEither(schema)(input)
  if (Either.isLeft(result)) {
    throw new Error(`expected to decode, got:\n${ParseResult.TreeFormatter.formatErrorSync(result.left)}`)
  }
  return result.right
}

/** The error message of a refused input; fails the test when the input decodes. */
const refuses = <A, I>(schema: Schema.Schema<A, I>, input: unknown): string => {
  const result = Schema.decodeUnknownEither(schema)(input)
  if (Either.isRight(result)) throw new Error(`expected a failure, decoded ${JSON.stringify(input).slice(0, 200)}`)
  return ParseResult.TreeFormatter.formatErrorSync(result.left)
}

const times = <A>(n: number, f: (i: number) => A): Array<A> => Array.from({ length: n }, (_, i) => f(i))
const record = (n: number, value = "v"): Record<string, string> => Object.fromEntries(times(n, (i) => [`k${i}`, value]))

describe("AgentInput", () => {
  it("accepts an empty body and a full one", () => {
    accepts(AgentInput, {})
    const input = accepts(AgentInput, {
      name: "support",
      model: "anthropic/claude-sonnet-4",
      systemPrompt: "Be brief.",
      systemPromptAppend: "Sign as Ada.",
      thinkingLevel: "xhigh",
      initialMessages: [{ role: "user", content: "hi" }, { role: "compactionSummary", summary: "earlier" }],
      fileTools: false,
      ttlSeconds: null,
      mounts: [{ volumeId: "vol_1", path: "/workspace", mode: "rw", notify: true }],
      subject: "user_1",
      context: { org: "acme", roles: ["admin"] },
      builtins: ["web_fetch", "web_search", "schedule", "ask_user", "delegate"],
      delegate: { agents: ["researcher"], maxDepth: 2 },
      keyScope: "team-a",
      spendLimit: { usd: 25 },
      modelHeaders: { "x-team": "a" },
      prompt: { text: "Hello", metadata: { ticket: "42" } }
    })
    expect(input.ttlSeconds).toBeNull()
    expect(input.prompt?.text).toBe("Hello")
  })

  it("bounds ttlSeconds to 60..31622400 integers or null", () => {
    accepts(AgentInput, { ttlSeconds: 60 })
    accepts(AgentInput, { ttlSeconds: 31622400 })
    for (const ttlSeconds of [59, 31622401, 90.5, "600"]) {
      expect(refuses(AgentInput, { ttlSeconds })).toContain("ttlSeconds")
    }
    expect(refuses(AgentInput, { ttlSeconds: 59 })).toContain("60 to 31622400")
  })

  it("refuses a context over 4 KB of JSON", () => {
    accepts(AgentInput, { context: { blob: "x".repeat(4000) } })
    const message = refuses(AgentInput, { context: { blob: "x".repeat(4096) } })
    expect(message).toContain("context")
    expect(message).toContain("4 KB")
    expect(refuses(AgentInput, { context: "not an object" })).toContain("context")
  })

  it("allows at most 8 known builtins", () => {
    expect(refuses(AgentInput, { builtins: times(9, () => "web_fetch") })).toContain("builtins")
    expect(refuses(AgentInput, { builtins: ["shell"] })).toContain("builtins")
  })

  it("refuses systemPrompt or builtins together with a definition", () => {
    accepts(AgentInput, { definition: "def_1", systemPromptAppend: "more" })
    const message = refuses(AgentInput, { definition: "def_1", systemPrompt: "x" })
    expect(message).toContain("systemPrompt")
    expect(message).toContain("systemPromptAppend")
    expect(refuses(AgentInput, { definition: "def_1", builtins: ["ask_user"] })).toContain("builtins")
  })

  it("bounds system prompts to 32000 characters", () => {
    accepts(AgentInput, { systemPrompt: "x".repeat(32000) })
    expect(refuses(AgentInput, { systemPrompt: "x".repeat(32001) })).toContain("systemPrompt")
    expect(refuses(AgentInput, { systemPromptAppend: "x".repeat(32001) })).toContain("systemPromptAppend")
  })

  it("checks initial message roles and spend limits", () => {
    expect(refuses(AgentInput, { initialMessages: [{ role: "system", content: "x" }] })).toContain("initialMessages")
    expect(refuses(AgentInput, { spendLimit: { usd: 1000001 } })).toContain("spendLimit")
    expect(refuses(AgentInput, { spendLimit: { usd: -1 } })).toContain("usd")
  })
})

describe("AgentKey", () => {
  it("takes 1 to 80 characters of A-Z a-z 0-9 _ -", () => {
    accepts(AgentKey, "order-42_B")
    accepts(AgentKey, "k".repeat(80))
    for (const key of ["", "k".repeat(81), "a b", "a/b", "é"]) {
      expect(refuses(AgentKey, key)).toContain("1 to 80 characters")
    }
  })
})

describe("SpendLimitInput", () => {
  it("takes usd from 0 to 1000000 and nothing else", () => {
    accepts(SpendLimitInput, { usd: 0 })
    accepts(SpendLimitInput, { usd: 1000000 })
    expect(refuses(SpendLimitInput, { usd: 1000000.01 })).toContain("usd")
    expect(refuses(SpendLimitInput, { usd: 5, currency: "EUR" })).toContain("currency")
  })
})

describe("ConfigureInput", () => {
  it("refuses other fields and bounds systemPrompt", () => {
    accepts(ConfigureInput, { keyScope: null, spendLimit: null, modelHeaders: null, builtins: [] })
    expect(refuses(ConfigureInput, { model: "a/b", ttlSeconds: 60 })).toContain("ttlSeconds")
    expect(refuses(ConfigureInput, { systemPrompt: "" })).toContain("systemPrompt")
  })
})

describe("PromptInput", () => {
  it("accepts a prompt with metadata, files and a sender", () => {
    const prompt = accepts(PromptInput, {
      text: "Summarize",
      from: { id: "u_1", name: "Ada", username: "ada" },
      whileRunning: "steer",
      metadata: { ...record(15), ["k".repeat(64)]: "v".repeat(512) },
      files: [{ path: "report.pdf" }, { data: "aGVsbG8=", name: "hello.txt", contentType: "text/plain" }]
    })
    expect(prompt.files).toHaveLength(2)
  })

  it("requires text", () => {
    expect(refuses(PromptInput, {})).toContain("text")
  })

  it("bounds metadata: 16 keys of 1 to 64 characters, values up to 512", () => {
    expect(refuses(PromptInput, { text: "x", metadata: record(17) })).toContain("metadata")
    expect(refuses(PromptInput, { text: "x", metadata: record(17) })).toContain("at most 16 keys")
    const longKey = refuses(PromptInput, { text: "x", metadata: { ["k".repeat(65)]: "v" } })
    expect(longKey).toContain("metadata")
    expect(longKey).toContain("1 to 64 characters")
    expect(refuses(PromptInput, { text: "x", metadata: { "": "v" } })).toContain("1 to 64 characters")
    const longValue = refuses(PromptInput, { text: "x", metadata: { ticket: "v".repeat(513) } })
    expect(longValue).toContain("metadata")
    expect(longValue).toContain("ticket")
    expect(refuses(PromptInput, { text: "x", metadata: { n: 1 } })).toContain("metadata")
  })

  it("bounds files: at most 20; inline bytes counted decoded, for the service's 413 beyond 4 MiB", () => {
    accepts(PromptInput, { text: "x", files: times(20, (i) => ({ path: `f${i}` })) })
    expect(refuses(PromptInput, { text: "x", files: times(21, (i) => ({ path: `f${i}` })) })).toContain("files")
    expect(refuses(PromptInput, { text: "x", files: [{ name: "no data" }] })).toContain("files")
    const exactly = [{ data: "AAAA".repeat(1024 * 1024) }]
    expect(Run.inlineBytes(exactly)).toBe(Run.maxInlineFileBytes - 1024 * 1024)
    expect(Run.inlineBytes([{ data: "AAA=" }, { path: "a" }, { data: "AA==" }])).toBe(3)
    const over = times(4, () => ({ data: "A".repeat((1024 * 1024 * 4) / 3 + 4) }))
    accepts(PromptInput, { text: "x", files: over })
    expect(Run.inlineBytes(over)).toBeGreaterThan(Run.maxInlineFileBytes)
  })

  it("allows no other fields in from", () => {
    const message = refuses(PromptInput, { text: "x", from: { id: "u_1", email: "a@b.c" } })
    expect(message).toContain("from")
    expect(message).toContain("email")
    expect(refuses(PromptInput, { text: "x", from: { name: "no id" } })).toContain("id")
  })

  it("knows only queue and steer", () => {
    expect(refuses(PromptInput, { text: "x", whileRunning: "interrupt" })).toContain("whileRunning")
  })
})

describe("ModelHeaders", () => {
  it("accepts ordinary headers", () => {
    accepts(ModelHeaders, { "x-team": "a", "HTTP-Referer": "https://example.com", "X-Title": "app" })
    accepts(ModelHeaders, record(20))
  })

  it("refuses credentials, identity and transport headers, in any case", () => {
    for (
      const name of [
        "authorization",
        "Authorization",
        "X-API-Key",
        "x-goog-api-key",
        "cf-aig-authorization",
        "ChatGPT-Account-Id",
        "x-agent-runtime-identity",
        "X-Amz-Security-Token",
        "x-amz-date",
        "Host",
        "content-length",
        "Connection",
        "transfer-encoding",
        "keep-alive",
        "upgrade",
        "TE",
        "trailer",
        "Proxy-Authorization"
      ]
    ) {
      expect(isForbiddenModelHeader(name)).toBe(true)
      const message = refuses(ModelHeaders, { [name]: "x" })
      expect(message).toContain(name)
      expect(message).toContain("may not be set")
    }
    expect(isForbiddenModelHeader("x-amzn-trace-id")).toBe(false)
    expect(isForbiddenModelHeader("x-team")).toBe(false)
  })

  it("allows at most 20 headers and 8 KB", () => {
    expect(refuses(ModelHeaders, record(21))).toContain("at most 20 headers")
    expect(refuses(ModelHeaders, { a: "x".repeat(4096), b: "x".repeat(4096) })).toContain("8 KB")
  })

  it("refuses invalid header names and values", () => {
    expect(refuses(ModelHeaders, { "bad name": "x" })).toContain("not a valid header name")
    expect(refuses(ModelHeaders, { "x-a": "1\r\nx-b: 2" })).toContain("line breaks")
  })

  it("names the field inside an agent", () => {
    const message = refuses(AgentInput, { modelHeaders: { Authorization: "Bearer x" } })
    expect(message).toContain("modelHeaders")
    expect(message).toContain("Authorization")
  })
})

describe("KeyInput", () => {
  it("takes a key of 1 to 4096 characters without whitespace", () => {
    expect(accepts(KeyInput, { apiKey: "sk-abc", verify: false }).verify).toBe(false)
    accepts(KeyInput, { apiKey: "k".repeat(4096) })
    for (const apiKey of ["sk abc", " sk", "sk\n", "sk\tx"]) {
      const message = refuses(KeyInput, { apiKey })
      expect(message).toContain("apiKey")
      expect(message).toContain("whitespace")
    }
    expect(refuses(KeyInput, { apiKey: "" })).toContain("apiKey")
    expect(refuses(KeyInput, { apiKey: "k".repeat(4097) })).toContain("4096")
    expect(refuses(KeyInput, {})).toContain("apiKey")
  })
})

describe("CustomProviderInput", () => {
  const model = (id: string) => ({ id, contextWindow: 128000 })
  const provider = {
    type: "openai-completions",
    baseUrl: "https://llm.example.com/v1",
    models: [model("m1")]
  }

  it("accepts 1 to 200 models", () => {
    accepts(CustomProviderInput, provider)
    accepts(CustomProviderInput, { ...provider, models: times(200, (i) => model(`m${i}`)) })
    accepts(CustomProviderInput, {
      type: "anthropic-messages",
      baseUrl: "https://gateway.example.com",
      auth: "bearer",
      apiKey: null,
      headers: { "cf-aig-authorization": "Bearer x" },
      models: [{
        id: "claude",
        contextWindow: 200000,
        maxOutputTokens: 64000,
        input: ["text", "image"],
        reasoning: true,
        pricing: { input: 3, output: 15, cacheRead: 0.3 },
        compat: { supportsDeveloperRole: false, maxTokensField: "max_tokens", thinkingFormat: "qwen-chat-template" }
      }]
    })
  })

  it("refuses no models, over 200 and duplicates", () => {
    expect(refuses(CustomProviderInput, { ...provider, models: [] })).toContain("models")
    expect(refuses(CustomProviderInput, { ...provider, models: times(201, (i) => model(`m${i}`)) })).toContain(
      "at most 200 models"
    )
    expect(refuses(CustomProviderInput, { ...provider, models: [model("a"), model("a")] })).toContain("twice")
  })

  it("checks the type, the base URL and the models' fields", () => {
    expect(refuses(CustomProviderInput, { ...provider, type: "openai" })).toContain("type")
    // Whether http or a private address may be used is the egress check's rule (ALLOW_PRIVATE_URLS); the schema wants a URL.
    expect(refuses(CustomProviderInput, { ...provider, baseUrl: "ftp://llm.example.com/v1" })).toContain("baseUrl")
    expect(refuses(CustomProviderInput, { ...provider, baseUrl: "llm.example.com/v1" })).toContain("baseUrl")
    expect(refuses(CustomProviderInput, { ...provider, models: [{ id: "m", contextWindow: 1.5 }] })).toContain(
      "contextWindow"
    )
    expect(refuses(CustomProviderInput, { ...provider, models: [{ id: "m" }] })).toContain("contextWindow")
  })
})

describe("KeyScopeEntryInput", () => {
  it("accepts its own fields, all optional", () => {
    accepts(KeyScopeEntryInput, {})
    accepts(KeyScopeEntryInput, {
      apiKey: "abc",
      baseUrl: "https://gateway.example.com/bedrock",
      headers: { "x-gw": "1" },
      region: "us-east-1"
    })
  })

  it("refuses other properties", () => {
    const message = refuses(KeyScopeEntryInput, { apiKey: "abc", verify: true })
    expect(message).toContain("verify")
    expect(message).toContain("is unexpected")
  })
})

describe("BrowserTokenInput", () => {
  it("accepts the defaults and full input", () => {
    accepts(BrowserTokenInput, {})
    accepts(BrowserTokenInput, {
      ttlSeconds: 5,
      scopes: ["events", "state", "history", "inputs"],
      events: times(64, (i) => `type_${i}`),
      redact: ["usage.cost"],
      subject: "s".repeat(200)
    })
    accepts(BrowserTokenInput, { ttlSeconds: 3600 })
  })

  it("refuses out-of-range values", () => {
    for (const ttlSeconds of [4, 3601, 10.5]) expect(refuses(BrowserTokenInput, { ttlSeconds })).toContain("ttlSeconds")
    expect(refuses(BrowserTokenInput, { events: times(65, (i) => `t${i}`) })).toContain("events")
    expect(refuses(BrowserTokenInput, { subject: "s".repeat(201) })).toContain("subject")
    expect(refuses(BrowserTokenInput, { scopes: ["admin"] })).toContain("scopes")
    expect(refuses(BrowserTokenInput, { redact: ["usage.tokens"] })).toContain("redact")
  })
})

describe("ScheduleInput", () => {
  it("takes exactly one of text or code", () => {
    accepts(ScheduleInput, { text: "standup", everySeconds: 86400 })
    accepts(ScheduleInput, { code: "await tools.report()", inSeconds: 30 })
    const neither = refuses(ScheduleInput, { inSeconds: 30 })
    expect(neither).toContain("text")
    expect(neither).toContain("exactly one of text or code")
    expect(refuses(ScheduleInput, { text: "a", code: "b" })).toContain("exactly one of text or code")
  })

  it("takes at as an ISO time or epoch milliseconds", () => {
    accepts(ScheduleInput, { text: "a", at: "2030-01-01T09:00:00Z" })
    accepts(ScheduleInput, { text: "a", at: 1893488400000 })
    expect(refuses(ScheduleInput, { text: "a", at: "next tuesday" })).toContain("at")
    expect(refuses(ScheduleInput, { text: "a", at: "2030-01-01T09:00:00Z", inSeconds: 5 })).toContain("inSeconds")
  })

  it("repeats at least every 60 seconds", () => {
    accepts(ScheduleInput, { text: "a", everySeconds: 60 })
    expect(refuses(ScheduleInput, { text: "a", everySeconds: 59 })).toContain("everySeconds")
    expect(refuses(ScheduleInput, { text: "a", everySeconds: 90.5 })).toContain("everySeconds")
  })
})

describe("WebhookEndpointInput", () => {
  const endpoint = { url: "https://app.example.com/hooks", events: ["run.completed", "billing.topup.no_card"] }

  it("accepts url, events and a description", () => {
    accepts(WebhookEndpointInput, endpoint)
    accepts(WebhookEndpointInput, { ...endpoint, description: "d".repeat(500) })
  })

  it("refuses other fields, long descriptions, unknown events and plain http", () => {
    expect(refuses(WebhookEndpointInput, { ...endpoint, secret: "whsec_x" })).toContain("secret")
    expect(refuses(WebhookEndpointInput, { ...endpoint, description: "d".repeat(501) })).toContain("description")
    expect(refuses(WebhookEndpointInput, { ...endpoint, events: ["run.created"] })).toContain("events")
    expect(refuses(WebhookEndpointInput, { ...endpoint, url: "ftp://app.example.com/hooks" })).toContain("url")
    expect(refuses(WebhookEndpointInput, { events: endpoint.events })).toContain("url")
  })

  it("takes the same fields, all optional, as an update", () => {
    accepts(WebhookEndpointUpdate, {})
    accepts(WebhookEndpointUpdate, { description: "renamed" })
    expect(refuses(WebhookEndpointUpdate, { enabled: false })).toContain("enabled")
  })
})

describe("AnswerInputs", () => {
  it("takes 1 to 100 answers, each naming its input", () => {
    accepts(AnswerInputs, { answers: [{ id: "in_1", action: "accept", content: { answers: { "Ship?": "Yes" } } }] })
    accepts(AnswerInputs, { answers: times(100, (i) => ({ id: `in_${i}`, action: "decline" })) })
    expect(refuses(AnswerInputs, { answers: [] })).toContain("answers")
    expect(refuses(AnswerInputs, { answers: times(101, (i) => ({ id: `in_${i}`, action: "cancel" })) })).toContain(
      "at most 100"
    )
    expect(refuses(AnswerInputs, { answers: [{ action: "accept" }] })).toContain("id")
  })
})
