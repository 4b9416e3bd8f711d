/**
 * Serving, without the network: tool declarations, the tools hash, and the
 * MCP session (the dispatcher) fed the runtime's messages directly, its
 * answers captured instead of posted.
 */
import { Application } from "@agent-runtime/domain"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Crypto from "node:crypto"
import * as Dispatch from "../src/internal/dispatch.ts"
import { InvalidOptions } from "../src/SdkError.ts"
import * as Serve from "../src/Serve.ts"

const weather = Serve.tool({
  name: "get_weather",
  description: "The weather in a city",
  schema: Schema.Struct({
    city: Schema.String.pipe(Schema.minLength(1)),
    days: Schema.optional(Schema.Int.pipe(Schema.between(1, 7)))
  }),
  executionMode: "parallel",
  deadlineMs: 30_000,
  execute: ({ city, days }) => ({ city, days: days ?? 1, sky: "clear" })
})

const echo = Serve.tool({
  name: "echo",
  description: "Says it back",
  parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  exposure: "direct",
  execute: (args) => String(args.text)
})

const failing = Serve.tool({
  name: "failing",
  description: "Always fails",
  execute: () => {
    throw new Error("the warehouse is closed")
  }
})

interface Posted {
  readonly message: Record<string, any>
  readonly connection: string
}

/** A dispatcher whose posts are captured; `answer(id)` waits for the answer to a request. */
const session = (tools: ReadonlyArray<Serve.Tool<any>>) =>
  Effect.gen(function*() {
    const posted: Array<Posted> = []
    const dispatcher = yield* Dispatch.make({
      tools,
      post: (message, connection) => Effect.sync(() => void posted.push({ message, connection }))
    })
    const send = (message: unknown) => dispatcher.handle(message, "conn_1")
    const answer = (id: string | number) =>
      Effect.gen(function*() {
        for (let i = 0; i < 500; i++) {
          const found = posted.find((entry) => entry.message.id === id)
          if (found !== undefined) return found.message
          yield* Effect.sleep(5)
        }
        throw new Error(`no answer to ${id}`)
      })
    const call = (id: string, name: string, args: unknown, meta: Record<string, unknown> = {}) =>
      Effect.zipRight(
        send({
          jsonrpc: "2.0",
          id,
          method: "tools/call",
          params: { name, arguments: args, _meta: { progressToken: id, "agent-runtime/callId": id, ...meta } }
        }),
        answer(id)
      )
    return { dispatcher, posted, send, answer, call }
  })

describe("tool declarations", () => {
  it("lists a schema's JSON Schema and the per-tool settings under agent-runtime/ in _meta", () => {
    expect(Serve.listTools([weather, echo, failing])).toEqual([
      {
        name: "get_weather",
        description: "The weather in a city",
        inputSchema: {
          type: "object",
          required: ["city"],
          properties: {
            city: {
              type: "string",
              minLength: 1,
              title: "minLength(1)",
              description: "a string at least 1 character(s) long"
            },
            days: {
              type: "integer",
              minimum: 1,
              maximum: 7,
              title: "between(1, 7)",
              description: "a number between 1 and 7"
            }
          },
          additionalProperties: false
        },
        _meta: { "agent-runtime/executionMode": "parallel", "agent-runtime/deadlineMs": 30_000 }
      },
      {
        name: "echo",
        description: "Says it back",
        inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
        _meta: { "agent-runtime/exposure": "direct" }
      },
      { name: "failing", description: "Always fails", inputSchema: { type: "object", properties: {} } }
    ])
  })

  it("writes classes and identified schemas inline; only a recursive one keeps its definition", () => {
    const Address = Schema.Struct({ street: Schema.String }).annotations({ identifier: "Address" })
    class Order extends Schema.Class<Order>("Order")({ item: Schema.String, shipTo: Address }) {}
    const order = Serve.tool({ name: "order", description: "Orders", schema: Order, execute: (order) => order.item })
    expect(order.inputSchema).toEqual({
      type: "object",
      required: ["item", "shipTo"],
      properties: {
        item: { type: "string" },
        shipTo: {
          type: "object",
          required: ["street"],
          properties: { street: { type: "string" } },
          additionalProperties: false
        }
      },
      additionalProperties: false
    })
    interface Category {
      readonly name: string
      readonly children: ReadonlyArray<Category>
    }
    const Category = Schema.Struct({
      name: Schema.String,
      children: Schema.Array(Schema.suspend((): Schema.Schema<Category> => Category))
    }).annotations({ identifier: "Category" })
    const tree = Serve.tool({
      name: "tree",
      description: "",
      schema: Schema.Struct({ root: Category }),
      execute: () => ""
    })
    expect(tree.inputSchema).toMatchObject({
      type: "object",
      properties: { root: { type: "object", properties: { children: { items: { $ref: "#/$defs/Category" } } } } },
      $defs: { Category: { type: "object", required: ["name", "children"] } }
    })
  })

  it("refuses malformed declarations", () => {
    const execute = () => "x"
    expect(() => Serve.tool({ name: "has space", description: "", execute })).toThrow(InvalidOptions)
    expect(() => Serve.tool({ name: "x".repeat(65), description: "", execute })).toThrow(/1 to 64/)
    expect(() => Serve.tool({ name: "slow", description: "", deadlineMs: 500, execute })).toThrow(/deadlineMs/)
    expect(() => Serve.tool({ name: "slow", description: "", deadlineMs: 1_200_001, execute })).toThrow(/deadlineMs/)
    expect(() => Serve.tool({ name: "scalar", description: "", schema: Schema.String, execute })).toThrow(/object/)
    expect(() => Serve.tool({ name: "scalar", description: "", parameters: { type: "string" }, execute })).toThrow(
      /object/
    )
  })
})

