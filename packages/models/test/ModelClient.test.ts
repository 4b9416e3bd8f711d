/**
 * Model calls through the real stack: the protocol library over real HTTP
 * to the fake upstream speaking each of the three protocols, keys sealed in
 * the embedded PostgreSQL, usage recorded there.
 */
import { BillingMigrations, Rates } from "@agent-runtime/billing"
import { Provider } from "@agent-runtime/domain"
import { Egress, Resolver } from "@agent-runtime/egress"
import {
  Catalog,
  Credentials,
  CustomProviders,
  Keys,
  KeyScopes,
  ModelClient,
  type ModelClient as ModelClientModule,
  ModelsMigrations,
  UsageLog
} from "@agent-runtime/models"
import { Database, DatabaseHealth, PersistenceError, SealedSecret } from "@agent-runtime/store"
import { FakeUpstream, TestDatabase } from "@agent-runtime/testing"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Either, Fiber, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"

const tenantId = "tn_models"
const apiKey = "sk-test-0123456789abcdef"

const layerFor = (databaseUrl: string, egress: { allowPrivate: boolean; resolver?: Layer.Layer<Resolver.Resolver> }) =>
  ModelClient.layer.pipe(
    Layer.provideMerge(Credentials.layer),
    Layer.provideMerge(Layer.mergeAll(Keys.layer, KeyScopes.layer, CustomProviders.layer)),
    Layer.provideMerge(Layer.mergeAll(Catalog.layer, UsageLog.layer)),
    Layer.provideMerge(Rates.layerConfig),
    Layer.provideMerge(Layer.mergeAll(
      Egress.layer({ allowPrivate: egress.allowPrivate }).pipe(Layer.provide(egress.resolver ?? Resolver.layer)),
      SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))
    )),
    Layer.provideMerge(Database.layerClient(Redacted.make(databaseUrl), {
      migrations: [
        TestDatabase.tenantsStandIn,
        WebhookMigrations.migrations,
        BillingMigrations.migrations,
        ModelsMigrations.migrations
      ]
    }))
  )

const withTenant = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`INSERT INTO tenants (id, name) VALUES (${tenantId}, 'models') ON CONFLICT DO NOTHING`
)

type Services = Layer.Layer.Success<ReturnType<typeof layerFor>>

/** Runs `body` with a fake upstream, a fresh database holding the test tenant, and the model layer on it. */
const scenario = <A, E>(
  body: (upstream: FakeUpstream.FakeUpstream) => Effect.Effect<A, E, Services>,
  egress: { allowPrivate: boolean; resolver?: Layer.Layer<Resolver.Resolver> } = { allowPrivate: true }
) =>
  Effect.gen(function*() {
    const upstream = yield* FakeUpstream.start()
    const databaseUrl = yield* TestDatabase.make
    return yield* Effect.zipRight(withTenant, body(upstream)).pipe(Effect.provide(layerFor(databaseUrl, egress)))
  })

const baseUrlOf = (url: string, type: Provider.CustomProviderType) => type === "anthropic-messages" ? url : `${url}/v1`

const saveProvider = (
  url: string,
  type: Provider.CustomProviderType,
  extra: Partial<Provider.CustomProviderInput> = {}
) =>
  Effect.flatMap(CustomProviders.CustomProviders, (providers) =>
    providers.put(
      tenantId,
      "",
      "fake",
      new Provider.CustomProviderInput({
        type,
        baseUrl: baseUrlOf(url, type),
        apiKey,
        models: [
          new Provider.CustomModel({
            id: "m1",
            contextWindow: 100_000,
            reasoning: true,
            pricing: new Provider.ModelPricing({ input: 3, output: 15 })
          })
        ],
        ...extra
      })
    ))

const tools = [
  {
    name: "get_weather",
    description: "weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
  },
  {
    name: "get_time",
    description: "time in a zone",
    parameters: { type: "object", properties: { tz: { type: "string" } }, required: ["tz"] }
  }
] as unknown as ReadonlyArray<ModelClientModule.Tool>

const call = (overrides: Partial<ModelClientModule.Call> = {}): ModelClientModule.Call => ({
  tenantId,
  keyScope: Option.none(),
  model: "fake/m1",
  context: { messages: [{ role: "user", content: "weather and time?", timestamp: Date.now() }], tools: [...tools] },
  reasoning: "medium",
  usage: { kind: "response", agentId: "client_test", requestId: "req_1" },
  ...overrides
})

