/**
 * An OTLP/HTTP traces receiver as a tenant's collector would be: a real HTTP
 * server on loopback that decodes every export, protobuf with the
 * OpenTelemetry protocol's own generated schema (the protobufjs build of
 * `@opentelemetry/otlp-transformer`) and JSON as the OTLP JSON encoding
 * defines it, and answers as a test tells it to: a status (with
 * Retry-After), a delay, or a hang.
 */
import { Effect, type Scope } from "effect"
import * as Http from "node:http"
import { createRequire } from "node:module"
import type { AddressInfo } from "node:net"

const require = createRequire(import.meta.url)
const { opentelemetry } = require("otlp-protobufjs/build/src/generated/root.js")

const ExportTraceServiceRequest = opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest

/** One span as received, ids in lowercase hex, attributes as plain values. */
export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  /** OTLP's SpanKind number: 1 internal, 2 server, 3 client. */
  readonly kind: number
  readonly startNanos: bigint
  readonly endNanos: bigint
  readonly attributes: Readonly<Record<string, unknown>>
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  readonly status: { readonly code: number; readonly message: string | undefined }
  readonly resource: Readonly<Record<string, unknown>>
  readonly scope: string | undefined
}

export interface Export {
  readonly path: string
  readonly contentType: string
  readonly headers: Http.IncomingHttpHeaders
  readonly spans: ReadonlyArray<ReceivedSpan>
  /** What the receiver answered. */
  readonly status: number
  readonly at: number
}

export interface Behaviour {
  readonly status?: number
  readonly retryAfter?: string
  readonly delayMs?: number
  /** Never answers (until the receiver closes). */
  readonly hang?: boolean
}

