/**
 * Browser tokens: `abt_<claims>.<mac>`, the claims (agent, tenant, expiry,
 * scopes, event filter, redactions, subject) as base64url JSON signed under
 * the node's sealing key. Nothing is stored, so every node checks one and
 * nothing revokes one before it expires: they live 5 to 3600 seconds.
 *
 * Also what a token's holder sees of its agent (`frameView`, `viewState`,
 * `viewHistory`): event frames whose type passes the filter (by default
 * every type but the runtime's own), snapshots, and response frames and
 * request records whose outcome is reduced to whether and why the run
 * stopped: `{result?: {stopped?, error?}, error?, uncertain?}`. With the
 * `usage.cost` redaction, no `usage.cost` (a response's provider cost) is
 * left in events, snapshots or history. A request record shows what it said
 * (prompt, code, metadata) only to a grant that sees the messages anyway.
 */
import { ApiError, type Auth, Events, Run, Session } from "@agent-runtime/domain"
import { SealedSecret } from "@agent-runtime/store"
import type { Scope } from "effect"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { Buffer } from "node:buffer"
import * as AgentEvents from "./AgentEvents.ts"
import { AgentStore, findLive } from "./AgentStore.ts"
import type * as EventLog from "./EventLog.ts"

export const prefix = "abt_"

const purpose = "browser-token"

/** A token's grant: what it lets its holder see, of which agent, until when. */
export interface Grant extends Auth.BrowserGrant {
  readonly tenantId: string
  /** Unix seconds. */
  readonly expiresAt: number
}

export class BrowserTokens extends Context.Tag("@agent-runtime/agent/BrowserTokens")<BrowserTokens, {
  /**
   * A token for a live agent of the tenant (NotFound when it has none by
   * that id, Gone when it expired); the answer has no `url`, which only the
   * server knows. InvalidRequest for a token without scopes.
   */
  readonly issue: (
    tenantId: string,
    agentId: string,
    input: Session.BrowserTokenInput
  ) => Effect.Effect<Session.BrowserToken, ApiError.NotFound | ApiError.Gone | ApiError.InvalidRequest>
  /** The grant of a genuine token that has not expired. */
  readonly verify: (token: string) => Option.Option<Grant>
  /**
   * The body of an SSE response of the agent's events as the grant shows
   * them (see `frameView`); NotFound or Gone when the agent is no more.
   */
  readonly eventBody: (
    tenantId: string,
    grant: Auth.BrowserGrant,
    cursor: Option.Option<number>,
    options: { readonly snapshot: boolean; readonly ready: unknown }
  ) => Effect.Effect<
    AgentEvents.EventBody,
    ApiError.NotFound | ApiError.Gone | ApiError.ReplayGap | ApiError.Unavailable,
    Scope.Scope
  >
}>() {}

/** Whether a bearer token is meant as a browser token (genuine or not). */
export const isToken = (token: string) => token.startsWith(prefix)

const Claims = Schema.Struct({
  agentId: Schema.String,
  tenantId: Schema.String,
  exp: Schema.Number,
  scopes: Schema.Array(Session.BrowserScope),
  events: Schema.Union(Schema.Literal("default"), Schema.Array(Schema.String)),
  redact: Schema.Array(Schema.Literal("usage.cost")),
  subject: Schema.optional(Schema.String)
})

const decodeClaims = Schema.decodeUnknownOption(Schema.parseJson(Claims))

/** Every scope, in their order; the default. */
const allScopes = Session.BrowserScope.literals