const fast: ModelClientModule.RetryPolicy = {
  maxAttempts: 3,
  baseDelay: Duration.millis(50),
  maxDelay: Duration.seconds(2),
  maxRetryAfter: Duration.seconds(5)
}

/** The events of a response, its final message last as the provider's `done` event. */
const collect = (options: ModelClientModule.Call) =>
  Effect.flatMap(ModelClient.ModelClient, (client) => {
    const events: Array<ModelClientModule.ModelEvent> = []
    return client.respond(options, (event) => Effect.sync(() => void events.push(event)), fast).pipe(
      Effect.map((message): ReadonlyArray<ModelClientModule.ModelEvent> => [
        ...events,
        { type: "done", reason: message.stopReason === "toolUse" ? "toolUse" : "stop", message }
      ]),
      Effect.either
    )
  })

const types: ReadonlyArray<Provider.CustomProviderType> = [
  "openai-completions",
  "openai-responses",
  "anthropic-messages"
]

describe.each(types)("%s", (type) => {
  it.scopedLive(
    "streams text, thinking and two parallel tool calls, and records usage and cost",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, type)
          upstream.script({
            thinking: "The user wants two facts.",
            text: "Let me look both up.",
            toolCalls: [
              { name: "get_weather", arguments: { city: "Paris" } },
              { name: "get_time", arguments: { tz: "Europe/Paris" } }
            ],
            usage: { input: 1200, output: 300, reasoning: 40 }
          })
          const result = yield* collect(call())
          expect(Either.isRight(result)).toBe(true)
          const events = Either.getOrThrow(result)
          const types_ = new Set(events.map((event) => event.type))
          for (const expected of ["start", "thinking_delta", "text_delta", "toolcall_delta", "toolcall_end", "done"]) {
            expect(types_).toContain(expected)
          }
          const done = events.find((event) => event.type === "done")!
          if (done.type !== "done") throw new Error("no done event")
          const message = done.message
          expect(message.stopReason).toBe("toolUse")
          const thinking = message.content.filter((part) => part.type === "thinking")
          expect(thinking.map((part) => part.type === "thinking" && part.thinking).join("")).toBe(
            "The user wants two facts."
          )
          const text = message.content.filter((part) => part.type === "text")
          expect(text.map((part) => part.type === "text" && part.text).join("")).toBe("Let me look both up.")
          const calls = message.content.flatMap((part) => part.type === "toolCall" ? [part] : [])
          expect(calls.map((part) => [part.name, part.arguments])).toEqual([
            ["get_weather", { city: "Paris" }],
            ["get_time", { tz: "Europe/Paris" }]
          ])
          expect(new Set(calls.map((part) => part.id)).size).toBe(2)
          expect(message.usage.output).toBe(300)
          expect(message.usage.input).toBeGreaterThan(0)

          // The request carried the key, the tools and a reasoning control.
          const [request] = upstream.requests().filter((recorded) => recorded.protocol !== "models")
          const auth = type === "anthropic-messages" ? request!.headers["x-api-key"] : request!.headers.authorization
          expect(auth).toBe(type === "anthropic-messages" ? apiKey : `Bearer ${apiKey}`)
          expect(JSON.stringify(request!.body)).toContain("get_weather")

          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<{
            provider: string
            model: string
            kind: string
            input: string
            output: string
            reasoning: string | null
            costUsd: number
            keySource: string
            agentId: string
            requestId: string
          }>`SELECT * FROM usage_records WHERE tenant_id = ${tenantId}`
          expect(row).toMatchObject({
            provider: "fake",
            model: "m1",
            kind: "response",
            keySource: "tenant",
            agentId: "client_test",
            requestId: "req_1"
          })
          expect(Number(row!.output)).toBe(300)
          expect(Number(row!.input)).toBe(message.usage.input)
          const expectedCost = (message.usage.input * 3 + message.usage.output * 15 + message.usage.cacheRead * 0) / 1e6
          expect(row!.costUsd).toBeCloseTo(expectedCost, 9)
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "retries a 429 after its Retry-After and announces the retry",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, type)
          upstream.script([{ error: { status: 429, retryAfter: 1, message: "slow down" } }, {
            text: "second time lucky"
          }])
          const started = Date.now()
          const events = Either.getOrThrow(
            yield* collect(call({ context: { messages: [{ role: "user", content: "hi", timestamp: 0 }] } }))
          )
          const elapsed = Date.now() - started
          const retry = events.find((event) => event.type === "auto_retry_start")
          expect(retry).toMatchObject({ type: "auto_retry_start", attempt: 1, delayMs: 1000 })
          expect(events.find((event) => event.type === "auto_retry_end")).toMatchObject({ success: true, attempt: 2 })
          expect(elapsed).toBeGreaterThanOrEqual(1000)
          const done = events.at(-1)!
          expect(done.type).toBe("done")
          expect(upstream.requests().filter((recorded) => recorded.protocol !== "models").length).toBe(2)
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "a response nobody expected is kept storable and bounded: NUL, lone surrogates, deep arguments, bad ids",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, type)
          const deep = `${"[".repeat(20_000)}1${"]".repeat(20_000)}`
          upstream.script({
            text: "a\u0000b\ud800",
            toolCalls: [
              { id: "call_same", name: "get_weather", arguments: { "ci\u0000ty": "Pa\udc00ris" } },
              { id: "call_same", name: "get_time", arguments: `{"tz":${deep}}` },
              { id: "x".repeat(3_000), name: "n".repeat(1_000), arguments: "[1, 2]" }
            ]
          })
          const events = Either.getOrThrow(yield* collect(call()))
          const done = events.at(-1)! as Extract<ModelClientModule.ModelEvent, { type: "done" }>
          const calls = done.message.content.flatMap((part) => part.type === "toolCall" ? [part] : [])
          expect(done.message.content.find((part) => part.type === "text")).toMatchObject({ text: "a\uFFFDb\uFFFD" })
          expect(calls).toHaveLength(3)
          // Anthropic's ids are its own, so only the ones the fake sent as given are checked for their form.
          expect(new Set(calls.map((part) => part.id)).size).toBe(3)
          for (const part of calls) expect(part.id).toMatch(/^[\x21-\x7e]{1,256}$/)
          expect(calls[0]!.arguments).toEqual({ "ci\uFFFDty": "Pa\uFFFDris" })
          // Cut one level below the bound, so the turn still sees they were too deep.
          expect(ModelClient.depthOf(calls[1]!.arguments)).toBe(ModelClient.maxArgumentDepth + 1)
          expect(calls[2]!.name).toHaveLength(256)
          // What watchers are told as each call ends is the call as kept.
          const ends = events.flatMap((event) => event.type === "toolcall_end" ? [event.toolCall] : [])
          expect(ends).toEqual(calls)
          expect(() => JSON.stringify(done.message)).not.toThrow()
          expect(JSON.stringify(done.message)).not.toMatch(/\\u0000|\\ud[89a-f]/)
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "replays a history as its protocol says, whoever wrote it, and leaves the history as it was",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, type)
          // A response of this model, with its thinking and a tool call, to replay as it came.
          upstream.script({
            thinking: "Weather first.",
            text: "Looking.",
            toolCalls: [{ id: "call_own", name: "get_weather", arguments: { city: "Oslo" } }]
          })
          const own = (Either.getOrThrow(yield* collect(call())).at(-1) as Extract<
            ModelClientModule.ModelEvent,
            { type: "done" }
          >).message
          const ownCall = own.content.find((part) => part.type === "toolCall")!
          const image = {
            type: "image" as const,
            data: Buffer.from("not really a png").toString("base64"),
            mimeType: "image/png"
          }
          const messages: Array<ModelClientModule.Message> = [
            { role: "user", content: "weather in Oslo?", timestamp: 1 },
            own,
            {
              role: "toolResult",
              toolCallId: ownCall.id,
              toolName: "get_weather",
              content: [{ type: "text", text: "rain" }, image],
              isError: false,
              timestamp: 2
            },
            // This model's answer of text only, blank parts and all.
            {
              ...own,
              content: [{ type: "text", text: "Rain, " }, { type: "text", text: "  " }, {
                type: "text",
                text: "then sun."
              }],
              stopReason: "stop",
              timestamp: 3
            },
            // Another model's answer: its thinking is shown to this one as text.
            {
              ...own,
              provider: "elsewhere",
              model: "other",
              content: [{ type: "thinking", thinking: "It rains in Oslo." }, { type: "text", text: "Rain." }],
              stopReason: "stop",
              timestamp: 3
            },
            { role: "user", content: [{ type: "text", text: "and this picture?" }, image], timestamp: 4 }
          ]
          const before = structuredClone(messages)
          upstream.script({ text: "first" })
          upstream.script({ text: "second" })
          for (let i = 0; i < 2; i++) {
            Either.getOrThrow(yield* collect(call({ context: { messages, tools: [...tools] } })))
          }
          expect(messages).toEqual(before)
          const [first, second] = upstream.requests().filter((recorded) => recorded.protocol !== "models").slice(1)
          // The same history, sent twice, is the same request.
          expect(second!.body).toEqual(first!.body)
          const body = JSON.stringify(first!.body)
          expect(body).toContain("It rains in Oslo.")
          expect(body).toContain("Weather first.")
          // The call's own id (the responses protocol keeps its item id beside it).
          expect(body).toContain(JSON.stringify(ownCall.id.split("|")[0]))
          expect(body).toContain("rain")
          // The model takes text only: both images are told as left out, and neither is sent.
          expect(body).toContain("image omitted")
          expect(body).not.toContain(image.data)
          if (type === "openai-completions") {
            // Answers of text only (this model's, and the other's once its thinking is text) are plain strings.
            const answers = (first!.body as any).messages.filter((message: any) => message.role === "assistant")
            expect(answers.slice(1)).toEqual([
              { role: "assistant", content: "Rain, then sun." },
              { role: "assistant", content: "It rains in Oslo.Rain." }
            ])
            expect(answers[0]).toMatchObject({ content: "Looking.", tool_calls: [{ id: ownCall.id }] })
          }
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "reports a 401 as a refused key, without retrying or quoting the key",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, type)
          upstream.script({ error: { status: 401, message: `Incorrect API key provided: ${apiKey}` } })
          const result = yield* collect(call())
          expect(Either.isLeft(result)).toBe(true)
          const error = Either.flip(result).pipe(Either.getOrThrow)
          expect(error._tag).toBe("ModelKeyInvalid")
          expect(error).toMatchObject({ provider: "fake", status: 401 })
          expect(error.message).not.toContain(apiKey)
          expect(upstream.requests().filter((recorded) => recorded.protocol !== "models").length).toBe(1)
        })
      ),
    { timeout: 30_000 }
  )
})

