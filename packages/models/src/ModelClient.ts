/**
 * One model call as a `Stream` of typed events. Interrupting the stream
 * aborts the request. Transient failures (rate limit, overload, 5xx, broken
 * connection) are retried with backoff that honours Retry-After, and each
 * retry is announced in the stream (`auto_retry_start`/`auto_retry_end`) so
 * a consumer can take back what the failed attempt had streamed. Every
 * finished response has its usage and cost recorded.
 */
import { Egress, EgressError } from "@agent-runtime/egress"
import { PersistenceError, Storable } from "@agent-runtime/store"
import { Context as EffectContext, Duration, Effect, Exit, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Credentials, type Target } from "./Credentials.ts"
import * as ChatCompletions from "./internal/chatCompletions.ts"
import * as Pi from "./internal/pi.ts"
import {
  ContextOverflow,
  isTransient,
  ModelEndpointRefused,
  type ModelError,
  ModelKeyInvalid,
  type ModelKeyMissing,
  ModelNetworkError,
  ModelOverloaded,
  ModelRateLimited,
  ModelRequestRefused,
  type UnknownModel
} from "./ModelError.ts"
import { UsageLog } from "./UsageLog.ts"

export type AssistantMessage = Pi.AssistantMessage
export type Context = Pi.Context
export type Message = Pi.Message
export type ThinkingLevel = Pi.ThinkingLevel
export type Tool = Pi.Tool

export type ModelEvent =
  | Exclude<Pi.AssistantMessageEvent, { readonly type: "error" }>
  | {
    readonly type: "auto_retry_start"
    readonly attempt: number
    readonly maxAttempts: number
    readonly delayMs: number
    readonly errorMessage: string
  }
  | { readonly type: "auto_retry_end"; readonly success: boolean; readonly attempt: number }

/** What `respond` tells as a response comes: every event but the final message, which is its result. */
export type ResponseEvent = Exclude<ModelEvent, { readonly type: "done" }>

export interface Call {
  readonly tenantId: string
  readonly keyScope: Option.Option<string>
  /** `provider/model-id`. */
  readonly model: string
  readonly context: Pi.Context
  readonly reasoning?: Pi.ThinkingLevel | undefined
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
  /** Non-secret headers, sent after the key scope's or custom provider's own. */
  readonly modelHeaders?: Record<string, string> | undefined
  /**
   * The provider, model and key already resolved for `model` (see `resolve`): a turn resolves them once for
   * all its calls, so a provider changed meanwhile applies from the next turn. Resolved per call when absent.
   */
  readonly target?: Target | undefined
  /**
   * The tool the model must call (see `forcedChoice`), where its provider's protocol can say so; a provider
   * that cannot is asked without it, and the call says nothing different.
   */
  readonly forceTool?: string | undefined
  /** What the fields above do not say: the gateway's tool choice, thinking budgets and payload edits. */
  readonly options?: Pick<Pi.SimpleStreamOptions, "toolChoice" | "thinkingBudgets" | "onPayload"> | undefined
  readonly usage: {
    readonly kind: "response" | "compaction"
    readonly agentId?: string | undefined
    readonly requestId?: string | undefined
    readonly subject?: string | undefined
    readonly actor?: string | undefined
    readonly context?: Record<string, unknown> | undefined
  }
}

export interface RetryPolicy {
  readonly maxAttempts: number
  readonly baseDelay: Duration.Duration
  readonly maxDelay: Duration.Duration
  /** A provider asking for a longer wait than this fails the call instead. */
  readonly maxRetryAfter: Duration.Duration
}

export const defaultRetryPolicy: RetryPolicy = {
  maxAttempts: 4,
  baseDelay: Duration.seconds(1),
  maxDelay: Duration.seconds(30),
  maxRetryAfter: Duration.seconds(60)
}

interface LastResponse {
  readonly status: number
  readonly retryAfter: number | undefined
}

const parseRetryAfter = (header: string | null): number | undefined => {
  if (header === null) return undefined
  const seconds = Number(header)
  if (Number.isFinite(seconds)) return Math.max(0, seconds)
  const date = Date.parse(header)
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000)
}

/** Provider messages can quote the key ("Incorrect API key provided: sk-...abcd"); never pass it on. */
const redact = (text: string, secrets: ReadonlyArray<string>) => {
  let out = text
  for (const secret of secrets) if (secret.length > 0) out = out.split(secret).join("[redacted]")
  return out.replace(/(api key provided: )\S+/gi, "$1[redacted]").slice(0, 500)
}

