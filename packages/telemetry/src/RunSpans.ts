/**
 * The spans of a tenant's traced run, as the turn makes them: the run span
 * (`invoke_agent`), and inside it model calls, tool calls (code mode's inner
 * calls under theirs), compaction and waits for a person. A span's parent is
 * the span open in the fiber that starts it.
 *
 * A run that is not traced (no export set, not sampled) costs one fiber-ref
 * read per span. Content (prompts, replies, arguments, results) is added only
 * when the tenant asked for it, each value cut at `maxContentChars`.
 */
import { Cause, Effect, Exit, FiberRef } from "effect"
import * as TraceParent from "./TraceParent.ts"

export type AttributeValue = string | number | boolean | ReadonlyArray<string>
export type Attributes = Record<string, AttributeValue>

export type Kind = "server" | "client" | "internal"

/** A finished span, as the exporter queues it. */
export interface SpanData {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: Kind
  readonly startMs: number
  readonly endMs: number
  readonly attributes: Attributes
  readonly status: { readonly error: boolean; readonly message?: string | undefined }
}

/** A traced run: where its spans go and what they may carry. */
export interface Traced {
  readonly tenantId: string
  readonly context: TraceParent.RunContext
  readonly includeContent: boolean
  /** Every span's attributes: tenant, agent, request. */
  readonly common: Attributes
  /** Hands a finished span to the exporter; never waits. */
  readonly offer: (span: SpanData) => void
  /** What the run's model calls added up to on this node, for the run span. */
  readonly usage: Usage
}

export interface Usage {
  responses: number
  inputTokens: number
  outputTokens: number
  cacheReadTokens: number
  cacheWriteTokens: number
  costUsd: number
}

export const emptyUsage = (): Usage => ({
  responses: 0,
  inputTokens: 0,
  outputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  costUsd: 0
})

interface Open {
  readonly traced: Traced
  readonly spanId: string
  readonly attributes: Attributes
  error: { readonly type: string; readonly message?: string | undefined } | undefined
}

const current = FiberRef.unsafeMake<Open | undefined>(undefined)

/** Each content value is cut to this many characters. */
export const maxContentChars = 16_384

const cut = (value: unknown): string => {
  const text = typeof value === "string" ? value : JSON.stringify(value) ?? ""
  return text.length > maxContentChars ? text.slice(0, maxContentChars) : text
}

const within = <A, E, R>(
  open: Open,
  name: string,
  kind: Kind,
  parentSpanId: string | undefined,
  self: Effect.Effect<A, E, R>,
  options?: { readonly startMs?: number; readonly ends?: (exit: Exit.Exit<A, E>) => boolean }
): Effect.Effect<A, E, R> =>
  Effect.suspend(() => {
    const startMs = options?.startMs ?? Date.now()
    return Effect.locally(self, current, open).pipe(
      Effect.onExit((exit) =>
        Effect.sync(() => {
          if (options?.ends !== undefined && !options.ends(exit)) return
          const failed = Exit.isFailure(exit)
          const interrupted = failed && Cause.isInterruptedOnly(exit.cause)
          const error = open.error ?? (failed
            ? { type: interrupted ? "interrupted" : errorType(Cause.squash(exit.cause)) }
            : undefined)
          open.traced.offer({
            traceId: open.traced.context.traceId,
            spanId: open.spanId,
            parentSpanId,
            name,
            kind,
            startMs,
            endMs: Date.now(),
            attributes: { ...open.traced.common, ...open.attributes, ...(error ? { "error.type": error.type } : {}) },
            status: error === undefined
              ? { error: false }
              : { error: true, message: open.traced.includeContent ? error.message ?? error.type : error.type }
          })
        })
      )
    )
  })

const errorType = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const tag = (error as { _tag?: unknown })._tag
    if (typeof tag === "string") return tag
  }
  return "error"
}

/**
 * Runs `self` as the run's span: the id every node derives for the request, under the caller's span when it
 * sent a traceparent. Recorded only when `ends` says the run ended here: a run handed on or cut with its
 * node is recorded, with the same id, by the node that finishes it.
 */
export const run = <A, E>(
  traced: Traced,
  name: string,
  attributes: Attributes,
  options: { readonly startMs: number; readonly ends: (exit: Exit.Exit<A, E>) => boolean }
) =>
<R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  within(
    { traced, spanId: traced.context.spanId, attributes: { ...attributes }, error: undefined },
    name,
    "server",
    traced.context.parentSpanId,
    self,
    options
  )

/** Runs `self` as a child of the span open in this fiber; as it is when the run is not traced. */
export const span =
  (name: string, kind: Kind, attributes: Attributes) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(FiberRef.get(current), (parent) =>
      parent === undefined ? self : within(
        { traced: parent.traced, spanId: TraceParent.randomSpanId(), attributes: { ...attributes }, error: undefined },
        name,
        kind,
        parent.spanId,
        self
      ))

/** Adds attributes to the span open in this fiber. */
export const annotate = (attributes: Attributes): Effect.Effect<void> =>
  Effect.map(FiberRef.get(current), (open) => {
    if (open !== undefined) Object.assign(open.attributes, attributes)
  })

/** Adds content attributes, computed only when the tenant exports content; each is cut to `maxContentChars`. */
export const content = (attributes: () => Record<string, unknown>): Effect.Effect<void> =>
  Effect.map(FiberRef.get(current), (open) => {
    if (open === undefined || !open.traced.includeContent) return
    for (const [key, value] of Object.entries(attributes())) {
      if (value !== undefined) open.attributes[key] = cut(value)
    }
  })

/** Marks the span open in this fiber failed, with an error type (and a message shown only with content). */
export const fail = (type: string, message?: string): Effect.Effect<void> =>
  Effect.map(FiberRef.get(current), (open) => {
    if (open !== undefined) open.error = { type, message }
  })

/** Records a span that already ended (a wait for a person, known once the run resumes) under the open span. */
export const record = (
  name: string,
  kind: Kind,
  startMs: number,
  endMs: number,
  attributes: Attributes,
  contentAttributes?: Record<string, unknown>
): Effect.Effect<void> =>
  Effect.map(FiberRef.get(current), (open) => {
    if (open === undefined) return
    const extra = open.traced.includeContent && contentAttributes !== undefined
      ? Object.fromEntries(Object.entries(contentAttributes).map(([key, value]) => [key, cut(value)]))
      : {}
    open.traced.offer({
      traceId: open.traced.context.traceId,
      spanId: TraceParent.randomSpanId(),
      parentSpanId: open.spanId,
      name,
      kind,
      startMs,
      endMs,
      attributes: { ...open.traced.common, ...attributes, ...extra },
      status: { error: false }
    })
  })

/** The span open in this fiber as a W3C traceparent, for work it starts elsewhere (a delegate's run). */
export const traceparent: Effect.Effect<string | undefined> = Effect.map(
  FiberRef.get(current),
  (open) => open === undefined ? undefined : TraceParent.format(open.traced.context.traceId, open.spanId, true)
)

/** The traced run this fiber is in, if any. */
export const currentRun: Effect.Effect<Traced | undefined> = Effect.map(FiberRef.get(current), (open) => open?.traced)

/** Whether this fiber is inside a traced run: callers skip work only spans would need. */
export const traced: Effect.Effect<boolean> = Effect.map(FiberRef.get(current), (open) => open !== undefined)
