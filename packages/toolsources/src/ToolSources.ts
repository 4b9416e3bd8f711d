/**
 * Tool sources of a definition, remote MCP servers and OpenAPI documents,
 * as tools an agent's model can call.
 *
 * Listings are cached per node, keyed by tenant and source (and by agent for
 * `runtime` auth, whose listing is made with that agent's identity). A turn
 * never waits long for one: `peek` answers at once, `list` waits a bounded
 * time and leaves the listing running past it. A failed listing is tried
 * again only after a backoff, not on every turn; a listing is refreshed in
 * the background once it is old, and at once when an MCP server announces
 * `notifications/tools/list_changed`.
 *
 * A call is sent once and never again: when its answer does not come (a
 * deadline, a dropped connection) the result says the outcome is unknown.
 * Every request goes out through `Egress`; `runtime` auth signs a fresh
 * identity token for each HTTP request.
 */
import { Egress } from "@agent-runtime/egress"
import { IdentityTokens } from "@agent-runtime/identity"
import type { Scope } from "effect"
import { Clock, Context, Deferred, Duration, Effect, FiberId, Layer, Redacted, Runtime, Schedule } from "effect"
import * as Crypto from "node:crypto"
import type * as Elicitation from "./Elicitation.ts"
import * as Driver from "./internal/driver.ts"
import * as Mcp from "./internal/mcp.ts"
import * as OpenApi from "./internal/openapi.ts"
import * as Outcome from "./internal/outcome.ts"

/**
 * How requests to a source authenticate. `bearer` sends `Authorization:
 * Bearer <token>`; `runtime` sends a fresh identity token per request, as
 * `Authorization: Bearer <jwt>` and `x-agent-runtime-identity: <jwt>`.
 */
export type Auth =
  | { readonly type: "none" }
  | { readonly type: "bearer"; readonly token: Redacted.Redacted<string> }
  | { readonly type: "runtime" }

/** A header of the tenant's choosing, for OpenAPI sources (API key headers). */
export interface HeaderAuth {
  readonly type: "header"
  readonly name: string
  readonly value: Redacted.Redacted<string>
}

/** Names to offer: only those in `include` when given, never those in `exclude`. */
export interface Filter {
  readonly include?: ReadonlyArray<string>
  readonly exclude?: ReadonlyArray<string>
}

export interface McpSource {
  readonly kind: "mcp"
  readonly name: string
  /** The server's streamable HTTP endpoint. */
  readonly url: string
  readonly auth: Auth
  /** By tool name as the server lists it. */
  readonly tools?: Filter
}

export interface OpenApiSource {
  readonly kind: "openapi"
  readonly name: string
  /** Where the document is read from; exactly one of `url` and `document`. */
  readonly url?: string
  readonly document?: Record<string, unknown>
  /** Replaces the document's `servers[0]`. */
  readonly baseUrl?: string
  readonly auth: Auth | HeaderAuth
  /** By operationId. */
  readonly operations?: Filter
}

export type Source = McpSource | OpenApiSource

/** Who calls: the claims of `runtime` identity tokens. */
export interface Caller {
  readonly tenantId: string
  readonly agentId: string
  readonly subject?: string
  readonly actor?: string
  readonly context?: Record<string, unknown>
  readonly definition?: string
  readonly origin: string
}

export interface SourceTool {
  readonly name: string
  readonly description: string
  /** JSON Schema of the arguments (an object). */
  readonly parameters: Record<string, unknown>
  /** Replaces the source's default deadline (MCP 60 s, OpenAPI 30 s); 1 s to 20 min. */
  readonly deadlineMs?: number
  readonly executionMode?: "sequential" | "parallel"
}

export interface Listing {
  /** `unlisted`: not listed on this node yet; `error`: the last listing failed, so none of its tools are offered. */
  readonly status: "listed" | "unlisted" | "error"
  readonly tools: ReadonlyArray<SourceTool>
  /** Why the listing failed, in plain words. */
  readonly error?: string
  /** When the tools were listed, Unix seconds. */
  readonly listedAt?: number
}

export interface CallResult {
  readonly content: ReadonlyArray<{ readonly type: "text"; readonly text: string }>
  readonly isError: boolean
  /**
   * Why it failed: `failed` (the tool's own error), `timeout` and
   * `connection_lost` (outcome unknown), `unavailable` (not sent),
   * `invalid_arguments` (not sent).
   */
  readonly code?: string
  /** The tool needs a person first (see Elicitation): the call is made again with the answer. */
  readonly ask?: Elicitation.Ask
}

export interface ListOptions {
  /** How long to wait for a listing not made yet; default 10 seconds. Past it the answer is `unlisted`. */
  readonly wait?: Duration.DurationInput
}

export interface CallOptions {
  /** An MCP server's progress notifications, as they come; each also restarts the call's deadline. */
  readonly onProgress?: (progress: unknown) => Effect.Effect<void>
  /** The answer to what this call asked before (see Elicitation), when it is made again with it. */
  readonly answer?: unknown
}

