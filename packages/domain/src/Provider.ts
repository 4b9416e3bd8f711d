/**
 * Model providers and their keys: the tenant's keys for built-in providers,
 * the tenant's or a key scope's own (custom) providers, key scopes, and the
 * non-secret headers an agent adds to its model calls.
 */
import { Schema } from "effect"
import { StringMap, Timestamp } from "./Common.ts"
import { HttpUrl, jsonBytes, KiB } from "./Validation.ts"

/** model: LLM provider; search: web search API used by web_search; fetch: page renderer used by web_fetch. */
export const ProviderKind = Schema.Literal("model", "search", "fetch")
export type ProviderKind = typeof ProviderKind.Type

/** tenant = set by the tenant, admin = set by the operator, platform = platform key billed to prepaid credit. */
export const KeySource = Schema.Literal("tenant", "admin", "platform")
export type KeySource = typeof KeySource.Type

export class KeyStatus extends Schema.Class<KeyStatus>("KeyStatus")({
  provider: Schema.String,
  source: KeySource,
  last4: Schema.optional(Schema.String),
  setAt: Schema.optional(Timestamp)
}) {}

/**
 * A provider API key: 1 to 4096 characters without whitespace, and
 * printable ASCII, since it travels in a header: a key undici cannot send
 * (a control character, a letter outside Latin-1) was stored and then
 * failed every call as an unreachable provider.
 */
export const ApiKey = Schema.String.pipe(
  Schema.minLength(1, { message: () => "must be at least 1 character" }),
  Schema.maxLength(4096, { message: () => "must be at most 4096 characters" }),
  Schema.pattern(/^[\x21-\x7e]*$/, {
    message: () => "must be printable ASCII without whitespace (it is sent as a header)"
  })
).annotations({ description: "1 to 4096 printable ASCII characters without whitespace" })
export type ApiKey = typeof ApiKey.Type

/** RFC 9110 token: what a header name may consist of. */
const headerName = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** RFC 9110 field value (visible ASCII, Latin-1, spaces and tabs): what undici sends; line breaks and NUL would break the header line. */
const headerValue = /^[\t\x20-\x7e\x80-\xff]*$/

/** Headers that would change how a call travels rather than what it says; undici refuses most of them. */
const transportHeaders: ReadonlySet<string> = new Set([
  "host",
  "content-length",
  "connection",
  "transfer-encoding",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "expect"
])

/**
 * A provider's or key scope entry's own headers, sent on each call as
 * given (sealed like the key, so credentials are fine): each must be a
 * header line that can be sent, and none may be a transport header. Saved
 * unchecked, one bad header failed every later call as an unreachable
 * provider.
 */
export const SentHeaders = StringMap.pipe(
  Schema.filter((headers) => {
    for (const [name, value] of Object.entries(headers)) {
      if (!headerName.test(name)) return { path: [name], message: `"${name}" is not a valid header name` }
      if (transportHeaders.has(name.toLowerCase())) return { path: [name], message: `"${name}" is a transport header` }
      if (!headerValue.test(value)) {
        return {
          path: [name],
          message: "header values must be printable (no line breaks, NUL or characters beyond Latin-1)"
        }
      }
    }
    return true
  })
)

/**
 * The API a custom provider's server speaks:
 * openai-completions (POST <baseUrl>/chat/completions),
 * openai-responses (POST <baseUrl>/responses),
 * anthropic-messages (POST <baseUrl>/v1/messages).
 */
export const CustomProviderType = Schema.Literal("openai-completions", "openai-responses", "anthropic-messages")
export type CustomProviderType = typeof CustomProviderType.Type

/** How the messages type sends the key: x-api-key (default) or bearer authorization. */
export const CustomProviderAuth = Schema.Literal("x-api-key", "bearer")
export type CustomProviderAuth = typeof CustomProviderAuth.Type

export const ModelInputKind = Schema.Literal("text", "image")
export type ModelInputKind = typeof ModelInputKind.Type

export const MaxTokensField = Schema.Literal("max_tokens", "max_completion_tokens")
export type MaxTokensField = typeof MaxTokensField.Type

export const ThinkingFormat = Schema.Literal(
  "openai",
  "openrouter",
  "deepseek",
  "together",
  "zai",
  "qwen",
  "qwen-chat-template"
)
export type ThinkingFormat = typeof ThinkingFormat.Type

