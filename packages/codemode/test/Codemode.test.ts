import { Codemode } from "@agent-runtime/codemode"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Ref } from "effect"

const ok = (text: string): Codemode.ToolOutput => ({ text, isError: false })

const tool = (
  name: string,
  call: (args: any) => Effect.Effect<Codemode.ToolOutput>,
  parameters: Record<string, unknown> = { type: "object" }
): Codemode.HostTool => ({ name, description: `The ${name} tool.`, parameters, call })

/** A tool answering `text` after `millis` (live clock). */
const slow = (name: string, millis: number, text: string) =>
  tool(name, () => Effect.as(Effect.sleep(`${millis} millis`), ok(text)))

const run = (code: string, tools: ReadonlyArray<Codemode.HostTool> = [], limits?: Partial<Codemode.Limits>) =>
  Codemode.run(code, tools, limits)

describe("Codemode.run", () => {
  it.effect("a loop over three tools computes a result from their parsed answers", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const tools = [
        tool("add", (args: { a: number; b: number }) => {
          seen.push(`add ${args.a}+${args.b}`)
          return Effect.succeed(ok(String(args.a + args.b)))
        }),
        tool("lookup", (args: { key: string }) =>
          Effect.succeed(ok(JSON.stringify({ key: args.key, weight: Number(args.key.slice(1)) * 2 })))),
        // Not JSON: the guest gets the text as it is.
        tool("format", (args: { value: number }) =>
          Effect.succeed(ok(`value=${args.value}`)))
      ]
      const result = yield* run(
        `
        let sum = 0
        let weights = 0
        const lines = []
        for (let i = 0; i < 10; i++) {
          sum = await tools.add({ a: sum, b: i })
          const entry = await tools.lookup({ key: "k" + i })
          weights += entry.weight
          lines.push(await tools.format({ value: sum }))
        }
        console.log("done", sum)
        return { sum, weights, last: lines[9], types: [typeof sum, typeof lines[0]] }
        `,
        tools
      )
      expect(result).toEqual({
        ok: true,
        result: { sum: 45, weights: 90, last: "value=45", types: ["number", "string"] },
        logs: ["done 45"],
        toolCalls: 30
      })
      expect(seen.slice(0, 3)).toEqual(["add 0+0", "add 0+1", "add 1+2"])
    }))

  it.effect("a tool's text is parsed when it is JSON and kept as a string when not", () =>
    Effect.gen(function*() {
      const answers: Record<string, string> = {
        number: "42",
        string: '"quoted"',
        object: '{"a":[1,null,true]}',
        text: "not { json",
        empty: ""
      }
      const result = yield* run(
        `const out = {}
         for (const kind of ["number", "string", "object", "text", "empty"]) out[kind] = await tools.answer({ kind })
         return out`,
        [tool("answer", (args: { kind: string }) => Effect.succeed(ok(answers[args.kind]!)))]
      )
      expect(result.result).toEqual({
        number: 42,
        string: "quoted",
        object: { a: [1, null, true] },
        text: "not { json",
        empty: ""
      })
    }))

  it.effect("a tool error rejects with an Error the code can catch; uncaught, it fails the run", () =>
    Effect.gen(function*() {
      const failing = tool("lookup", () => Effect.succeed({ text: "no such city", isError: true }))
      const caught = yield* run(
        `try {
           await tools.lookup({ city: "Atlantis" })
           return "unreachable"
         } catch (error) {
           return { isError: error instanceof Error, message: error.message }
         }`,
        [failing]
      )
      expect(caught).toMatchObject({ ok: true, result: { isError: true, message: "no such city" }, toolCalls: 1 })

      const uncaught = yield* run(`const weather = await tools.lookup({})\nreturn weather`, [failing])
      expect(uncaught.ok).toBe(false)
      expect(uncaught.error).toMatchObject({ name: "Error", message: "no such city" })
      expect(uncaught.limit).toBeUndefined()

      const defect = yield* run(`await tools.broken()`, [tool("broken", () => Effect.die("secret detail"))])
      expect(defect.error).toMatchObject({ message: "tools.broken failed" })
    }))

  it.live("calls made together with Promise.all overlap", () =>
    Effect.gen(function*() {
      const events: Array<string> = []
      const sleeper = (name: string) =>
        tool(name, () =>
          Effect.gen(function*() {
            events.push(`start ${name}`)
            yield* Effect.sleep("200 millis")
            events.push(`end ${name}`)
            return ok(JSON.stringify(name))
          }))
      const started = Date.now()
      const result = yield* run(
        `return await Promise.all([tools.a(), tools.b(), tools.c()])`,
        [sleeper("a"), sleeper("b"), sleeper("c")]
      )
      const elapsed = Date.now() - started
      expect(result.result).toEqual(["a", "b", "c"])
      expect(events.slice(0, 3).sort()).toEqual(["start a", "start b", "start c"])
      expect(elapsed).toBeLessThan(500)
    }))

  it.effect("a returned value that JSON cannot hold, or none, is no result; errors keep the code's own line numbers", () =>
    Effect.gen(function*() {
      expect(yield* run(`const x = 1`)).toEqual({ ok: true, logs: [], toolCalls: 0 })
      expect((yield* run(`return () => 1`)).result).toBeUndefined()
      const cyclic = yield* run(`const a = {}; a.a = a; return a`)
      expect(cyclic.error?.name).toBe("TypeError")

      const thrown = yield* run(`const x = 1\nfunction f() {\n  throw new RangeError("bad range")\n}\nf()`)
      expect(thrown.error).toEqual({
        name: "RangeError",
        message: "bad range",
        stack: "    at f (code:3:23)\n    at anonymous (code:5:2)"
      })
      const syntax = yield* run(`const x = 1\nlet y = = 2`)
      expect(syntax.error).toMatchObject({ name: "SyntaxError", stack: "    at code:2:9" })
      expect((yield* run(`throw { code: 7 }`)).error).toEqual({ name: "Error", message: '{"code":7}' })
    }))

  it.effect("awaiting a promise nothing can settle ends the run at once", () =>
    Effect.gen(function*() {
      const result = yield* run(`await new Promise(() => {})`)
      expect(result.ok).toBe(false)
      expect(result.error?.message).toContain("nothing can settle")
    }))

  it.effect("recursion too deep throws a catchable stack overflow; source nested too deep fails the run only", () =>
    Effect.gen(function*() {
      const recursion = yield* run(
        `function depth(n) { return n === 0 ? 0 : depth(n - 1) + 1 }
         let message
         try { depth(1e6) } catch (error) { message = error.message }
         return { message, fine: depth(300) }`
      )
      expect(recursion.result).toEqual({ message: "stack overflow", fine: 300 })

      const nested = yield* run(`return eval("(".repeat(5000) + "1" + ")".repeat(5000))`)
      expect(nested).toMatchObject({ ok: false, error: { name: "InternalError" } })
      expect(nested.error?.message).toContain("stack overflow")
      expect((yield* run(`return 1 + 1`)).result).toBe(2)
    }))
})