describe("failures and interruption", () => {
  it.scopedLive(
    "a stream cut mid-way and a 529 are retried; a 400 is not",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, "anthropic-messages")
          upstream.script([
            { text: "this answer breaks off in the middle", cutAfterEvents: 4 },
            { error: { status: 529, message: "Overloaded" } },
            { text: "whole answer" }
          ])
          const events = Either.getOrThrow(yield* collect(call({ reasoning: undefined })))
          const retries = events.filter((event) => event.type === "auto_retry_start")
          expect(retries.map((event) => event.type === "auto_retry_start" && event.errorMessage)).toEqual([
            expect.stringContaining("unreachable"),
            expect.stringContaining("overloaded")
          ])
          const done = events.at(-1)!
          expect(done.type === "done" && done.message.content).toEqual([
            expect.objectContaining({ type: "text", text: "whole answer" })
          ])
          // Only the finished response is paid for.
          const sql = yield* SqlClient.SqlClient
          const rows = yield* sql`SELECT id FROM usage_records`
          expect(rows.length).toBe(1)

          upstream.script({ error: { status: 400, message: "messages: bad" } })
          const refused = Either.flip(yield* collect(call({ reasoning: undefined }))).pipe(Either.getOrThrow)
          expect(refused).toMatchObject({ _tag: "ModelRequestRefused", status: 400 })
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "interrupting the stream aborts the request at once",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, "openai-completions")
          // Twenty words at 300 ms each: six seconds if read to the end.
          upstream.script({ text: Array.from({ length: 20 }, (_, i) => `w${i}`).join(" "), tokenDelayMs: 300 })
          const client = yield* ModelClient.ModelClient
          const started = Date.now()
          // Interrupted after its second delta.
          const deltas: Array<ModelClientModule.ModelEvent> = []
          const second = yield* Deferred.make<void>()
          const responding = yield* Effect.fork(client.respond(
            call({ reasoning: undefined }),
            (event) =>
              event.type !== "text_delta" ? Effect.void : Effect.suspend(() => {
                deltas.push(event)
                return deltas.length === 2 ? Deferred.succeed(second, void 0) : Effect.void
              }),
            fast
          ))
          yield* Deferred.await(second)
          yield* Fiber.interrupt(responding)
          expect(deltas).toHaveLength(2)
          expect(Date.now() - started).toBeLessThan(3000)
          const sql = yield* SqlClient.SqlClient
          expect((yield* sql`SELECT id FROM usage_records`).length).toBe(0)
        })
      ),
    { timeout: 30_000 }
  )
})