export interface Service {
  /** The cached listing without waiting; `unlisted` when not listed on this node yet (a listing then starts). */
  readonly peek: (source: Source, caller: Caller) => Effect.Effect<Listing>
  /** The cached listing, or a listing made now, waiting at most `options.wait`. */
  readonly list: (source: Source, caller: Caller, options?: ListOptions) => Effect.Effect<Listing>
  /**
   * Calls one listed tool, once. Failures are results, never errors:
   * `isError` with a `code` the model and the run's outcome can read.
   * Interrupting the effect cancels the call (MCP `notifications/cancelled`,
   * the HTTP request aborted).
   */
  readonly call: (
    source: Source,
    caller: Caller,
    tool: string,
    args: Record<string, unknown>,
    options?: CallOptions
  ) => Effect.Effect<CallResult>
}

export class ToolSources extends Context.Tag("@agent-runtime/toolsources/ToolSources")<ToolSources, Service>() {}

export interface Options {
  /** A failed listing is tried again only this long after it failed. Default 30 seconds. */
  readonly retryAfter?: Duration.DurationInput
  /** A listing this old is made again in the background while it is still served. Default 5 minutes. */
  readonly refreshAfter?: Duration.DurationInput
  /** A source not used this long is forgotten and its MCP session closed. Default 15 minutes. */
  readonly idleTimeout?: Duration.DurationInput
  /** A listing taking longer fails. Default 60 seconds. */
  readonly listTimeout?: Duration.DurationInput
}

export const defaults = {
  wait: Duration.seconds(10),
  retryAfter: Duration.seconds(30),
  refreshAfter: Duration.minutes(5),
  idleTimeout: Duration.minutes(15),
  listTimeout: Duration.seconds(60)
} as const

/** What the cache knows of one source (for one tenant, and one agent under `runtime` auth). */
interface Entry {
  readonly driver: Driver.Driver
  /** The latest caller, whose identity background listings use. */
  caller: Caller
  listing: Listing
  listedAtMillis: number
  retryAtMillis: number
  /** The listing under way, if any. */
  pending: Deferred.Deferred<Listing> | undefined
  /** A change was announced while a listing ran: list again after it. */
  stale: boolean
  usedAtMillis: number
  calls: number
}

const unlisted: Listing = { status: "unlisted", tools: [] }

const documentDigests = new WeakMap<object, string>()

/** A digest of an inline document; definitions are resolved once per node, so the same object comes back. */
const documentDigest = (document: Record<string, unknown>) => {
  let digest = documentDigests.get(document)
  if (digest === undefined) {
    digest = Crypto.createHash("sha256").update(JSON.stringify(document)).digest("base64url")
    documentDigests.set(document, digest)
  }
  return digest
}

/** The cache key: a digest, so secrets of the auth never sit in it as they are. */
const keyOf = (source: Source, caller: Caller): string => {
  const { auth } = source
  const credential = auth.type === "bearer"
    ? [Redacted.value(auth.token)]
    : auth.type === "header"
    ? [auth.name, Redacted.value(auth.value)]
    : []
  const settings = source.kind === "mcp"
    ? [source.url, source.tools ?? null]
    : [
      source.url ?? null,
      source.document === undefined ? null : documentDigest(source.document),
      source.baseUrl ?? null,
      source.operations ?? null
    ]
  return Crypto.createHash("sha256").update(JSON.stringify([
    caller.tenantId,
    auth.type === "runtime" ? caller.agentId : null,
    source.kind,
    source.name,
    auth.type,
    credential,
    settings
  ])).digest("base64url")
}

