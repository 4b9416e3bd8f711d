/**
 * What each inbound protocol module provides: decoding its requests into
 * the canonical form, encoding answers (whole and as its own SSE grammar),
 * its error body, and reading usage out of a same-protocol upstream's
 * answer as it is passed through.
 */
import type { ModelClient } from "@agent-runtime/models"
import type * as Canonical from "./Canonical.ts"
import type { GatewayError } from "./GatewayError.ts"
import type { TokenUsage } from "./TokenUsage.ts"

export interface StreamEncoder {
  /** The SSE text for one model event (often empty). */
  readonly event: (event: ModelClient.ModelEvent) => string
}

export interface UsageTap {
  /** Looks at one whole upstream frame; false drops it from what the client gets. */
  readonly frame: (raw: string) => boolean
  readonly usage: () => TokenUsage | undefined
}

export interface Codec {
  readonly protocol: Canonical.Protocol
  /** Where a same-protocol upstream answers, under the model's base URL. */
  readonly upstreamPath: string
  /** Throws `GatewayError` (400) for a request the protocol would refuse. */
  readonly decode: (body: Canonical.Json) => Canonical.Request
  readonly encode: (message: Canonical.AssistantMessage, request: Canonical.Request) => unknown
  readonly encoder: (request: Canonical.Request) => StreamEncoder
  readonly errorBody: (error: GatewayError) => unknown
  /** An error after the stream has started, in the protocol's stream grammar. */
  readonly streamError: (error: GatewayError) => string
  readonly usageOfBody: (body: any) => TokenUsage | undefined
  /** `request` is the client's body before the gateway asked upstream for usage. */
  readonly usageTap: (request: Canonical.Json) => UsageTap
}