describe("Codemode.run limits", () => {
  it.live("time: awaiting a tool that never answers stops at the wall time, and the call is interrupted", () =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      const never = tool(
        "never",
        () => Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined)))
      )
      const started = Date.now()
      const result = yield* run(`console.log("waiting"); await tools.never({})`, [never], { wallTime: "200 millis" })
      expect(Date.now() - started).toBeLessThan(2000)
      expect(result).toMatchObject({ ok: false, limit: "time", logs: ["waiting"], toolCalls: 1 })
      expect(result.error?.message).toContain("200ms")
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
    }))

  it.live("time: also while executing, when the wall time is shorter than the CPU time", () =>
    Effect.gen(function*() {
      const result = yield* run(`while (true) {}`, [], { wallTime: "150 millis", cpuTime: "10 seconds" })
      expect(result.limit).toBe("time")
    }))

  it.effect("cpu: an endless loop stops at the CPU time, even one catching errors", () =>
    Effect.gen(function*() {
      const result = yield* run(`while (true) {}`, [], { cpuTime: "100 millis" })
      expect(result).toMatchObject({ ok: false, limit: "cpu", error: { name: "LimitExceeded" } })
      expect(result.error?.message).toContain("100ms")

      const stubborn = yield* run(
        `for (;;) { try { while (true) {} } catch (error) { console.log("caught", error.message) } }`,
        [],
        { cpuTime: "100 millis" }
      )
      expect(stubborn).toMatchObject({ limit: "cpu", logs: [] })
    }))

  it.live("cpu: time spent awaiting tools does not count", () =>
    Effect.gen(function*() {
      const result = yield* run(`await tools.wait(); await tools.wait(); return "done"`, [slow("wait", 150, "1")], {
        cpuTime: "100 millis"
      })
      expect(result).toMatchObject({ ok: true, result: "done" })
    }))

  it.effect("memory: big strings, many small arrays, or a caught out-of-memory all stop at the memory limit", () =>
    Effect.gen(function*() {
      const limits = { memoryBytes: 4 * 1024 * 1024 }
      for (
        const code of [
          `const kept = []; while (true) kept.push("x".repeat(100000) + kept.length)`,
          `const kept = []; while (true) kept.push([1, 2, 3, 4, 5, 6, 7, 8])`,
          `const kept = []; try { while (true) kept.push([kept.length]) } catch (error) { return error.message }`,
          `return new ArrayBuffer(64 * 1024 * 1024).byteLength`
        ]
      ) {
        const result = yield* run(code, [], limits)
        expect(result, code).toMatchObject({ ok: false, limit: "memory" })
        expect(result.error?.message).toContain("4194304 bytes")
      }
      // A tool answer too big for the guest's memory counts against it too.
      const huge = tool("huge", () => Effect.succeed(ok("z".repeat(40_000_000))))
      expect(yield* run(`return (await tools.huge()).length`, [huge], limits)).toMatchObject({ limit: "memory" })
      // Under the limit, memory is there to use.
      expect((yield* run(`return "x".repeat(1000000).length`, [], limits)).result).toBe(1000000)
    }))

  it.effect("output: console output past the limit stops the run, and so does a result that does not fit", () =>
    Effect.gen(function*() {
      const logged = yield* run(`for (let i = 0; ; i++) console.log("line " + i)`, [], { outputChars: 1000 })
      expect(logged).toMatchObject({ ok: false, limit: "output" })
      expect(logged.logs.join("").length).toBeLessThanOrEqual(1000)
      expect(logged.logs.length).toBeGreaterThan(100)
      expect(logged.error?.message).toContain("1000 characters")

      const big = yield* run(`console.log("x".repeat(600)); return "y".repeat(600)`, [], { outputChars: 1000 })
      expect(big).toMatchObject({ ok: false, limit: "output", logs: ["x".repeat(600)] })
      expect(big.result).toBeUndefined()
    }))

  it.effect("tool calls: the call past the limit rejects and the run stops; the host saw only the allowed calls", () =>
    Effect.gen(function*() {
      const calls = yield* Ref.make(0)
      const counted = tool("count", () => Effect.as(Ref.update(calls, (n) => n + 1), ok("1")))
      const result = yield* run(
        `for (let i = 0; i < 10; i++) {
           try { await tools.count() } catch (error) { console.log("rejected: " + error.message) }
         }
         return "finished"`,
        [counted],
        { toolCalls: 5 }
      )
      expect(result).toMatchObject({ ok: false, limit: "tool_calls", toolCalls: 5 })
      expect(result.error?.message).toContain("limit of 5")
      expect(yield* Ref.get(calls)).toBe(5)
    }))

  it.effect("limits hit in a row leave nothing behind: memory stays flat over many runs", () =>
    Effect.gen(function*() {
      const memoryBomb = `const kept = []; while (true) kept.push("x".repeat(50000) + kept.length)`
      const before = process.memoryUsage().rss
      for (let i = 0; i < 30; i++) {
        const [memory, cpu, output] = yield* Effect.all([
          run(memoryBomb, [], { memoryBytes: 8 * 1024 * 1024 }),
          run(`while (true) {}`, [], { cpuTime: "20 millis" }),
          run(`while (true) console.log("spam")`, [], { outputChars: 10000 })
        ])
        expect([memory.limit, cpu.limit, output.limit]).toEqual(["memory", "cpu", "output"])
      }
      // 30 memory bombs hold 24 MiB each: kept alive, they would add over 700 MiB.
      expect(process.memoryUsage().rss - before).toBeLessThan(300 * 1024 * 1024)
    }), 60_000)
})

