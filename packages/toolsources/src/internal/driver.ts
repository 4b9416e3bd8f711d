/**
 * What the cache asks of each kind of source (list its tools, call one,
 * close), and what the kinds share: their dependencies and the headers
 * carrying a source's auth.
 */
import type { Egress } from "@agent-runtime/egress"
import type { IdentityError, IdentityTokens } from "@agent-runtime/identity"
import type { Runtime, Scope } from "effect"
import { Data, Effect, Redacted } from "effect"
import type { Auth, Caller, CallResult, HeaderAuth, SourceTool } from "../ToolSources.ts"

/** A listing that failed, with the reason in plain words (it is shown to tenants). */
export class ListingFailed extends Data.TaggedError("ListingFailed")<{ readonly reason: string }> {}

export interface Dependencies {
  readonly egress: Egress.Service
  readonly identity: IdentityTokens.Service
  /** For callbacks of the MCP SDK, which run outside any fiber. */
  readonly runtime: Runtime.Runtime<never>
  /** The layer's scope: work shared by several requests (opening a session) must outlive the one that started it. */
  readonly scope: Scope.Scope
}

export interface Driver {
  readonly list: (caller: Caller) => Effect.Effect<ReadonlyArray<SourceTool>, ListingFailed>
  /** Calls `tool` of the latest listing, once. */
  readonly call: (
    caller: Caller,
    tool: SourceTool,
    args: Record<string, unknown>,
    onProgress: ((progress: unknown) => Effect.Effect<void>) | undefined,
    answer?: unknown
  ) => Effect.Effect<CallResult>
  readonly close: Effect.Effect<void>
}

/** At least a second, at most 20 minutes: what a call may be given in all, progress included. */
const minDeadlineMs = 1_000
export const maxCallMs = 20 * 60_000

/** A deadline a source declared for a tool, if it is a number; kept within the allowed range. */
export const deadlineOf = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value)
    ? Math.min(maxCallMs, Math.max(minDeadlineMs, Math.round(value)))
    : undefined

export const executionModeOf = (value: unknown): "sequential" | "parallel" | undefined =>
  value === "sequential" || value === "parallel" ? value : undefined

/**
 * The headers carrying `auth` on one request to `audience` (the server's URL
 * as called): for `runtime`, a token signed now, since each lives minutes.
 */
export const authHeaders = (
  identity: IdentityTokens.Service,
  auth: Auth | HeaderAuth,
  caller: Caller,
  audience: string
): Effect.Effect<Record<string, string>, IdentityError.IdentityError> => {
  switch (auth.type) {
    case "none":
      return Effect.succeed({})
    case "bearer":
      return Effect.succeed({ authorization: `Bearer ${Redacted.value(auth.token)}` })
    case "header":
      return Effect.succeed({ [auth.name]: Redacted.value(auth.value) })
    case "runtime":
      return Effect.map(
        identity.sign({
          audience,
          subject: caller.subject,
          actor: caller.actor,
          context: caller.context,
          tenantId: caller.tenantId,
          agentId: caller.agentId,
          origin: caller.origin,
          definition: caller.definition
        }),
        (token) => ({ authorization: `Bearer ${token}`, "x-agent-runtime-identity": token })
      )
  }
}
