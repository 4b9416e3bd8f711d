/**
 * The node's log lines, in process: each format carries the current span's trace and span ids, a line outside
 * any span none, and the layer provided twice (as main.ts provides it) still writes each line once.
 */
import { expect, it } from "@effect/vitest"
import { type ConfigError, ConfigProvider, Effect, Layer } from "effect"
import { afterEach, vi } from "vitest"
import * as Logging from "../src/Logging.ts"

afterEach(() => {
  vi.restoreAllMocks()
})

const logging = (format: string) =>
  Logging.layer.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["LOG_FORMAT", format]])))))

/** What `effect` printed, line by line, under the node's logger in `format` (provided `times` times). */
const printed = <A>(format: string, effect: Effect.Effect<A>, times = 1) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    vi.spyOn(console, "log").mockImplementation((line: unknown) => void lines.push(String(line)))
    let provided: Effect.Effect<A, ConfigError.ConfigError> = effect
    for (let i = 0; i < times; i++) provided = Effect.provide(provided, logging(format))
    const value = yield* provided
    return { lines, value }
  })

const insideSpan = Effect.gen(function*() {
  yield* Effect.log("inside")
  return yield* Effect.currentSpan
}).pipe(Effect.withSpan("Logging.test"), Effect.orDie)

it.effect("a logfmt line in a span carries its trace_id and span_id; one outside carries neither", () =>
  Effect.gen(function*() {
    const { lines, value: span } = yield* printed("logfmt", Effect.zipLeft(insideSpan, Effect.log("outside")))
    expect(lines).toHaveLength(2)
    expect(lines[0]).toContain("message=inside")
    expect(lines[0]).toContain(`trace_id=${span.traceId}`)
    expect(lines[0]).toContain(`span_id=${span.spanId}`)
    expect(lines[1]).toContain("message=outside")
    expect(lines[1]).not.toContain("trace_id")
    expect(lines[1]).not.toContain("span_id")
  }))

it.effect("a JSON line in a span carries them among its annotations", () =>
  Effect.gen(function*() {
    const { lines, value: span } = yield* printed("json", insideSpan)
    expect(lines).toHaveLength(1)
    const line = JSON.parse(lines[0]!)
    expect(line.message).toBe("inside")
    expect(line.annotations).toMatchObject({ trace_id: span.traceId, span_id: span.spanId })
  }))

it.effect("the layer provided twice writes each line once", () =>
  Effect.gen(function*() {
    const { lines } = yield* printed("logfmt", insideSpan, 2)
    expect(lines).toHaveLength(1)
  }))