describe("database faults", () => {
  it.scopedLive(
    "are PersistenceErrors: a response whose usage cannot be recorded fails at once, unretried; keys cannot be read",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          yield* saveProvider(upstream.url, "openai-completions")
          const sql = yield* SqlClient.SqlClient
          const client = yield* ModelClient.ModelClient
          yield* sql`DROP TABLE usage_records`
          upstream.script({ text: "answered, but not recorded" })
          const events: Array<ModelClientModule.ModelEvent> = []
          const unrecorded = yield* Effect.flip(
            client.respond(call({ reasoning: undefined }), (event) => Effect.sync(() => void events.push(event)), fast)
          )
          expect(unrecorded).toBeInstanceOf(PersistenceError.PersistenceError)
          expect(DatabaseHealth.isPermanent(unrecorded)).toBe(true)
          expect(upstream.requests().filter((request) => request.protocol !== "models")).toHaveLength(1)
          expect(events.filter((event) => event.type.startsWith("auto_retry"))).toEqual([])

          yield* sql`DROP TABLE tenant_keys, key_scope_entries`
          const keys = yield* Keys.Keys
          const scopes = yield* KeyScopes.KeyScopes
          const failures = [
            yield* Effect.flip(keys.statusMap(tenantId)),
            yield* Effect.flip(scopes.list(tenantId)),
            yield* Effect.flip(client.resolve({ tenantId, keyScope: Option.none(), model: "openai/gpt-5.1" }))
          ]
          for (const failure of failures) expect(failure).toBeInstanceOf(PersistenceError.PersistenceError)
        })
      ),
    { timeout: 30_000 }
  )
})