export const make = Effect.gen(function*() {
  const sealer = yield* SealedSecret.Sealer
  const store = yield* AgentStore
  const events = yield* AgentEvents.AgentEvents

  const live = (tenantId: string, agentId: string) =>
    findLive(store, tenantId, agentId).pipe(Effect.catchTag("PersistenceError", Effect.die))

  const issue = (tenantId: string, agentId: string, input: Session.BrowserTokenInput) =>
    Effect.gen(function*() {
      const scopes = input.scopes === undefined ? allScopes : allScopes.filter((scope) => input.scopes!.includes(scope))
      if (scopes.length === 0) {
        return yield* new ApiError.InvalidRequest({
          error: "scopes: name at least one of events, state, history, inputs"
        })
      }
      const agent = yield* live(tenantId, agentId)
      const ttlSeconds = input.ttlSeconds ?? Session.defaultBrowserTokenTtlSeconds
      const claims: typeof Claims.Type = {
        agentId: agent.id,
        tenantId,
        exp: Math.floor(Date.now() / 1000) + ttlSeconds,
        scopes,
        events: input.events === undefined ? "default" : Array.from(new Set(input.events)),
        redact: Array.from(new Set(input.redact ?? [])),
        ...(input.subject === undefined ? {} : { subject: input.subject })
      }
      const body = Buffer.from(JSON.stringify(claims)).toString("base64url")
      return new Session.BrowserToken({
        token: `${prefix}${body}.${sealer.sign(purpose, body)}`,
        expiresAt: claims.exp,
        agentId: agent.id
      })
    })

  const verify = (token: string): Option.Option<Grant> => {
    if (!isToken(token)) return Option.none()
    const [body, mac, ...rest] = token.slice(prefix.length).split(".")
    if (body === undefined || mac === undefined || rest.length > 0 || !sealer.verify(purpose, body, mac)) {
      return Option.none()
    }
    return decodeClaims(Buffer.from(body, "base64url").toString("utf8")).pipe(
      Option.filter((claims) => claims.exp * 1000 > Date.now()),
      Option.map((claims) => ({
        agentId: claims.agentId,
        tenantId: claims.tenantId,
        expiresAt: claims.exp,
        scopes: claims.scopes,
        events: claims.events,
        redact: claims.redact,
        subject: Option.fromNullable(claims.subject)
      }))
    )
  }

  const eventBody = (
    tenantId: string,
    grant: Auth.BrowserGrant,
    cursor: Option.Option<number>,
    options: { readonly snapshot: boolean; readonly ready: unknown }
  ) =>
    Effect.zipRight(
      live(tenantId, grant.agentId),
      events.eventBody(grant.agentId, cursor, { ...options, view: entryView(grant) })
    )

  return BrowserTokens.of({ issue, verify, eventBody })
})

export const layer: Layer.Layer<
  BrowserTokens,
  never,
  SealedSecret.Sealer | AgentStore | AgentEvents.AgentEvents
> = Layer.effect(BrowserTokens, make)

const runtimeTypes: ReadonlySet<string> = new Set(Events.RuntimeEventType.literals)

/**
 * `value` without any `usage.cost`; `value` itself when it has none, so
 * frames without cost keep their shared encoding.
 */
export const redactCost = <A>(value: A): A => {
  if (value === null || typeof value !== "object") return value
  if (Array.isArray(value)) {
    let out: Array<unknown> | undefined
    for (let i = 0; i < value.length; i++) {
      const item = redactCost(value[i])
      if (item !== value[i]) (out ??= value.slice())[i] = item
    }
    return (out ?? value) as A
  }
  let out: Record<string, unknown> | undefined
  for (const [key, field] of Object.entries(value)) {
    let next: unknown
    if (key === "usage" && field !== null && typeof field === "object" && "cost" in field) {
      const { cost: _, ...rest } = field as Record<string, unknown>
      next = rest
    } else {
      next = redactCost(field)
    }
    if (next !== field) (out ??= { ...(value as Record<string, unknown>) })[key] = next
  }
  return (out ?? value) as A
}

/** How a browser token sees an outcome: whether and why its run stopped, nothing it said or did. */
export interface ReducedOutcome {
  readonly result?: { readonly stopped?: unknown; readonly error?: unknown }
  readonly error?: string
  readonly uncertain?: boolean
}

/** An outcome (a RunOutcome, or its JSON) as a browser token sees it. */
export const reduceOutcome = (outcome: {
  readonly result?: unknown
  readonly error?: string | undefined
  readonly uncertain?: boolean | undefined
}): ReducedOutcome => {
  const result = outcome.result as { readonly stopped?: unknown; readonly error?: unknown } | null | undefined
  return {
    ...(outcome.result === undefined ? {} : {
      result: {
        ...(result?.stopped === undefined ? {} : { stopped: result.stopped }),
        ...(result?.error === undefined ? {} : { error: result.error })
      }
    }),
    ...(outcome.error === undefined ? {} : { error: outcome.error }),
    ...(outcome.uncertain === undefined ? {} : { uncertain: outcome.uncertain })
  }
}