describe("Codemode.run isolation", () => {
  it.effect("the guest has no host globals, modules, network, timers or WebAssembly, whatever route it takes", () =>
    Effect.gen(function*() {
      const result = yield* run(
        `
        const attempt = (f) => { try { return f() } catch (error) { return error.name + ": " + error.message } }
        const attemptAsync = async (f) => { try { return await f() } catch (error) { return error.name + ": " + error.message } }
        const global = Function("return this")()
        return {
          types: [typeof process, typeof require, typeof module, typeof exports, typeof fetch, typeof setTimeout,
            typeof setInterval, typeof queueMicrotask, typeof Buffer, typeof WebAssembly, typeof Atomics, typeof std, typeof os],
          viaConstructor: attempt(() => this.constructor.constructor("return process")()),
          viaFunctionThis: [typeof global.process, typeof global.require, global === globalThis],
          viaEval: attempt(() => eval("typeof process + typeof require")),
          viaIndirectEval: attempt(() => (0, eval)("typeof this.process")),
          viaAsyncFunction: await attemptAsync(() => (async () => {}).constructor("return require('fs')")()),
          viaToolFunction: await attemptAsync(() => tools.echo.constructor("return process")()),
          viaConsole: attempt(() => console.log.constructor.constructor("return process.env")()),
          dynamicImport: await attemptAsync(() => import("fs")),
          evalImport: await attemptAsync(() => eval("import('node:child_process')")),
          sharedMemory: new Int32Array(new SharedArrayBuffer(8)).length,
          globals: Object.getOwnPropertyNames(globalThis).filter((name) => /^(call|log|host|__)/.test(name))
        }
      `,
        [tool("echo", (args) => Effect.succeed(ok(JSON.stringify(args))))]
      )
      expect(result.result).toEqual({
        types: Array(13).fill("undefined"),
        viaConstructor: "ReferenceError: 'process' is not defined",
        viaFunctionThis: ["undefined", "undefined", true],
        viaEval: "undefinedundefined",
        viaIndirectEval: "undefined",
        viaAsyncFunction: "ReferenceError: 'require' is not defined",
        viaToolFunction: "ReferenceError: 'process' is not defined",
        viaConsole: "ReferenceError: 'process' is not defined",
        dynamicImport: "ReferenceError: could not load module 'fs'",
        evalImport: "ReferenceError: could not load module 'node:child_process'",
        // A buffer of the guest's own: there is no other thread, and no Atomics, to share it with.
        sharedMemory: 2,
        globals: []
      })
      const staticImport = yield* run(`import fs from "fs"\nreturn fs.readFileSync("/etc/passwd", "utf8")`)
      expect(staticImport).toMatchObject({ ok: false, error: { name: "SyntaxError" } })
    }))

  it.effect("prototype pollution in the guest, in tool arguments or in the result never reaches the host", () =>
    Effect.gen(function*() {
      const received: Array<unknown> = []
      const echo = tool("echo", (args) => {
        received.push(args)
        // What a careless host might do with arguments.
        Object.assign({}, args)
        return Effect.succeed(ok('{"__proto__":{"polluted":"from tool"}}'))
      })
      const result = yield* run(
        `
        Object.prototype.polluted = "guest"
        Array.prototype.polluted = "guest"
        const args = JSON.parse('{"__proto__": {"polluted": "args"}, "constructor": {"prototype": {"polluted": "args"}}, "a": 1}')
        const answer = await tools.echo(args)
        return JSON.parse('{"__proto__": {"polluted": "result"}, "nested": {"__proto__": {"polluted": "deep"}}, "b": [2], "seen": ' +
          JSON.stringify(Object.keys(answer)) + '}')
        `,
        [echo]
      )
      expect(result.ok).toBe(true)
      const value = result.result as Record<string, unknown>
      expect(value).toEqual({ nested: {}, b: [2], seen: ["__proto__"] })
      expect(Object.getPrototypeOf(value)).toBe(Object.prototype)
      expect(Object.hasOwn(value, "__proto__")).toBe(false)
      expect(Object.hasOwn(value.nested as object, "__proto__")).toBe(false)
      expect(received).toEqual([{ a: 1 }])
      expect(Object.getPrototypeOf(received[0])).toBe(Object.prototype)
      expect(Object.assign({}, value, received[0])).toEqual({ nested: {}, b: [2], seen: ["__proto__"], a: 1 })
      expect(({} as Record<string, unknown>).polluted).toBeUndefined()
      expect(([] as unknown as Record<string, unknown>).polluted).toBeUndefined()
    }))

  it.effect("Error.prepareStackTrace and other guest Error hooks stay in the guest", () =>
    Effect.gen(function*() {
      const hooks = Error as unknown as Record<string, unknown>
      const { prepareStackTrace, stackTraceLimit } = hooks
      const result = yield* run(`
        Error.prepareStackTrace = () => "hacked"
        Error.stackTraceLimit = 0
        Object.defineProperty(Error.prototype, "message", { get() { return "hijacked" } })
        throw new Error("from guest")
      `)
      expect(result.ok).toBe(false)
      expect(result.error?.name).toBe("Error")
      expect(hooks.prepareStackTrace).toBe(prepareStackTrace)
      expect(hooks.stackTraceLimit).toBe(stackTraceLimit)
      const host = new Error("host error")
      expect(host.message).toBe("host error")
      expect(host.stack).toContain("Error: host error\n    at ")
    }))
})

