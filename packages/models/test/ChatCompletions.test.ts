/**
 * The chat-completions client pi-ai is given instead of the OpenAI SDK: the
 * same bytes from a real server read both ways (the SDK over fetch, and this
 * client over undici's request), which must give pi-ai the same events, the
 * same message and the same errors.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Undici from "undici"
import * as ChatCompletions from "../src/internal/chatCompletions.ts"
import * as Pi from "../src/internal/pi.ts"

/** A server answering every request with `reply`'s status, headers and body chunks, written one by one. */
const server = (reply: { status: number; headers?: Record<string, string>; chunks: ReadonlyArray<string | Buffer> }) =>
  Effect.acquireRelease(
    Effect.async<Http.Server>((resume) => {
      const created = Http.createServer((request, response) => {
        request.resume()
        request.on("end", async () => {
          response.writeHead(reply.status, { "content-type": "text/event-stream", ...reply.headers })
          for (const chunk of reply.chunks) {
            response.write(chunk)
            await new Promise((resolve) => setImmediate(resolve))
          }
          response.end()
        })
      })
      created.listen(0, "127.0.0.1", () => resume(Effect.succeed(created)))
    }),
    (created) => Effect.promise(() => new Promise((resolve) => created.close(resolve)))
  )

const modelAt = (port: number): Pi.Model<Pi.Api> => ({
  id: "m1",
  name: "m1",
  api: "openai-completions",
  provider: "fake",
  baseUrl: `http://127.0.0.1:${port}/v1`,
  reasoning: false,
  input: ["text"],
  cost: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 100_000,
  maxTokens: 1_000
})

const send: ChatCompletions.Send = (url, options) => Undici.request(url, options)

/** What pi-ai made of the response: its events, the final message without its time, and the status heard. */
const read = (port: number, light: boolean) =>
  Effect.promise(async () => {
    const heard: Array<number> = []
    const events = Pi.streamSimple(modelAt(port), {
      systemPrompt: "Be brief.",
      messages: [{ role: "user", content: "hi", timestamp: 0 }]
    }, {
      apiKey: "sk-test",
      maxRetries: 0,
      ...(light
        ? { openAIClient: ChatCompletions.client(send, (status) => heard.push(status)) }
        : {
          fetch: async (input, init) => {
            const response = await fetch(input, init)
            heard.push(response.status)
            return response
          }
        })
    })
    const seen: Array<unknown> = []
    for await (const event of events) {
      const { partial: _partial, ...rest } = event as Pi.AssistantMessageEvent & { partial?: unknown }
      const final = "message" in rest ? rest.message : "error" in rest ? rest.error : undefined
      seen.push(
        final === undefined
          ? rest
          : { ...rest, [("message" in rest) ? "message" : "error"]: { ...final, timestamp: 0 } }
      )
    }
    return { seen, heard }
  })

/** The same reply read through the SDK and through the client: the same to pi-ai. */
const sameBothWays = (reply: Parameters<typeof server>[0]) =>
  Effect.gen(function*() {
    const port = (yield* server(reply)).address() as AddressInfo
    const throughSdk = yield* read(port.port, false)
    const throughClient = yield* read(port.port, true)
    expect(throughClient).toEqual(throughSdk)
    return throughClient.seen.at(-1) as Pi.AssistantMessageEvent
  })