describe("the tools hash", () => {
  it("is the lowercase hex SHA-256 of the listed tools' JSON, as the runtime and the camelRun client compute it", () => {
    const tools = [weather, echo]
    const listed = Serve.listTools(tools)
    const expected = Crypto.createHash("sha256").update(JSON.stringify(listed)).digest("hex")
    expect(Serve.toolsHash(tools)).toBe(expected)
    // What the runtime computes from the tools/list answer it parsed.
    expect(Serve.toolsHash(tools)).toBe(Application.toolsHash(JSON.parse(JSON.stringify(listed))))
    expect(Serve.toolsHash(tools)).toMatch(/^[0-9a-f]{64}$/)
  })

  it("changes with anything listed, the tools' order included", () => {
    const changed = [
      Serve.tool({ ...echo, description: "Says it back!", parameters: echo.inputSchema, execute: () => "" }),
      Serve.tool({ ...echo, exposure: "both", parameters: echo.inputSchema, execute: () => "" }),
      Serve.tool({ ...echo, deadlineMs: 20_000, parameters: echo.inputSchema, execute: () => "" }),
      Serve.tool({ ...echo, parameters: { type: "object", properties: {} }, execute: () => "" })
    ]
    for (const tool of changed) expect(Serve.toolsHash([tool])).not.toBe(Serve.toolsHash([echo]))
    expect(Serve.toolsHash([weather, echo])).not.toBe(Serve.toolsHash([echo, weather]))
    expect(Serve.toolsHash([])).toBe(Application.toolsHash([]))
  })
})