/**
 * A stream frame (the `data` of an event entry) as `grant` shows it, or
 * undefined when it is not shown: an event frame only if its event's type
 * passes the filter, response frames with their outcome reduced, snapshots;
 * nothing else. Redacted as the grant asks.
 */
export const frameView = (grant: Auth.BrowserGrant): (data: unknown) => unknown => {
  const listed = grant.events === "default" ? undefined : new Set(grant.events)
  const shown = (type: unknown) =>
    typeof type === "string" && (listed === undefined ? !runtimeTypes.has(type) : listed.has(type))
  const redact = grant.redact.includes("usage.cost") ? redactCost : <A>(value: A) => value
  return (data) => {
    const frame = data as { readonly type?: unknown; readonly id?: unknown; readonly event?: { type?: unknown } }
    switch (frame?.type) {
      case "event":
        return shown(frame.event?.type) ? redact(data) : undefined
      case "response": {
        const { outcome } = data as { readonly outcome?: Run.RunOutcome | null }
        return { type: "response", id: frame.id, ...(outcome == null ? {} : { outcome: reduceOutcome(outcome) }) }
      }
      case "snapshot":
        return redact(data)
      default:
        return undefined
    }
  }
}

/** `frameView` over log entries: the entry itself when unchanged, so its encoding is shared with other watchers. */
export const entryView = (grant: Auth.BrowserGrant) => {
  const view = frameView(grant)
  return (entry: EventLog.Entry): EventLog.Entry | undefined => {
    const data = view(entry.data)
    if (data === undefined) return undefined
    return data === entry.data ? entry : { id: entry.id, data, json: JSON.stringify(data) }
  }
}

/** A poll's events as `grant` shows them; the cursor stays the last id read. */
export const viewPoll = (grant: Auth.BrowserGrant, poll: EventLog.Poll): EventLog.Poll => {
  const view = frameView(grant)
  return {
    cursor: poll.cursor,
    events: poll.events.flatMap((entry) => {
      const data = view(entry.data)
      return data === undefined ? [] : [{ id: entry.id, data }]
    })
  }
}

/**
 * Whether the grant shows what the agent was told: its history, or events that carry the user's messages
 * (`message_start`/`message_end`, each with the prompt's text and metadata).
 */
export const showsMessages = (grant: Auth.BrowserGrant): boolean =>
  grant.scopes.includes("history") ||
  (grant.scopes.includes("events") &&
    (grant.events === "default" || grant.events.includes("message_start") || grant.events.includes("message_end")))

/**
 * A request record with its outcome reduced (see `reduceOutcome`); without `input`, also without what the
 * request said (`prompt`, an execute's `code`, `metadata`): that is history's and the events', not state's.
 */
export const viewRecord = (record: Run.RequestRecord, input = true): Run.RequestRecord => {
  if (record.outcome === undefined && (input || !("prompt" in record || "code" in record || "metadata" in record))) {
    return record
  }
  const { code: _code, metadata: _metadata, prompt: _prompt, ...bookkeeping } = record
  return new Run.RequestRecord({
    ...(input ? record : bookkeeping),
    ...(record.outcome === undefined ? {} : { outcome: new Run.RunOutcome(reduceOutcome(record.outcome)) })
  })
}

/**
 * State as `grant` shows it: the cursor, resume, and the requests with their outcomes reduced; what a request
 * said only when the grant also shows it elsewhere (`showsMessages`), so a token with the `state` scope alone
 * sees which runs ran and how they ended, never what they were asked.
 */
export const viewState = (grant: Auth.BrowserGrant, state: Session.SessionState): Session.SessionState => {
  const input = showsMessages(grant)
  return new Session.SessionState({ ...state, requests: state.requests.map((record) => viewRecord(record, input)) })
}

export const viewHistory = (grant: Auth.BrowserGrant, page: Session.HistoryPage): Session.HistoryPage =>
  grant.redact.includes("usage.cost")
    ? new Session.HistoryPage({
      ...page,
      entries: page.entries.map((entry) => {
        const message = redactCost(entry.message)
        return message === entry.message ? entry : new Session.HistoryEntry({ index: entry.index, message })
      })
    })
    : page