describe("Codemode.run interruption", () => {
  it.live("interrupting a run interrupts its tool calls and disposes the sandbox cleanly", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Ref.make(0)
      const waiting = tool("wait", () =>
        Deferred.succeed(started, undefined).pipe(
          Effect.zipRight(Effect.never),
          Effect.onInterrupt(() => Ref.update(interrupted, (n) => n + 1))
        ))
      const fiber = yield* Effect.fork(run(`await Promise.all([tools.wait(), tools.wait(), tools.wait()])`, [waiting]))
      yield* Deferred.await(started)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      // Only interruption: disposing the VM raised nothing (QuickJS aborts when handles leak).
      expect(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)).toBe(true)
      expect(yield* Ref.get(interrupted)).toBe(3)
    }))

  it.live("a timeout from outside does the same", () =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      const never = tool("never", () =>
        Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))))
      const outcome = yield* run(`return await tools.never()`, [never]).pipe(Effect.timeoutOption("100 millis"))
      expect(Option.isNone(outcome)).toBe(true)
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
      expect((yield* run(`return "next run"`)).result).toBe("next run")
    }))
})

describe("Codemode.describe", () => {
  it("declares each tool with its binding, description and parameters", () => {
    const text = Codemode.describe([
      tool("get-weather", () => Effect.succeed(ok("")), {
        type: "object",
        properties: {
          city: { type: "string", description: "City name, e.g. Paris." },
          units: { enum: ["metric", "imperial"] },
          days: { type: "integer" },
          "max-results": { type: ["number", "null"] },
          tags: { type: "array", items: { type: "string" } },
          filter: { type: "object", properties: { near: { type: "boolean" } }, required: ["near"] }
        },
        required: ["city"]
      }),
      { ...tool("list", () => Effect.succeed(ok(""))), description: "Lists things.\nAt most 100." },
      tool("get_weather", () => Effect.succeed(ok("")))
    ])
    expect(text).toBe(
      `/** Each call resolves with the tool's output, parsed when it is JSON; a tool error rejects with an Error. */
declare const tools: {
  /**
   * The get-weather tool.
   * (The tool "get-weather".)
   */
  get_weather(args: {
    /** City name, e.g. Paris. */
    city: string
    units?: "metric" | "imperial"
    days?: number
    "max-results"?: number | null
    tags?: Array<string>
    filter?: {
      near: boolean
    }
  }): Promise<unknown>
  /**
   * Lists things.
   * At most 100.
   */
  list(args?: Record<string, unknown>): Promise<unknown>
  /**
   * The get_weather tool.
   * (The tool "get_weather".)
   */
  get_weather_2(args?: Record<string, unknown>): Promise<unknown>
}`
    )
  })

  it.effect("the bindings it declares are the ones the code calls", () =>
    Effect.gen(function*() {
      const tools = [
        tool("get-weather", () => Effect.succeed(ok('"a"'))),
        tool("get_weather", () => Effect.succeed(ok('"b"'))),
        tool("3d.render", () => Effect.succeed(ok('"c"')))
      ]
      expect(Codemode.describe(tools)).toContain("_3d_render(")
      const result = yield* run(
        `return [await tools.get_weather(), await tools.get_weather_2(), await tools._3d_render()]`,
        tools
      )
      expect(result.result).toEqual(["a", "b", "c"])
    }))
})