describe("the MCP session", () => {
  it.scopedLive("initialize names the tools hash; tools/list lists; ping answers {}; the rest is -32601", () =>
    Effect.gen(function*() {
      const { answer, dispatcher, posted, send } = yield* session([weather, echo])
      yield* send({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", clientInfo: { name: "agent-runtime" }, capabilities: {} }
      })
      expect(yield* answer(1)).toEqual({
        jsonrpc: "2.0",
        id: 1,
        result: {
          protocolVersion: "2025-06-18",
          capabilities: { tools: { listChanged: false } },
          serverInfo: { name: "agent-runtime-sdk", version: "0.1.0" },
          _meta: { "agent-runtime/toolsHash": Serve.toolsHash([weather, echo]) }
        }
      })
      expect(dispatcher.toolsHash).toBe(Serve.toolsHash([weather, echo]))
      yield* send({ jsonrpc: "2.0", method: "notifications/initialized" })
      yield* send({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} })
      expect((yield* answer(2)).result).toEqual({ tools: Serve.listTools([weather, echo]) })
      yield* send({ jsonrpc: "2.0", id: "p", method: "ping" })
      expect(yield* answer("p")).toEqual({ jsonrpc: "2.0", id: "p", result: {} })
      yield* send({ jsonrpc: "2.0", id: 3, method: "resources/list" })
      expect(yield* answer(3)).toEqual({
        jsonrpc: "2.0",
        id: 3,
        error: { code: -32601, message: "Method not found: resources/list" }
      })
      // Notifications and responses get no answer; every answer names the connection.
      expect(posted).toHaveLength(4)
      expect(posted.every((entry) => entry.connection === "conn_1")).toBe(true)
    }))

  it.scopedLive("a call runs the tool: a string is text; an object is JSON text and structuredContent", () =>
    Effect.gen(function*() {
      const { call, dispatcher } = yield* session([weather, echo])
      expect((yield* call("c1", "echo", { text: "hello" })).result).toEqual({
        content: [{ type: "text", text: "hello" }]
      })
      expect((yield* call("c2", "get_weather", { city: "Oslo", days: 3 })).result).toEqual({
        content: [{ type: "text", text: '{"city":"Oslo","days":3,"sky":"clear"}' }],
        structuredContent: { city: "Oslo", days: 3, sky: "clear" }
      })
      expect(dispatcher.calls).toEqual({ echo: 1, get_weather: 1 })
      expect(dispatcher.held.size).toBe(0)
    }))

  it.scopedLive("arguments that do not match the schema are a failed call naming each problem; execute never runs", () =>
    Effect.gen(function*() {
      let ran = 0
      const strict = Serve.tool({
        name: "strict",
        description: "",
        schema: Schema.Struct({ city: Schema.String, days: Schema.Int.pipe(Schema.between(1, 7)) }),
        execute: () => {
          ran++
          return "ran"
        }
      })
      const { call } = yield* session([strict])
      const answer = yield* call("c1", "strict", { days: 9 })
      expect(answer.result.isError).toBe(true)
      const text: string = answer.result.content[0].text
      expect(text).toMatch(/^invalid arguments for strict: /)
      expect(text).toContain("city: is missing")
      expect(text).toContain("days: ")
      expect(text).toContain("between 1 and 7")
      expect((yield* call("c2", "strict", "not an object")).result.isError).toBe(true)
      expect(ran).toBe(0)
      // Extra arguments are dropped, not refused; execute gets the decoded value.
      expect((yield* call("c3", "strict", { city: "Oslo", days: 2, extra: true })).result).toEqual({
        content: [{ type: "text", text: "ran" }]
      })
    }))

  it.scopedLive("a thrown error is an isError result with its message; an unknown tool is -32602", () =>
    Effect.gen(function*() {
      const rejecting = Serve.tool({
        name: "rejecting",
        description: "",
        execute: () => Promise.reject(new Error("payment declined"))
      })
      const { call, dispatcher } = yield* session([failing, rejecting])
      expect((yield* call("c1", "failing", {})).result).toEqual({
        content: [{ type: "text", text: "the warehouse is closed" }],
        isError: true
      })
      expect((yield* call("c2", "rejecting", {})).result).toEqual({
        content: [{ type: "text", text: "payment declined" }],
        isError: true
      })
      expect((yield* call("c3", "missing", {})).error).toEqual({ code: -32602, message: "Unknown tool: missing" })
      expect(dispatcher.calls).toEqual({ failing: 1, rejecting: 1, missing: 1 })
    }))

  it.scopedLive("ctx carries the call's ids from _meta; progress posts notifications/progress with its token", () =>
    Effect.gen(function*() {
      let seen: Serve.ToolContext | undefined
      const slow = Serve.tool({
        name: "slow",
        description: "",
        deadlineMs: 60_000,
        execute: async (_args, ctx) => {
          seen = ctx
          ctx.progress(1, 3, "one of three")
          await new Promise((resolve) => setTimeout(resolve, 30))
          ctx.progress(2)
          await new Promise((resolve) => setTimeout(resolve, 30))
          return "done"
        }
      })
      const { call, posted } = yield* session([slow])
      const deadline = Date.now() + 15_000
      yield* call("call_7", "slow", {}, {
        "agent-runtime/toolCallId": "toolu_1",
        "agent-runtime/requestId": "req_1",
        "agent-runtime/idempotencyKey": "idem_1",
        "agent-runtime/actor": "user_42",
        // The claims the runtime sends, with the signed token of them.
        "agent-runtime/identity": { agent: "client_1", sub: "user_42", token: "eyJhbGciOi.x.y" },
        "agent-runtime/deadline": deadline
      })
      expect(seen).toMatchObject({
        callId: "call_7",
        toolCallId: "toolu_1",
        requestId: "req_1",
        idempotencyKey: "idem_1",
        actor: "user_42",
        identity: "eyJhbGciOi.x.y",
        deadline
      })
      expect(seen!.signal.aborted).toBe(false)
      const progress = posted.filter((entry) => entry.message.method === "notifications/progress")
      expect(progress.map((entry) => entry.message)).toEqual([
        {
          jsonrpc: "2.0",
          method: "notifications/progress",
          params: { progressToken: "call_7", progress: 1, total: 3, message: "one of three" }
        },
        { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "call_7", progress: 2 } }
      ])
    }))

  it.scopedLive("notifications/cancelled aborts the call's signal; nobody waits for it any more", () =>
    Effect.gen(function*() {
      let aborted: unknown
      const waiting = Serve.tool({
        name: "waiting",
        description: "",
        execute: (_args, ctx) =>
          new Promise((resolve) => {
            ctx.signal.addEventListener("abort", () => {
              aborted = ctx.signal.reason
              resolve("stopped")
            })
          })
      })
      const { answer, dispatcher, send } = yield* session([waiting])
      yield* send({ jsonrpc: "2.0", id: "c1", method: "tools/call", params: { name: "waiting", arguments: {} } })
      yield* Effect.sleep(20)
      expect(dispatcher.held.size).toBe(1)
      expect(dispatcher.awaited()).toHaveLength(1)
      yield* send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "c1", reason: "aborted" } })
      expect(dispatcher.awaited()).toHaveLength(0)
      // An answer after the cancel is still sent (the runtime takes and ignores it).
      expect((yield* answer("c1")).result).toEqual({ content: [{ type: "text", text: "stopped" }] })
      expect(aborted).toBeInstanceOf(Error)
      expect((aborted as Error).message).toBe("aborted")
    }))

  it.scopedLive("calls run concurrently and their answers correlate by id", () =>
    Effect.gen(function*() {
      const delayed = Serve.tool({
        name: "delayed",
        description: "",
        schema: Schema.Struct({ ms: Schema.Number, tag: Schema.String }),
        execute: async ({ ms, tag }) => {
          await new Promise((resolve) => setTimeout(resolve, ms))
          return tag
        }
      })
      const { answer, posted, send } = yield* session([delayed])
      const started = Date.now()
      for (const [id, ms] of [["a", 300], ["b", 200], ["c", 100]] as const) {
        yield* send({
          jsonrpc: "2.0",
          id,
          method: "tools/call",
          params: { name: "delayed", arguments: { ms, tag: id } }
        })
      }
      for (const id of ["a", "b", "c"]) expect((yield* answer(id)).result.content[0].text).toBe(id)
      expect(Date.now() - started).toBeLessThan(550) // 600 ms one after another
      expect(posted.map((entry) => entry.message.id)).toEqual(["c", "b", "a"])
    }))

  it.scopedLive("results that are not JSON, and empty ones", () =>
    Effect.gen(function*() {
      const odd = Serve.tool({
        name: "odd",
        description: "",
        schema: Schema.Struct({ kind: Schema.String }),
        execute: ({ kind }) => {
          if (kind === "bigint") return { n: 1n }
          if (kind === "array") return [1, 2]
          if (kind === "number") return 42
          return undefined
        }
      })
      const { call } = yield* session([odd])
      expect((yield* call("c1", "odd", { kind: "bigint" })).result.isError).toBe(true)
      expect((yield* call("c2", "odd", { kind: "array" })).result).toEqual({
        content: [{ type: "text", text: "[1,2]" }]
      })
      expect((yield* call("c3", "odd", { kind: "number" })).result).toEqual({ content: [{ type: "text", text: "42" }] })
      expect((yield* call("c4", "odd", { kind: "none" })).result).toEqual({ content: [] })
    }))
})

describe("serve", () => {
  it("refuses an http URL to a remote host and two tools of one name before connecting", async () => {
    await expect(Serve.serve({ baseUrl: "http://example.com", agentId: "client_1", token: "aat_x" }, [echo]))
      .rejects.toBeInstanceOf(InvalidOptions)
    await expect(Serve.serve({ baseUrl: "http://127.0.0.1:9", agentId: "client_1", token: "aat_x" }, [echo, echo]))
      .rejects.toThrow(/two tools are named echo/)
  })
})
