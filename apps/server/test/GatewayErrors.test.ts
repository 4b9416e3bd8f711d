/**
 * The gateway's refusals as each official SDK sees them (typed errors, our
 * codes inside), upstream errors passed on with Retry-After, stream slots
 * and their queue, tenant isolation, usage records, `auto`, and the model
 * listing both SDKs page through.
 */
import { Http } from "@agent-runtime/testing"
import Anthropic from "@anthropic-ai/sdk"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import OpenAI from "openai"
import * as Fixture from "./GatewayFixture.ts"

const failure = <A>(f: () => Promise<A>) => Effect.flip(Effect.tryPromise({ try: f, catch: (error) => error as any }))

const chat = (client: OpenAI, model: string) =>
  client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] })
const responses = (client: OpenAI, model: string) => client.responses.create({ model, input: "hi" })
const messages = (client: Anthropic, model: string) =>
  client.messages.create({ model, max_tokens: 100, messages: [{ role: "user", content: "hi" }] })

const WorldLive = Fixture.layer(() =>
  Effect.succeed({ GATEWAY_QUEUE_TIMEOUT_SECONDS: "0.5", DEFAULT_MODELS: "up-msg/m1,anthropic/claude-sonnet-4-5" })
)

layer(WorldLive, { excludeTestServices: true, timeout: 60_000 })("gateway errors and accounts", (it) => {
  it.effect("a missing or invalid key is each SDK's AuthenticationError, with our code inside", () =>
    Effect.gen(function*() {
      const { gateway } = yield* Fixture.GatewayWorld
      const model = Fixture.modelOf("openai-completions")
      for (const key of ["art_not_a_real_key", "nonsense"]) {
        const viaChat = yield* failure(() => chat(Fixture.openai(gateway, key), model))
        expect(viaChat).toBeInstanceOf(OpenAI.AuthenticationError)
        expect(viaChat.code).toBe("UNAUTHORIZED")
        const viaResponses = yield* failure(() => responses(Fixture.openai(gateway, key), model))
        expect(viaResponses).toBeInstanceOf(OpenAI.AuthenticationError)
        const viaMessages = yield* failure(() => messages(Fixture.anthropic(gateway, key), model))
        expect(viaMessages).toBeInstanceOf(Anthropic.AuthenticationError)
        expect(viaMessages.error).toMatchObject({
          type: "error",
          error: { type: "authentication_error", code: "UNAUTHORIZED" }
        })
      }
      // No key at all.
      const bare = yield* Http.client(gateway).post("/v1/messages", {
        headers: { "anthropic-version": "2023-06-01" },
        json: { model, max_tokens: 10, messages: [] }
      })
      expect(bare.status).toBe(401)
      expect(bare.body.error.message).toContain("x-api-key")
      const bareChat = yield* Http.client(gateway).post("/v1/chat/completions", { json: { model, messages: [] } })
      expect(bareChat.status).toBe(401)
      expect(bareChat.body).toMatchObject({ error: { type: "authentication_error", code: "UNAUTHORIZED" } })
    }))

  it.effect("an unknown model is NotFoundError in every protocol", () =>
    Effect.gen(function*() {
      const { gateway, tenant } = yield* Fixture.GatewayWorld
      const client = Fixture.openai(gateway, tenant.token)
      for (const model of ["nobody/m1", "up-chat/m2", "no-slash"]) {
        const viaChat = yield* failure(() => chat(client, model))
        expect(viaChat).toBeInstanceOf(OpenAI.NotFoundError)
        expect(viaChat.param).toBe("model")
        expect(yield* failure(() => responses(client, model))).toBeInstanceOf(OpenAI.NotFoundError)
        expect(yield* failure(() => messages(Fixture.anthropic(gateway, tenant.token), model))).toBeInstanceOf(
          Anthropic.NotFoundError
        )
      }
    }))

  it.effect("an upstream 429 reaches the client as its RateLimitError with Retry-After, passed through or translated", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      const client = Fixture.openai(gateway, tenant.token)
      upstream.script({ error: { status: 429, retryAfter: 7 } })
      const same = yield* failure(() => chat(client, Fixture.modelOf("openai-completions")))
      expect(same).toBeInstanceOf(OpenAI.RateLimitError)
      expect(same.headers.get("retry-after")).toBe("7")
      upstream.script({ error: { status: 429, retryAfter: 9 } })
      const across = yield* failure(() => chat(client, Fixture.modelOf("anthropic-messages")))
      expect(across).toBeInstanceOf(OpenAI.RateLimitError)
      expect(across.headers.get("retry-after")).toBe("9")
      expect(across.code).toBe("RATE_LIMITED")
      upstream.script({ error: { status: 429, retryAfter: 5 } })
      const anthropicSide = yield* failure(() =>
        messages(Fixture.anthropic(gateway, tenant.token), Fixture.modelOf("openai-responses"))
      )
      expect(anthropicSide).toBeInstanceOf(Anthropic.RateLimitError)
      expect(anthropicSide.headers.get("retry-after")).toBe("5")
      // Once each: the gateway does not retry behind the client's back.
      expect(upstream.requests()).toHaveLength(3)
    }))

  it.effect("stream slots: the operator sets a tenant's number; a call that waits past the queue timeout gets 429", () =>
    Effect.gen(function*() {
      const { gateway, node, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      const admin = Http.client(gateway)
      const path = `/v1/admin/tenants/${tenant.id}/gateway`
      expect((yield* admin.get(path, { token: tenant.token })).status).toBe(401)
      expect((yield* admin.get(path, { token: node.operatorToken })).body).toEqual({
        tenant: tenant.id,
        streamSlots: 16,
        override: null,
        default: 16
      })
      const set = yield* admin.put(path, { token: node.operatorToken, json: { streamSlots: 1 } })
      expect(set.body).toMatchObject({ streamSlots: 1, override: 1 })
      expect((yield* admin.put(path, { token: node.operatorToken, json: { streamSlots: 0 } })).status).toBe(400)

      const client = Fixture.openai(gateway, tenant.token)
      const model = Fixture.modelOf("openai-completions")
      // The one slot is busy for 1.5 s: a second call waits 0.5 s in the queue, then is refused.
      upstream.script({ text: "slow", latencyMs: 1500 })
      const slow = yield* Effect.fork(Effect.promise(() => chat(client, model)))
      yield* Effect.sleep("100 millis")
      const refused = yield* failure(() => chat(client, model))
      expect(refused).toBeInstanceOf(OpenAI.RateLimitError)
      expect(refused.code).toBe("RATE_LIMITED")
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      // count_tokens takes a slot too.
      const counting = yield* failure(() =>
        Fixture.anthropic(gateway, tenant.token).messages.countTokens({
          model,
          messages: [{ role: "user", content: "hi" }]
        })
      )
      expect(counting).toBeInstanceOf(Anthropic.RateLimitError)
      expect((yield* Fiber.join(slow)).choices[0]!.message.content).toBe("slow")
      // A call that waits less than the timeout is served in turn.
      upstream.script([{ text: "first", latencyMs: 200 }, { text: "second" }])
      const [first, second] = yield* Effect.all([
        Effect.promise(() => chat(client, model)),
        Effect.sleep("50 millis").pipe(Effect.andThen(Effect.promise(() => chat(client, model))))
      ], { concurrency: 2 })
      expect([first.choices[0]!.message.content, second.choices[0]!.message.content]).toEqual(["first", "second"])
      yield* admin.put(path, { token: node.operatorToken, json: { streamSlots: null } })
    }))

  it.effect("tenant isolation: one tenant's key cannot reach another's custom providers or key scopes", () =>
    Effect.gen(function*() {
      const { gateway, node, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      const other = yield* Fixture.createTenant(node, "other")
      const rest = Http.client(node.rest)
      yield* rest.put("/v1/key-scopes/team/model-providers/scoped", {
        token: tenant.token,
        json: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          apiKey: "sk-scoped-key",
          models: [{ id: "m1", contextWindow: 1000 }]
        }
      })
      const mine = Fixture.openai(gateway, tenant.token)
      const theirs = Fixture.openai(gateway, other.token)
      // The owner reaches its scope's provider with the scope header.
      const scoped = yield* Effect.promise(() =>
        mine.chat.completions.create({ model: "scoped/m1", messages: [{ role: "user", content: "hi" }] }, {
          headers: { "x-agent-runtime-key-scope": "team" }
        })
      )
      expect(scoped.choices[0]!.message.content).toBe("ok")
      expect(upstream.requests()[0]!.headers.authorization).toBe("Bearer sk-scoped-key")
      // The other tenant names the same scope and providers and gets nothing.
      const viaScope = yield* failure(() =>
        theirs.chat.completions.create({ model: "scoped/m1", messages: [{ role: "user", content: "hi" }] }, {
          headers: { "x-agent-runtime-key-scope": "team" }
        })
      )
      expect(viaScope).toBeInstanceOf(OpenAI.NotFoundError)
      expect(yield* failure(() => chat(theirs, Fixture.modelOf("openai-completions")))).toBeInstanceOf(
        OpenAI.NotFoundError
      )
      expect(upstream.requests()).toHaveLength(1)
      const listed = yield* Effect.promise(() => theirs.models.list())
      expect(listed.data.map((model) => model.id)).not.toContain("up-chat/m1")
    }))

  it.effect("usage and cost of each call are recorded as kind response, passed through or translated", () =>
    Effect.gen(function*() {
      const { databaseUrl, gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      yield* Effect.sleep("300 millis")
      const before = (yield* Fixture.usageRows(databaseUrl, tenant.id, 0)).length
      upstream.reset()
      upstream.script([{ text: "a", usage: { input: 1000, output: 500 } }, {
        text: "b",
        usage: { input: 2000, output: 100 }
      }])
      const client = Fixture.openai(gateway, tenant.token)
      yield* Effect.promise(() => chat(client, Fixture.modelOf("openai-completions")))
      yield* Effect.promise(() => chat(client, Fixture.modelOf("anthropic-messages")))
      const rows = (yield* Fixture.usageRows(databaseUrl, tenant.id, before + 2)).slice(before)
      expect(rows).toEqual([
        {
          provider: "up-chat",
          model: "m1",
          kind: "response",
          keySource: "tenant",
          input: 1000,
          output: 500,
          costUsd: 0.002
        },
        {
          provider: "up-msg",
          model: "m1",
          kind: "response",
          keySource: "tenant",
          input: 2000,
          output: 100,
          costUsd: 0.0022
        }
      ])
    }))

  it.effect("auto is the tenant's default model; the listing parses in both SDKs", () =>
    Effect.gen(function*() {
      const { gateway, tenant, upstream } = yield* Fixture.GatewayWorld
      upstream.reset()
      const answer = yield* Effect.promise(() => chat(Fixture.openai(gateway, tenant.token), "auto"))
      expect(answer.choices[0]!.message.content).toBe("ok")
      expect(answer.model).toBe("auto")
      expect(upstream.requests()[0]!.protocol).toBe("anthropic-messages")

      const openaiModels = yield* Effect.promise(() => Fixture.openai(gateway, tenant.token).models.list())
      const ids = openaiModels.data.map((model) => model.id)
      expect(ids).toEqual(expect.arrayContaining(["up-chat/m1", "up-resp/m1", "up-msg/m1"]))
      expect(openaiModels.data[0]).toMatchObject({ object: "model", owned_by: expect.any(String) })
      // Paged the way the SDK pages (has_more, last_id), every page read.
      const anthropicModels = yield* Effect.promise(async () => {
        const all: Array<Anthropic.ModelInfo> = []
        for await (const model of Fixture.anthropic(gateway, tenant.token).models.list()) all.push(model)
        return all
      })
      expect(anthropicModels.map((model) => model.id)).toEqual(ids)
      expect(anthropicModels[0]).toMatchObject({ type: "model", display_name: expect.any(String) })
    }))
})