const classify = (
  target: Target,
  message: Pi.AssistantMessage,
  last: LastResponse | undefined,
  refused: EgressError.EgressError | undefined
): ModelError => {
  const provider = target.provider
  const detail = redact(
    message.errorMessage ?? "model call failed",
    Option.toArray(Option.map(target.apiKey, Redacted.value))
  )
  if (refused !== undefined) return new ModelEndpointRefused({ provider, detail: refused.message })
  if (last === undefined || last.status < 400) return new ModelNetworkError({ provider, detail })
  const retryAfter = last.retryAfter === undefined ? {} : { retryAfter: last.retryAfter }
  if (last.status === 401 || last.status === 403) return new ModelKeyInvalid({ provider, status: last.status, detail })
  if (last.status === 429) return new ModelRateLimited({ provider, detail, ...retryAfter })
  if (last.status >= 500) return new ModelOverloaded({ provider, status: last.status, detail, ...retryAfter })
  if (Pi.isContextOverflow(message, target.model.contextWindow)) return new ContextOverflow({ provider, detail })
  return new ModelRequestRefused({ provider, status: last.status, detail })
}

/**
 * How deep a tool call's arguments may nest. Deeper arguments are cut one level below (see `kept`), so the
 * turn still sees that they were too deep and answers the call with an error instead of running it.
 */
export const maxArgumentDepth = 64

/** How deep `value` nests (a scalar is 0), counting no further than `limit + 1`; no recursion. */
export const depthOf = (value: unknown, limit = maxArgumentDepth): number => {
  let deepest = 0
  const stack: Array<readonly [unknown, number]> = [[value, 0]]
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!
    if (item === null || typeof item !== "object") continue
    deepest = Math.max(deepest, depth + 1)
    if (deepest > limit) return deepest
    for (const inner of Object.values(item)) stack.push([inner, depth + 1])
  }
  return deepest
}

/** `value` with whatever nests below `depth` levels replaced by a string saying so. */
const cut = (value: unknown, depth: number): unknown => {
  if (value === null || typeof value !== "object") return value
  if (depth === 0) return "[nested too deeply]"
  if (Array.isArray(value)) return value.map((item) => cut(item, depth - 1))
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, cut(item, depth - 1)]))
}

/** What a tool call id may be: printable ASCII, short enough for the journal's keys (and every provider). */
const keptToolCallId = /^[\x21-\x7e]{1,256}$/

/** Tool names are at most 64 characters at every provider; a longer one names no tool either way. */
const maxToolNameLength = 256

/**
 * A finished response as the runtime keeps it, whatever the provider sent: its text storable (see
 * `Storable`), each tool call's id printable, bounded and unique within the message (another id is made from
 * a hash where not), its name bounded, its arguments nested at most one level deeper than
 * `maxArgumentDepth`. The same message when nothing needs changing.
 */
const kept = (message: Pi.AssistantMessage): Pi.AssistantMessage => {
  const ids = new Set<string>()
  let changed = false
  // Depth first: the storable check walks the arguments, which must be bounded by then.
  const content = message.content.map((part, index) => {
    if (part.type !== "toolCall") return part
    let id = part.id
    if (!keptToolCallId.test(id) || ids.has(id)) {
      id = `call_${Crypto.createHash("sha256").update(`${index}:${id}`).digest("hex").slice(0, 24)}`
    }
    ids.add(id)
    const name = part.name.length > maxToolNameLength ? part.name.slice(0, maxToolNameLength) : part.name
    const deep = depthOf(part.arguments, maxArgumentDepth + 1) > maxArgumentDepth + 1
    if (id === part.id && name === part.name && !deep) return part
    changed = true
    return { ...part, id, name, arguments: deep ? cut(part.arguments, maxArgumentDepth + 1) as any : part.arguments }
  })
  return Storable.value(changed ? { ...message, content } : message)
}

/**
 * How each protocol forces a call of the tool `name`, when it can: Anthropic by name unless thinking is on
 * (it refuses a forced tool with extended thinking), the OpenAI protocols and Mistral by name, Google only
 * as "any tool", so only when `name` is the only tool. The protocol library types its option as auto or none
 * but sends each protocol's own value as given.
 */
export const forcedChoice = (
  api: string,
  name: string,
  context: Pi.Context,
  reasoning: Pi.ThinkingLevel | undefined
): unknown => {
  const onlyTool = context.tools?.length === 1 && context.tools[0]!.name === name
  switch (api) {
    case "anthropic-messages":
      return reasoning === undefined ? { type: "tool", name } : undefined
    case "openai-responses":
      return { type: "function", name }
    case "openai-completions":
    case "mistral-conversations":
      return { type: "function", function: { name } }
    case "google-generative-ai":
      return onlyTool ? "any" : undefined
    default:
      return undefined
  }
}

