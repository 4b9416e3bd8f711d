/**
 * W3C trace context: the `traceparent` header a caller sends to continue its
 * trace, the ids of a request's run span, and the sampling decision.
 *
 * A run's ids are derived from its agent and request, so every node that
 * works on the run (a moved turn, a resumed one) names the same trace and
 * the same run span without asking anyone.
 */
import { FiberRef } from "effect"
import * as Crypto from "node:crypto"

/** The `traceparent` header of the HTTP request being served, set by the API's edge for what it records. */
export const fromCaller = FiberRef.unsafeMake<string | undefined>(undefined)

/** A parsed `traceparent`: the caller's trace, the span to continue under, and its sampled flag. */
export interface TraceParent {
  readonly traceId: string
  readonly parentSpanId: string
  readonly sampled: boolean
}

/** The ids a request's spans are exported under. */
export interface RunContext {
  readonly traceId: string
  /** The run span's id (`invoke_agent`). */
  readonly spanId: string
  readonly parentSpanId?: string | undefined
  /** The caller's sampled flag, when it sent a traceparent; otherwise the tenant's sampleRate decides. */
  readonly sampledByCaller?: boolean | undefined
}

const header = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/
const zeroTrace = "0".repeat(32)
const zeroSpan = "0".repeat(16)

/**
 * The header as W3C Trace Context reads it: version 00 exactly, a later version by its first four fields;
 * version ff, all-zero ids or anything else malformed is ignored (the run starts a trace of its own).
 */
export const parse = (value: string | null | undefined): TraceParent | undefined => {
  if (value === undefined || value === null) return undefined
  const match = header.exec(value.trim())
  if (match === null) return undefined
  const [, version, traceId, parentSpanId, flags, rest] = match
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined
  if (traceId === zeroTrace || parentSpanId === zeroSpan) return undefined
  return { traceId: traceId!, parentSpanId: parentSpanId!, sampled: (parseInt(flags!, 16) & 1) === 1 }
}

/** The header as sent when it is one `parse` takes (kept with a request), else undefined. */
export const valid = (value: string | ReadonlyArray<string> | null | undefined): string | undefined =>
  typeof value === "string" && parse(value) !== undefined ? value.trim() : undefined

export const format = (traceId: string, spanId: string, sampled: boolean) =>
  `00-${traceId}-${spanId}-${sampled ? "01" : "00"}`

export const randomTraceId = (): string => Crypto.randomBytes(16).toString("hex")
export const randomSpanId = (): string => Crypto.randomBytes(8).toString("hex")

const digest = (seed: string) => Crypto.createHash("sha256").update(seed).digest("hex")

/** The ids of a request's run: the caller's trace under its span, or a trace of the request's own. */
export const forRequest = (agentId: string, requestId: string, caller: TraceParent | undefined): RunContext => {
  const hash = digest(`run:${agentId}/${requestId}`)
  return caller === undefined
    ? { traceId: hash.slice(0, 32), spanId: hash.slice(32, 48) }
    : {
      traceId: caller.traceId,
      spanId: hash.slice(32, 48),
      parentSpanId: caller.parentSpanId,
      sampledByCaller: caller.sampled
    }
}

/**
 * Whether a run is traced: the caller's flag when it sent one, else the trace id's lower 64 bits against the
 * rate (as OpenTelemetry's TraceIdRatioBased sampler does), so every node decides the same for a trace.
 */
export const sampled = (context: RunContext, rate: number): boolean => {
  if (context.sampledByCaller !== undefined) return context.sampledByCaller
  if (rate >= 1) return true
  if (rate <= 0) return false
  return Number(BigInt(`0x${context.traceId.slice(16)}`) >> 11n) / 2 ** 53 < rate
}