/** Quirks of an OpenAI-compatible server. */
export class ModelCompat extends Schema.Class<ModelCompat>("ModelCompat")({
  supportsDeveloperRole: Schema.optional(Schema.Boolean),
  supportsUsageInStreaming: Schema.optional(Schema.Boolean.annotations({ description: "default true" })),
  supportsFinishReason: Schema.optional(Schema.Boolean),
  supportsReasoningEffort: Schema.optional(Schema.Boolean),
  maxTokensField: Schema.optional(MaxTokensField),
  thinkingFormat: Schema.optional(ThinkingFormat)
}) {}

const price = Schema.Number.pipe(Schema.nonNegative()).annotations({ description: "USD per million tokens" })

/** USD per million tokens; a model without pricing is free. */
export class ModelPricing extends Schema.Class<ModelPricing>("ModelPricing")({
  input: price,
  output: price,
  cacheRead: Schema.optional(price),
  cacheWrite: Schema.optional(price)
}) {}

/** Default output limit of a custom model: 8,192 tokens, or half of a smaller context window. */
export const defaultMaxOutputTokens = 8192

export class CustomModel extends Schema.Class<CustomModel>("CustomModel")({
  id: Schema.String.pipe(Schema.minLength(1)).annotations({
    description: "id on the server; agents name it <provider>/<id>"
  }),
  contextWindow: Schema.Int.pipe(Schema.positive()).annotations({
    description: "tokens; compaction keeps requests within it"
  }),
  maxOutputTokens: Schema.optional(
    Schema.Int.pipe(Schema.positive()).annotations({
      description: "default 8,192, or half of a smaller context window"
    })
  ),
  input: Schema.optional(Schema.Array(ModelInputKind).annotations({ description: "default [text]" })),
  reasoning: Schema.optional(Schema.Boolean.annotations({ description: "whether thinkingLevel applies" })),
  pricing: Schema.optional(ModelPricing),
  compat: Schema.optional(ModelCompat)
}) {}

/** A tenant's or key scope's own provider as stored; headers are names only, never values. */
export class CustomProvider extends Schema.Class<CustomProvider>("CustomProvider")({
  type: CustomProviderType,
  baseUrl: Schema.String,
  auth: CustomProviderAuth,
  headers: Schema.optional(Schema.Array(Schema.String).annotations({ description: "header names, never values" })),
  models: Schema.Array(CustomModel)
}) {}

export class Provider extends Schema.Class<Provider>("Provider")({
  id: Schema.String,
  kind: Schema.optional(ProviderKind),
  models: Schema.Int.annotations({ description: "number of models" }),
  apiKey: Schema.optional(Schema.Boolean.annotations({ description: "whether one API key suffices" })),
  requires: Schema.optional(Schema.String.annotations({ description: "what it needs instead of an API key" })),
  key: Schema.NullOr(KeyStatus),
  custom: Schema.optional(CustomProvider)
}) {}

/** Body of PUT /v1/providers/{name} and PUT /v1/key-scopes/{scope}/model-providers/{name}. */
export class CustomProviderInput extends Schema.Class<CustomProviderInput>("CustomProviderInput")({
  type: CustomProviderType,
  baseUrl: HttpUrl.annotations({
    description: "API root, public and https; with /v1 for the openai types, without for anthropic-messages"
  }),
  apiKey: Schema.optional(
    Schema.NullOr(ApiKey).annotations({ description: "omitted keeps the stored key; null removes it" })
  ),
  headers: Schema.optional(
    Schema.NullOr(SentHeaders).annotations({
      description: "sent on each call, sealed like the key; omitted keeps, null removes"
    })
  ),
  auth: Schema.optional(
    CustomProviderAuth.annotations({
      description: "anthropic-messages only; saving again without it resets to x-api-key"
    })
  ),
  models: Schema.Array(CustomModel).pipe(
    Schema.minItems(1, { message: () => "must list at least 1 model" }),
    Schema.maxItems(200, { message: () => "must list at most 200 models" }),
    Schema.filter((models) => {
      const seen = new Set<string>()
      for (const model of models) {
        if (seen.has(model.id)) return `model id "${model.id}" is listed twice`
        seen.add(model.id)
      }
      return true
    })
  ).annotations({ description: "1 to 200 models" })
}) {}

