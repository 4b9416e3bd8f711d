/**
 * What each protocol module provides. Inbound: decoding its requests into
 * the canonical form, encoding answers (whole and as its own SSE grammar),
 * its error body, and reading usage out of a same-protocol upstream's
 * answer as it is passed through. Upstream: encoding a canonical request
 * for a target of that protocol and decoding its answer back.
 */
import type { Catalog, ModelClient } from "@agent-runtime/models"
import type * as Canonical from "../Canonical.ts"
import type { GatewayError } from "../GatewayError.ts"
import type { Answer } from "./answer.ts"
import type { TokenUsage } from "./tokenUsage.ts"

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

export interface UpstreamCodec {
  /** The model layer's name for the protocol (a target's `model.api`). */
  readonly api: string
  /** Where it answers, under the model's base URL. */
  readonly path: string
  /** Its key goes in x-api-key (unless the provider says bearer), not as a bearer token. */
  readonly anthropic: boolean
  /** Headers the protocol requires besides the key. */
  readonly headers: Record<string, string>
  readonly encode: (request: Canonical.Request, model: Catalog.CatalogModel) => Canonical.Json
  /** A whole (non-streamed) answer. */
  readonly decode: (body: any) => Canonical.AssistantMessage
  /** Feeds each stream event's data into `answer`; returns the error an event reports, if it reports one. */
  readonly decoder: (answer: Answer) => (data: any) => unknown
}