export interface Service {
  /** The provider, model (with its limits) and key a call for `model` would use. */
  readonly resolve: (
    call: Pick<Call, "tenantId" | "keyScope" | "model">
  ) => Effect.Effect<Target, UnknownModel | ModelKeyMissing | PersistenceError.PersistenceError>
  /**
   * One model response for `call`, retrying transient failures: its events go to `onEvent` as they come
   * (the final message excepted), and the finished message is the result. PersistenceError when the
   * credentials could not be read or the response's usage could not be recorded; it is not retried.
   */
  readonly respond: (
    call: Call,
    onEvent: (event: ResponseEvent) => Effect.Effect<void>,
    policy?: RetryPolicy
  ) => Effect.Effect<Pi.AssistantMessage, ModelError | PersistenceError.PersistenceError>
  /** The finished message of a call. */
  readonly complete: (
    call: Call,
    policy?: RetryPolicy
  ) => Effect.Effect<Pi.AssistantMessage, ModelError | PersistenceError.PersistenceError>
}

export class ModelClient extends EffectContext.Tag("@agent-runtime/models/ModelClient")<ModelClient, Service>() {}

export const make = Effect.gen(function*() {
  const egress = yield* Egress.Egress
  const credentials = yield* Credentials
  const usage = yield* UsageLog

  const headersFor = (target: Target, modelHeaders: Record<string, string> | undefined) => {
    const headers: Record<string, string | null> = { ...target.headers, ...modelHeaders }
    if (Option.isNone(target.apiKey)) {
      // A gateway at the base URL holds the key: send no auth header at all.
      headers.authorization = null
      headers["x-api-key"] = null
    } else if (target.bearer) {
      headers.authorization = `Bearer ${Redacted.value(target.apiKey.value)}`
      headers["x-api-key"] = null
    }
    return headers
  }

  const apiKeyFor = (target: Target) =>
    Option.isNone(target.apiKey) ? "unused" : target.bearer ? undefined : Redacted.value(target.apiKey.value)

  /**
   * One request to the provider, its events handed to `onEvent` as they come: the finished message, or its
   * failure classified, not retried. A plain loop over the provider's events rather than a stream: a turn's
   * response is its busiest path, and each stream stage costs every event a few hundred runtime steps.
   */
  const attempt = (
    target: Target,
    call: Call,
    attemptNumber: number,
    onEvent: (event: ResponseEvent) => Effect.Effect<void>
  ): Effect.Effect<Pi.AssistantMessage, ModelError | PersistenceError.PersistenceError> =>
    Effect.suspend(() => {
      const controller = new AbortController()
      // A finished response has nothing left to cut (and an abort builds an error with its stack each time).
      // Not a scope's finalizer: a scope and a finalizer (which copies and restores the fiber's refs) cost
      // every response about 25 runtime steps.
      const cut = (exit: Exit.Exit<unknown, unknown>) =>
        Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => controller.abort())
      return Effect.onExit(
        Effect.gen(function*() {
          let last: LastResponse | undefined
          let refused: EgressError.EgressError | undefined
          const heard = (status: number, headers: Headers) => {
            last = { status, retryAfter: parseRetryAfter(headers.get("retry-after")) }
          }
          const refusedBy = (error: unknown) => {
            if (error instanceof EgressError.EgressError) refused = error
            throw error
          }
          const fetch: typeof globalThis.fetch = (input, init) =>
            egress.fetchFunction(input, init).then((response) => {
              heard(response.status, response.headers)
              return response
            }, refusedBy)
          // The chat-completions wire, every turn's on most providers, skips the OpenAI SDK (see chatCompletions).
          const openAIClient = ChatCompletions.client(
            (url, options) => egress.requestFunction(url, options).catch(refusedBy),
            heard
          )
          const apiKey = apiKeyFor(target)
          const toolChoice = call.forceTool === undefined
            ? undefined
            : forcedChoice(target.model.api, call.forceTool, call.context, call.reasoning)
          const events = Pi.streamSimple(target.model, call.context, {
            ...call.options,
            ...(toolChoice === undefined
              ? {}
              : { toolChoice: toolChoice as NonNullable<Pi.SimpleStreamOptions["toolChoice"]> }),
            ...(apiKey === undefined ? {} : { apiKey }),
            headers: headersFor(target, call.modelHeaders),
            fetch,
            openAIClient,
            signal: controller.signal,
            maxRetries: 0,
            ...(call.reasoning === undefined ? {} : { reasoning: call.reasoning }),
            ...(call.maxTokens === undefined ? {} : { maxTokens: call.maxTokens }),
            ...(call.temperature === undefined ? {} : { temperature: call.temperature })
          })[Symbol.asyncIterator]()
          const networkError = (error: unknown) =>
            new ModelNetworkError({ provider: target.provider, detail: String(error) })
          while (true) {
            const next = yield* Effect.tryPromise({ try: () => events.next(), catch: networkError })
            if (next.done === true) return yield* networkError("the response ended without a final message")
            const event = next.value
            if (event.type === "error") return yield* Effect.fail(classify(target, event.error, last, refused))
            if (event.type === "done") {
              yield* record(target, call, event.message)
              if (attemptNumber > 1) yield* onEvent({ type: "auto_retry_end", success: true, attempt: attemptNumber })
              return kept(event.message)
            }
            // The finished call, told as it ends, is told as it will be kept.
            yield* onEvent(
              event.type === "toolcall_end"
                ? { ...event, toolCall: kept(event.partial).content[event.contentIndex] as typeof event.toolCall }
                : event
            )
          }
        }),
        cut
      )
    })

  const record = (target: Target, call: Call, message: Pi.AssistantMessage) =>
    usage.record({
      tenantId: call.tenantId,
      agentId: call.usage.agentId,
      requestId: call.usage.requestId,
      subject: call.usage.subject,
      actor: call.usage.actor,
      context: call.usage.context,
      keyScope: Option.getOrUndefined(target.keyScope),
      keySource: target.source,
      provider: target.provider,
      model: target.model.id,
      kind: call.usage.kind,
      input: message.usage.input,
      output: message.usage.output,
      cacheRead: message.usage.cacheRead,
      cacheWrite: message.usage.cacheWrite,
      reasoning: message.usage.reasoning,
      costUsd: message.usage.cost.total,
      costSource: "catalog"
    })

  const delayOf = (
    policy: RetryPolicy,
    error: ModelError,
    attemptNumber: number
  ): Option.Option<Duration.Duration> => {
    const backoff = Duration.min(
      Duration.times(policy.baseDelay, 2 ** (attemptNumber - 1)),
      policy.maxDelay
    )
    const asked = "retryAfter" in error && error.retryAfter !== undefined
      ? Option.some(Duration.seconds(error.retryAfter))
      : Option.none()
    if (Option.isSome(asked) && Duration.greaterThan(asked.value, policy.maxRetryAfter)) return Option.none()
    return Option.some(Option.getOrElse(asked, () => backoff))
  }

  const withRetries = (
    target: Target,
    call: Call,
    policy: RetryPolicy,
    attemptNumber: number,
    onEvent: (event: ResponseEvent) => Effect.Effect<void>
  ): Effect.Effect<Pi.AssistantMessage, ModelError | PersistenceError.PersistenceError> =>
    attempt(target, call, attemptNumber, onEvent).pipe(
      // A usage record that failed ends the call as it is: the response was had, there is nothing to retry.
      Effect.catchIf((error): error is ModelError => !(error instanceof PersistenceError.PersistenceError), (error) => {
        const delay = isTransient(error) && attemptNumber < policy.maxAttempts
          ? delayOf(policy, error, attemptNumber)
          : Option.none()
        if (Option.isNone(delay)) {
          return Effect.zipRight(
            attemptNumber > 1
              ? onEvent({ type: "auto_retry_end", success: false, attempt: attemptNumber })
              : Effect.void,
            Effect.fail(error)
          )
        }
        return onEvent({
          type: "auto_retry_start",
          attempt: attemptNumber,
          maxAttempts: policy.maxAttempts,
          delayMs: Duration.toMillis(delay.value),
          errorMessage: error.message
        }).pipe(
          Effect.zipRight(Effect.sleep(delay.value)),
          Effect.zipRight(withRetries(target, call, policy, attemptNumber + 1, onEvent))
        )
      })
    )

  const resolve = (call: Pick<Call, "tenantId" | "keyScope" | "model">) =>
    credentials.resolve({ tenantId: call.tenantId, keyScope: call.keyScope, model: call.model })

  const respond = (
    call: Call,
    onEvent: (event: ResponseEvent) => Effect.Effect<void>,
    policy: RetryPolicy = defaultRetryPolicy
  ) =>
    call.target === undefined
      ? Effect.flatMap(resolve(call), (target) => withRetries(target, call, policy, 1, onEvent))
      : withRetries(call.target, call, policy, 1, onEvent)

  const complete = (call: Call, policy?: RetryPolicy) => respond(call, () => Effect.void, policy)

  return ModelClient.of({ resolve, respond, complete })
})

export const layer: Layer.Layer<ModelClient, never, Egress.Egress | Credentials | UsageLog> = Layer.effect(
  ModelClient,
  make
)