describe("keys and endpoints", () => {
  it.scopedLive(
    "a key scope's gateway entry replaces the base URL and sends no auth header",
    () =>
      scenario((upstream) =>
        Effect.gen(function*() {
          const scopes = yield* KeyScopes.KeyScopes
          yield* scopes.put(
            tenantId,
            "gw",
            "anthropic",
            new Provider.KeyScopeEntryInput({ baseUrl: upstream.url, headers: { "x-gateway-team": "blue" } })
          )
          const result = yield* collect(call({
            model: "anthropic/claude-sonnet-4-5",
            keyScope: Option.some("gw"),
            modelHeaders: { "x-trace-tag": "t1" },
            reasoning: undefined
          }))
          expect(Either.isRight(result)).toBe(true)
          const [request] = upstream.requests()
          expect(request!.protocol).toBe("anthropic-messages")
          expect(request!.headers["x-api-key"]).toBeUndefined()
          expect(request!.headers.authorization).toBeUndefined()
          expect(request!.headers["x-gateway-team"]).toBe("blue")
          expect(request!.headers["x-trace-tag"]).toBe("t1")
          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<
            { keySource: string; keyScope: string }
          >`SELECT key_source, key_scope FROM usage_records`
          expect(row).toEqual({ keySource: "scope", keyScope: "gw" })
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "a built-in model without any key fails as missing, before any request",
    () =>
      scenario(() =>
        Effect.gen(function*() {
          const result = yield* collect(call({ model: "openai/gpt-5.1" }))
          expect(Either.flip(result).pipe(Either.getOrThrow)).toMatchObject({
            _tag: "ModelKeyMissing",
            provider: "openai"
          })
          const unknown = yield* collect(call({ model: "nowhere/none" }))
          expect(Either.flip(unknown).pipe(Either.getOrThrow)).toMatchObject({ _tag: "UnknownModel" })
        })
      ),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "an endpoint that resolves public when saved and to loopback when called is refused at call time",
    () =>
      Effect.suspend(() => {
        let lookups = 0
        // DNS rebinding: the first answer is public, every later one loopback.
        const resolver = Resolver.layerTest({
          "llm.rebind.example": () => (lookups++ === 0 ? ["93.184.216.34"] : ["127.0.0.1"])
        })
        return scenario(() =>
          Effect.gen(function*() {
            const providers = yield* CustomProviders.CustomProviders
            yield* providers.put(
              tenantId,
              "",
              "fake",
              new Provider.CustomProviderInput({
                type: "openai-completions",
                baseUrl: "https://llm.rebind.example/v1",
                apiKey,
                models: [new Provider.CustomModel({ id: "m1", contextWindow: 8000 })]
              })
            )
            const result = yield* collect(call({ reasoning: undefined }))
            const error = Either.flip(result).pipe(Either.getOrThrow)
            expect(error._tag).toBe("ModelEndpointRefused")
            expect(error.message).toContain("private_address")
          }), { allowPrivate: false, resolver })
      }),
    { timeout: 30_000 }
  )
})