describe("Codemode.format", () => {
  it("shows the result, the logs and the tool calls", () => {
    const text = Codemode.format({ ok: true, result: { total: 3 }, logs: ["first", "[warn] second"], toolCalls: 2 })
    expect(text).toBe(`Result:\n{\n  "total": 3\n}\n\nLogs:\nfirst\n[warn] second\n\nTool calls: 2`)
  })

  it("shows an error with its stack, or the limit hit", () => {
    expect(Codemode.format({
      ok: false,
      logs: [],
      error: { name: "TypeError", message: "x is undefined", stack: "    at code:2:3" },
      toolCalls: 0
    })).toBe(`Uncaught TypeError: x is undefined\n    at code:2:3\n\nTool calls: 0`)
    expect(Codemode.format({
      ok: false,
      logs: ["a"],
      error: { name: "LimitExceeded", message: "the code used more than its CPU time limit of 2s" },
      limit: "cpu",
      toolCalls: 1
    })).toBe(`Stopped (limit "cpu"): the code used more than its CPU time limit of 2s\n\nLogs:\na\n\nTool calls: 1`)
  })

  it("cuts a huge result and logs, keeping their start and end", () => {
    const text = Codemode.format({
      ok: true,
      result: "r".repeat(50_000),
      logs: Array.from({ length: 5000 }, (_, i) => `line ${i}`),
      toolCalls: 0
    })
    expect(text.length).toBeLessThan(22_000)
    expect(text).toContain("characters cut")
    expect(text).toContain("line 0\n")
    expect(text).toContain("line 4999")
  })
})