export const make = (
  options: Options = {}
): Effect.Effect<Service, never, Egress.Egress | IdentityTokens.IdentityTokens | Scope.Scope> =>
  Effect.gen(function*() {
    const egress = yield* Egress.Egress
    const identity = yield* IdentityTokens.IdentityTokens
    const scope = yield* Effect.scope
    const runtime = yield* Effect.runtime<never>()
    const retryAfter = Duration.toMillis(options.retryAfter ?? defaults.retryAfter)
    const refreshAfter = Duration.toMillis(options.refreshAfter ?? defaults.refreshAfter)
    const idleTimeout = Duration.toMillis(options.idleTimeout ?? defaults.idleTimeout)
    const listTimeout = Duration.decode(options.listTimeout ?? defaults.listTimeout)
    const entries = new Map<string, Entry>()
    const runFork = Runtime.runFork(runtime)

    const startListing = (entry: Entry): Effect.Effect<Deferred.Deferred<Listing>> =>
      Effect.suspend(() => {
        if (entry.pending !== undefined) return Effect.succeed(entry.pending)
        const pending = Deferred.unsafeMake<Listing>(FiberId.none)
        entry.pending = pending
        entry.stale = false
        const listing = entry.driver.list(entry.caller).pipe(
          Effect.timeoutFail({
            duration: listTimeout,
            onTimeout: () =>
              new Driver.ListingFailed({ reason: `no answer within ${Duration.toSeconds(listTimeout)} seconds` })
          }),
          Effect.either,
          Effect.flatMap((result) =>
            Effect.map(Clock.currentTimeMillis, (now): Listing => {
              if (result._tag === "Left") {
                entry.retryAtMillis = now + retryAfter
                return { status: "error", tools: [], error: result.left.reason }
              }
              entry.listedAtMillis = now
              return { status: "listed", tools: result.right, listedAt: Math.floor(now / 1000) }
            })
          ),
          Effect.tap((listing) =>
            Effect.sync(() => {
              entry.listing = listing
            })
          ),
          // Whatever happens (an interrupt included), waiters get the latest listing and the next one may start.
          Effect.ensuring(Effect.suspend(() => {
            entry.pending = undefined
            return Deferred.succeed(pending, entry.listing)
          })),
          Effect.zipRight(Effect.suspend(() => entry.stale ? startListing(entry) : Effect.void))
        )
        return Effect.as(Effect.forkIn(listing, scope), pending)
      })

    /** Starts a listing when there is none yet, the last one failed past its backoff, or it is old. */
    const refreshIfDue = (entry: Entry, now: number) => {
      const { status } = entry.listing
      const due = status === "unlisted" ||
        (status === "error" && now >= entry.retryAtMillis) ||
        (status === "listed" && now - entry.listedAtMillis >= refreshAfter)
      return due ? startListing(entry) : Effect.void
    }

    const announceChange = (entry: Entry) =>
      Effect.suspend(() => {
        if (entry.pending !== undefined) {
          entry.stale = true
          return Effect.void
        }
        return startListing(entry)
      })

    const entryFor = (source: Source, caller: Caller): Effect.Effect<Entry> =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const key = keyOf(source, caller)
        const existing = entries.get(key)
        if (existing !== undefined) {
          existing.caller = caller
          existing.usedAtMillis = now
          return existing
        }
        const dependencies = { egress, identity, runtime, scope }
        const entry: Entry = {
          driver: source.kind === "mcp"
            ? Mcp.driver(source, dependencies, () => runFork(announceChange(entry)))
            : OpenApi.driver(source, dependencies),
          caller,
          listing: unlisted,
          listedAtMillis: 0,
          retryAtMillis: 0,
          pending: undefined,
          stale: false,
          usedAtMillis: now,
          calls: 0
        }
        entries.set(key, entry)
        return entry
      })

    const peek = Effect.fn("ToolSources.peek")(function*(source: Source, caller: Caller) {
      const entry = yield* entryFor(source, caller)
      yield* refreshIfDue(entry, entry.usedAtMillis)
      return entry.listing
    })

    const listEntry = (entry: Entry, wait: Duration.DurationInput) =>
      Effect.gen(function*() {
        yield* refreshIfDue(entry, entry.usedAtMillis)
        // A listed source answers from the cache even while it is refreshed; otherwise wait for the listing under way.
        if (entry.listing.status === "listed" || entry.pending === undefined) return entry.listing
        const pending = entry.pending
        return yield* Deferred.await(pending).pipe(
          Effect.timeoutTo({ duration: wait, onTimeout: () => entry.listing, onSuccess: (listing) => listing })
        )
      })

    const list = Effect.fn("ToolSources.list")(function*(source: Source, caller: Caller, options?: ListOptions) {
      const entry = yield* entryFor(source, caller)
      return yield* listEntry(entry, options?.wait ?? defaults.wait)
    })

    const call = Effect.fn("ToolSources.call")(
      function*(source: Source, caller: Caller, tool: string, args: Record<string, unknown>, options?: CallOptions) {
        const entry = yield* entryFor(source, caller)
        const listing = yield* listEntry(entry, defaults.wait)
        if (listing.status !== "listed") {
          return Outcome.unavailable(
            listing.status === "error"
              ? `the tool source ${source.name} could not be listed (${listing.error})`
              : `the tool source ${source.name} has not been listed yet`
          )
        }
        const listed = listing.tools.find((candidate) => candidate.name === tool)
        if (listed === undefined) return Outcome.unavailable(`the tool source ${source.name} offers no tool ${tool}`)
        entry.calls++
        return yield* entry.driver.call(caller, listed, args, options?.onProgress, options?.answer).pipe(
          Effect.ensuring(Effect.sync(() => entry.calls--))
        )
      }
    )

    // Sources no turn used for a while are forgotten, so sessions do not pile up per agent.
    const sweep = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.forEach(
        [...entries].filter(([, entry]) =>
          entry.calls === 0 && entry.pending === undefined && now - entry.usedAtMillis >= idleTimeout
        ),
        ([key, entry]) => {
          entries.delete(key)
          return entry.driver.close
        },
        { discard: true }
      ))
    yield* sweep.pipe(
      Effect.repeat(Schedule.spaced(Duration.millis(Math.min(idleTimeout, 60_000)))),
      Effect.forkIn(scope)
    )
    yield* Effect.addFinalizer(() =>
      Effect.forEach(entries.values(), (entry) => entry.driver.close, { concurrency: "unbounded", discard: true })
    )

    return ToolSources.of({ peek, list, call })
  })

/** Needs `Egress` for every request and `IdentityTokens` for `runtime` auth. */
export const layer = (
  options: Options = {}
): Layer.Layer<ToolSources, never, Egress.Egress | IdentityTokens.IdentityTokens> =>
  Layer.scoped(ToolSources, make(options))