export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>`; endpoints are paths under it. */
  readonly url: string
  /** How requests are answered from now on: each given behaviour once, in order, then `otherwise`. */
  readonly behave: (behaviours: ReadonlyArray<Behaviour>, otherwise?: Behaviour) => void
  /** Requests that reached the server, answered or not. */
  readonly arrived: () => number
  /** Every export answered, in the order of the answers. */
  readonly exports: () => ReadonlyArray<Export>
  /** The spans of every export answered with a 2xx. */
  readonly spans: () => ReadonlyArray<ReceivedSpan>
  /** Waits (up to `timeoutMs`) until `done` holds of the accepted spans. */
  readonly waitFor: (
    done: (spans: ReadonlyArray<ReceivedSpan>) => boolean,
    timeoutMs?: number
  ) => Effect.Effect<ReadonlyArray<ReceivedSpan>>
}

const hex = (bytes: ReadonlyArray<number> | string | undefined | null): string | undefined => {
  if (bytes === undefined || bytes === null) return undefined
  // OTLP JSON carries ids as hex strings already.
  const text = typeof bytes === "string" ? bytes : Buffer.from(bytes).toString("hex")
  return text.length === 0 ? undefined : text.toLowerCase()
}

const valueOf = (value: any): unknown => {
  if (value === undefined || value === null) return undefined
  if ("stringValue" in value) return value.stringValue
  if ("boolValue" in value) return value.boolValue
  if ("intValue" in value) return Number(value.intValue)
  if ("doubleValue" in value) return Number(value.doubleValue)
  if ("arrayValue" in value) return (value.arrayValue.values ?? []).map(valueOf)
  if ("kvlistValue" in value) return attributesOf(value.kvlistValue.values)
  if ("bytesValue" in value) return value.bytesValue
  return undefined
}

const attributesOf = (list: ReadonlyArray<any> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((entry) => [entry.key, valueOf(entry.value)]))

/** Protobuf (decoded to plain objects) and JSON share OTLP's field names; only ids and numbers differ. */
const spansOf = (request: any): Array<ReceivedSpan> =>
  (request.resourceSpans ?? []).flatMap((resourceSpans: any) => {
    const resource = attributesOf(resourceSpans.resource?.attributes)
    return (resourceSpans.scopeSpans ?? []).flatMap((scopeSpans: any) =>
      (scopeSpans.spans ?? []).map((span: any): ReceivedSpan => ({
        traceId: hex(span.traceId)!,
        spanId: hex(span.spanId)!,
        parentSpanId: hex(span.parentSpanId),
        name: span.name,
        kind: typeof span.kind === "number" ? span.kind : Number(span.kind ?? 0),
        startNanos: BigInt(span.startTimeUnixNano ?? 0),
        endNanos: BigInt(span.endTimeUnixNano ?? 0),
        attributes: attributesOf(span.attributes),
        status: { code: Number(span.status?.code ?? 0), message: span.status?.message || undefined },
        resource,
        scope: scopeSpans.scope?.name
      }))
    )
  })

const decode = (contentType: string, body: Buffer): Array<ReceivedSpan> => {
  if (contentType.startsWith("application/json")) return spansOf(JSON.parse(body.toString("utf8")))
  const message = ExportTraceServiceRequest.decode(body)
  return spansOf(ExportTraceServiceRequest.toObject(message, { longs: String, enums: Number, bytes: Array }))
}

export const make: Effect.Effect<OtlpReceiver, never, Scope.Scope> = Effect.gen(function*() {
  const exported: Array<Export> = []
  let arrived = 0
  let queued: Array<Behaviour> = []
  let otherwise: Behaviour = {}
  const hanging = new Set<Http.ServerResponse>()
  const server = Http.createServer((request, response) => {
    arrived++
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const behaviour = queued.shift() ?? otherwise
      const contentType = String(request.headers["content-type"] ?? "")
      const body = Buffer.concat(chunks)
      if (behaviour.hang === true) {
        hanging.add(response)
        return
      }
      const status = behaviour.status ?? 200
      const answer = () => {
        let spans: Array<ReceivedSpan>
        try {
          spans = decode(contentType, body)
        } catch (error) {
          response.writeHead(400, { "content-type": "text/plain" }).end(String(error))
          return
        }
        exported.push({
          path: request.url ?? "/",
          contentType,
          headers: request.headers,
          spans,
          status,
          at: Date.now()
        })
        const headers: Record<string, string> = { "content-type": contentType || "application/x-protobuf" }
        if (behaviour.retryAfter !== undefined) headers["retry-after"] = behaviour.retryAfter
        // An empty ExportTraceServiceResponse is valid in both encodings.
        response.writeHead(status, headers).end(contentType.startsWith("application/json") ? "{}" : "")
      }
      if (behaviour.delayMs !== undefined) setTimeout(answer, behaviour.delayMs)
      else answer()
    })
  })
  yield* Effect.async<void>((resume) => {
    server.listen(0, "127.0.0.1", () => resume(Effect.void))
  })
  yield* Effect.addFinalizer(() =>
    Effect.async<void>((resume) => {
      for (const response of hanging) response.destroy()
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )
  const accepted = () =>
    exported.filter((entry) => entry.status >= 200 && entry.status < 300).flatMap((entry) => entry.spans)
  const waitFor = (done: (spans: ReadonlyArray<ReceivedSpan>) => boolean, timeoutMs = 15_000) =>
    Effect.gen(function*() {
      const deadline = Date.now() + timeoutMs
      while (!done(accepted())) {
        if (Date.now() > deadline) {
          return yield* Effect.dieMessage(
            `the receiver's spans did not satisfy the check within ${timeoutMs} ms: ${
              accepted().map((span) => span.name).join(", ")
            }`
          )
        }
        yield* Effect.sleep("50 millis")
      }
      return accepted()
    })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    behave: (behaviours, rest = {}) => {
      queued = [...behaviours]
      otherwise = rest
    },
    arrived: () => arrived,
    exports: () => exported,
    spans: accepted,
    waitFor
  }
})