/** Body of PUT /v1/key-scopes/{scope}/providers/{provider} (and of the tenant's own key). */
export class KeyInput extends Schema.Class<KeyInput>("KeyInput")({
  apiKey: ApiKey,
  verify: Schema.optional(
    Schema.Boolean.annotations({ description: "false stores without checking with the provider" })
  )
}) {}

export const KeyVerificationStatus = Schema.Literal("valid", "unverified", "invalid")
export type KeyVerificationStatus = typeof KeyVerificationStatus.Type

export class KeyVerification extends Schema.Class<KeyVerification>("KeyVerification")({
  status: KeyVerificationStatus,
  detail: Schema.optional(Schema.String)
}) {}

export class KeySet extends Schema.Class<KeySet>("KeySet")({
  provider: Schema.String,
  last4: Schema.String,
  verification: KeyVerification
}) {}

/** One provider of a key scope. */
export class KeyScopeEntry extends Schema.Class<KeyScopeEntry>("KeyScopeEntry")({
  provider: Schema.String,
  setAt: Timestamp,
  last4: Schema.optional(Schema.String.annotations({ description: "absent for an entry without a key" })),
  baseUrl: Schema.optional(Schema.String),
  region: Schema.optional(Schema.String),
  headers: Schema.optional(Schema.Array(Schema.String).annotations({ description: "header names only" }))
}) {}

export class KeyScope extends Schema.Class<KeyScope>("KeyScope")({
  scope: Schema.String,
  providers: Schema.Array(KeyScopeEntry)
}) {}

/** A key scope's entry for one provider; no other properties are allowed. */
export class KeyScopeEntryInput extends Schema.Class<KeyScopeEntryInput>("KeyScopeEntryInput")(
  Schema.Struct({
    apiKey: Schema.optional(
      ApiKey.annotations({
        description:
          "for the bedrock-type provider a bearer-style API key; leave out for a gateway at baseUrl that holds the key"
      })
    ),
    baseUrl: Schema.optional(HttpUrl.annotations({ description: "HTTPS endpoint replacing the provider's API root" })),
    headers: Schema.optional(SentHeaders.annotations({ description: "sent on each call, sealed" })),
    region: Schema.optional(
      Schema.String.annotations({ description: "bedrock-type only; read from the base URL when left out" })
    )
  }).annotations({ parseOptions: { onExcessProperty: "error" } })
) {}

const forbiddenHeaders: ReadonlySet<string> = new Set([
  "authorization",
  "x-api-key",
  "x-goog-api-key",
  "cf-aig-authorization",
  "chatgpt-account-id",
  "x-agent-runtime-identity",
  // transport headers
  "host",
  "content-length",
  "connection",
  "transfer-encoding",
  "keep-alive",
  "upgrade",
  "te",
  "trailer"
])

const forbiddenHeaderPrefixes: ReadonlyArray<string> = ["x-amz-", "proxy-"]

/**
 * Whether a header may not be set through modelHeaders (case-insensitive):
 * credentials, the runtime's identity header, `x-amz-*` and transport headers.
 */
export const isForbiddenModelHeader = (name: string): boolean => {
  const lower = name.toLowerCase()
  return forbiddenHeaders.has(lower) || forbiddenHeaderPrefixes.some((prefix) => lower.startsWith(prefix))
}

/**
 * Non-secret headers sent on each model call after a key scope entry's
 * headers: at most 20 headers and 8 KB (of JSON), never credentials or
 * transport headers.
 */
export const ModelHeaders = StringMap.pipe(
  Schema.filter((headers) => {
    const names = Object.keys(headers)
    if (names.length > 20) return `at most 20 headers, got ${names.length}`
    for (const name of names) {
      if (!headerName.test(name)) return { path: [name], message: `"${name}" is not a valid header name` }
      if (isForbiddenModelHeader(name)) {
        return { path: [name], message: `header "${name}" may not be set through modelHeaders` }
      }
      if (!headerValue.test(headers[name])) {
        return {
          path: [name],
          message: "header values must be printable (no line breaks, NUL or characters beyond Latin-1)"
        }
      }
    }
    return jsonBytes(headers) <= 8 * KiB || "at most 8 KB of headers (as JSON)"
  }, { jsonSchema: { maxProperties: 20 } })
).annotations({
  identifier: "ModelHeaders",
  description:
    "non-secret headers sent on each model call; at most 20 headers and 8 KB; no credentials or transport headers"
})
export type ModelHeaders = typeof ModelHeaders.Type