/** The error pi-ai reported, as the runtime classifies it from. */
const errorOf = (event: Pi.AssistantMessageEvent) => event.type === "error" ? event.error.errorMessage : undefined

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${
    JSON.stringify({ id: "chatcmpl-1", model: "m1", choices: [{ index: 0, delta, finish_reason: finish }] })
  }\n\n`

const usage = `data: ${
  JSON.stringify({ id: "chatcmpl-1", model: "m1", choices: [], usage: { prompt_tokens: 9, completion_tokens: 4 } })
}\n\n`

describe("the client beside the SDK", () => {
  it.scopedLive("text and a tool call, CRLF lines, comments, characters split across writes", () =>
    Effect.gen(function*() {
      const body = Buffer.from(
        ": keep-alive\r\n\r\n" + chunk({ role: "assistant", content: "" }) + chunk({ content: "héllo 🙂 " }) +
          chunk({ tool_calls: [{ index: 0, id: "call_1", function: { name: "get_weather", arguments: '{"ci' } }] }) +
          chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty":"Paris"}' } }] }) +
          chunk({}, "tool_calls").replaceAll("\n", "\r\n") + usage + "data: [DONE]\n\ndata: after done\n\n"
      )
      // Every few bytes a write of its own, so multi-byte characters and line ends fall across chunks.
      const chunks = Array.from({ length: Math.ceil(body.length / 5) }, (_, i) => body.subarray(i * 5, i * 5 + 5))
      const last = yield* sameBothWays({ status: 200, chunks })
      expect(last.type).toBe("done")
      const message = (last as Extract<Pi.AssistantMessageEvent, { type: "done" }>).message
      expect(message.content).toEqual([
        { type: "text", text: "héllo 🙂 " },
        { type: "toolCall", id: "call_1", name: "get_weather", arguments: { city: "Paris" } }
      ])
      expect(message.usage.input).toBe(9)
      expect(message.stopReason).toBe("toolUse")
    }))

  it.scopedLive("a megabyte of text in one event, written 64 KiB at a time", () =>
    Effect.gen(function*() {
      const text = "word ".repeat(200_000)
      const body = Buffer.from(chunk({ content: text }) + chunk({}, "stop") + usage + "data: [DONE]\n\n")
      const chunks = Array.from({ length: Math.ceil(body.length / 65_536) }, (_, i) =>
        body.subarray(i * 65_536, (i + 1) * 65_536))
      const last = yield* sameBothWays({ status: 200, chunks })
      expect(last.type === "done" && last.message.content).toEqual([{ type: "text", text }])
    }))

  it.scopedLive("an error in the stream, data that is not JSON, a stream without its end", () =>
    Effect.gen(function*() {
      const failed = yield* sameBothWays({
        status: 200,
        chunks: [chunk({ content: "a" }), `data: ${JSON.stringify({ error: { message: "overloaded now" } })}\n\n`]
      })
      expect(failed.type).toBe("error")
      expect(errorOf(failed)).toContain("overloaded now")
      const garbled = yield* sameBothWays({ status: 200, chunks: [chunk({ content: "a" }), "data: {not json\n\n"] })
      expect(garbled.type).toBe("error")
      const cut = yield* sameBothWays({ status: 200, chunks: [chunk({ content: "a" })] })
      expect(cut.type).toBe("error")
    }))

  it.scopedLive("refusals: a JSON error body, a text body, a rate limit with Retry-After", () =>
    Effect.gen(function*() {
      const refused = yield* sameBothWays({
        status: 400,
        headers: { "content-type": "application/json" },
        chunks: [JSON.stringify({ error: { message: "maximum context length is 10 tokens", code: "too_long" } })]
      })
      expect(errorOf(refused)).toContain('400: {"message":"maximum context length is 10 tokens"')
      const broken = yield* sameBothWays({ status: 502, chunks: ["bad gateway, upstream gone"] })
      expect(errorOf(broken)).toContain("502 bad gateway, upstream gone")
      const limited = yield* sameBothWays({
        status: 429,
        headers: { "retry-after": "3" },
        chunks: [JSON.stringify({ error: { message: "slow down" } })]
      })
      expect(errorOf(limited)).toContain('429: {"message":"slow down"')
    }))

  it.live("a server that is not there: the SDK's connection error", () =>
    Effect.gen(function*() {
      const closed = yield* Effect.async<number>((resume) => {
        const probe = Http.createServer()
        probe.listen(0, "127.0.0.1", () => {
          const { port } = probe.address() as AddressInfo
          probe.close(() => resume(Effect.succeed(port)))
        })
      })
      const throughSdk = yield* read(closed, false)
      const throughClient = yield* read(closed, true)
      expect(throughClient).toEqual(throughSdk)
      expect(errorOf(throughClient.seen.at(-1) as Pi.AssistantMessageEvent)).toContain("Connection error.")
    }))
})
