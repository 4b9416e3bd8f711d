/**
 * The Promise API, for applications that do not use Effect.
 *
 * `new AgentRuntime({ baseUrl, apiKey })` acts for the tenant with its API
 * key (`art_…`): create agents, prompt them, read their requests, history
 * and events. `connectAgent({ baseUrl, agentId, token })` acts as one agent
 * with the agent's own token (`aat_…`, from `createAgent`) on the
 * `/clients/{id}/…` routes, and serves its tools (`serve`).
 *
 * Every failure is thrown as an SDK error: ApiError (`status`, `code` and
 * `message` from the runtime's `{error, code}` body), TransportError,
 * InvalidOptions. Requests that are safe to repeat are retried on network
 * errors, 5xx and 429 (honouring `Retry-After`): reads, and every POST
 * carrying a request id (the SDK makes one up when none is given, and sends
 * the same one again: the runtime answers it once). Redirects are never
 * followed; the base URL must be https, except for localhost and 127.0.0.1.
 */
import type { Agent, Run, Session } from "@agent-runtime/domain"
import type { HttpClient } from "@effect/platform"
import { Duration, Effect, Either } from "effect"
import { randomUUID } from "node:crypto"
import * as EventStream from "./EventStream.ts"
import * as Http from "./internal/http.ts"
import { run } from "./internal/promise.ts"
import * as Runs from "./Runs.ts"
import type { ApiError, TransportError } from "./SdkError.ts"
import * as Serve from "./Serve.ts"

export type AgentInput = typeof Agent.AgentInput.Encoded
export type AgentCreated = typeof Agent.AgentCreated.Encoded
export type AgentDetail = typeof Agent.AgentDetail.Encoded
export type PromptInput = typeof Run.PromptInput.Encoded
export type ConfigureInput = typeof Agent.ConfigureInput.Encoded
/** What an agent may change about itself over its own token. */
export type AgentConfigureInput = Omit<ConfigureInput, "keyScope" | "spendLimit" | "modelHeaders" | "mounts">
export type RequestRecord = typeof Run.RequestRecord.Encoded
export type HistoryPage = typeof Session.HistoryPage.Encoded
export type SessionState = typeof Session.SessionState.Encoded

export interface CallOptions {
  /** Aborting it stops the call (and its retries); the promise rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined
}

export interface WaitOptions extends CallOptions {
  /** Seconds to wait for the request to settle; longer than 25 s is several long polls. */
  readonly wait?: number | undefined
}

export interface HistoryOptions extends CallOptions {
  /** The `next` of the previous page. */
  readonly before?: number | undefined
  /** About this many messages, rounded to whole turns (50 by default). */
  readonly limit?: number | undefined
}

export interface EventsOptions {
  /** Start after this cursor (a frame's `id`); from now when absent. */
  readonly cursor?: number | undefined
  /** Aborting it ends the iteration. */
  readonly signal?: AbortSignal | undefined
}

/** A request id for a POST that is retried: the runtime answers the same id once. */
const requestId = (given: string | undefined): string => given ?? `req_${randomUUID().replaceAll("-", "")}`

const targetOrThrow = (baseUrl: string | URL, token: string): Http.Target =>
  Either.getOrThrowWith(
    Either.flatMap(Http.checkBaseUrl(baseUrl), (url) => Either.right({ baseUrl: url, token })),
    (error) => error
  )

/** The longest single long poll the runtime allows. */
const longPollSeconds = 25

/**
 * GET a request until it settles or `wait` seconds pass, in long polls of at
 * most 25 s; at once when `wait` is 0 or absent.
 */
const awaitRecord = (
  target: Http.Target,
  path: string,
  wait: number
): Effect.Effect<RequestRecord, ApiError | TransportError, HttpClient.HttpClient> =>
  Effect.suspend(() => {
    const until = Date.now() + Math.max(0, wait) * 1000
    const poll = (): Effect.Effect<
      RequestRecord,
      ApiError | TransportError,
      HttpClient.HttpClient
    > => {
      const seconds = Math.min(longPollSeconds, Math.max(0, Math.ceil((until - Date.now()) / 1000)))
      return Effect.flatMap(
        Http.json(target, {
          method: "GET",
          path,
          query: { wait: seconds > 0 ? seconds : undefined },
          retry: true,
          timeout: Duration.sum(Http.defaultTimeout, Duration.seconds(seconds))
        }),
        (body) => {
          const record = body as RequestRecord
          return record.state === "completed" || Date.now() >= until - 500 ? Effect.succeed(record) : poll()
        }
      )
    }
    return poll()
  })

/** The tenant's side: agents made, prompted and read with the API key. */
export class AgentRuntime {
  readonly #target: Http.Target
  readonly #fetch: typeof globalThis.fetch | undefined
  /** Stateless runs: one input in, one answer out (see Runs). */
  readonly runs: Runs.Runs

  /** Throws InvalidOptions for a base URL that is not https (http only for localhost and 127.0.0.1). */
  constructor(options: {
    readonly baseUrl: string | URL
    readonly apiKey: string
    /** The fetch to use; the global one by default. */
    readonly fetch?: typeof globalThis.fetch | undefined
  }) {
    this.#target = targetOrThrow(options.baseUrl, options.apiKey)
    this.#fetch = options.fetch
    this.runs = new Runs.Runs(this.#target, this.#fetch)
  }

  get baseUrl(): string {
    return this.#target.baseUrl.toString()
  }

  #call<A>(request: Http.Request, options?: CallOptions): Promise<A> {
    return run(Http.json(this.#target, request), { fetch: this.#fetch, signal: options?.signal }) as Promise<A>
  }

  /**
   * Creates an agent (its first prompt in `input.prompt`, if any). With an
   * `idempotencyKey` the agent is keyed: the same key and input return the
   * same agent, so the call is retried; without one it is sent once.
   */
  createAgent(
    input: AgentInput = {},
    options?: CallOptions & { readonly idempotencyKey?: string | undefined }
  ): Promise<AgentCreated> {
    const key = options?.idempotencyKey
    return this.#call({
      method: "POST",
      path: "/v1/agents",
      json: input,
      headers: key === undefined ? undefined : { "idempotency-key": key },
      retry: key !== undefined
    }, options)
  }

  getAgent(agentId: string, options?: CallOptions): Promise<AgentDetail> {
    return this.#call({ method: "GET", path: `/v1/agents/${Http.segment(agentId)}`, retry: true }, options)
  }

  deleteAgent(agentId: string, options?: CallOptions): Promise<{ readonly id: string; readonly deleted: true }> {
    return this.#call({ method: "DELETE", path: `/v1/agents/${Http.segment(agentId)}`, retry: true }, options)
  }

  /** Sends a prompt; answers its request record at once (`running`). Read the outcome with `request`. */
  prompt(agentId: string, input: PromptInput, options?: CallOptions): Promise<RequestRecord> {
    return this.#call({
      method: "POST",
      path: `/v1/agents/${Http.segment(agentId)}/prompt`,
      json: { ...input, requestId: requestId(input.requestId) },
      retry: true
    }, options)
  }

  /** Runs a turn on the history as it is. */
  continue(
    agentId: string,
    input: { readonly requestId?: string } = {},
    options?: CallOptions
  ): Promise<RequestRecord> {
    return this.#call({
      method: "POST",
      path: `/v1/agents/${Http.segment(agentId)}/continue`,
      json: { requestId: requestId(input.requestId) },
      retry: true
    }, options)
  }

  /** Cancels queued runs and stops the running turn; answers the abort's own record, settled. */
  abort(agentId: string, input: { readonly requestId?: string } = {}, options?: CallOptions): Promise<RequestRecord> {
    return this.#call({
      method: "POST",
      path: `/v1/agents/${Http.segment(agentId)}/abort`,
      json: { requestId: requestId(input.requestId) },
      retry: true
    }, options)
  }

  /** Changes settings at once; absent fields stay, null removes. */
  configure(agentId: string, input: ConfigureInput, options?: CallOptions): Promise<RequestRecord> {
    return this.#call({
      method: "POST",
      path: `/v1/agents/${Http.segment(agentId)}/configure`,
      json: { ...input, requestId: requestId(input.requestId) },
      retry: true
    }, options)
  }

  /** A request's record; with `wait`, once it settles or `wait` seconds pass. */
  request(agentId: string, id: string, options?: WaitOptions): Promise<RequestRecord> {
    return run(
      awaitRecord(this.#target, `/v1/agents/${Http.segment(agentId)}/requests/${Http.segment(id)}`, options?.wait ?? 0),
      { fetch: this.#fetch, signal: options?.signal }
    )
  }

  history(agentId: string, options?: HistoryOptions): Promise<HistoryPage> {
    return this.#call({
      method: "GET",
      path: `/v1/agents/${Http.segment(agentId)}/history`,
      query: { before: options?.before, limit: options?.limit },
      retry: true
    }, options)
  }

  state(agentId: string, options?: CallOptions): Promise<SessionState> {
    return this.#call({ method: "GET", path: `/v1/agents/${Http.segment(agentId)}/state`, retry: true }, options)
  }

  /** The agent's event stream, reconnecting by itself (see EventStream). */
  events(agentId: string, options: EventsOptions = {}): AsyncIterable<EventStream.Frame> {
    return EventStream.iterate({
      baseUrl: this.#target.baseUrl,
      token: this.#target.token,
      path: `/v1/agents/${Http.segment(agentId)}/events`,
      cursor: options.cursor,
      signal: options.signal,
      fetch: this.#fetch
    })
  }
}

/** An agent's own credentials: what `createAgent` answers (`id`, `token`) and where the runtime is. */
export interface AgentCredentials {
  readonly baseUrl: string | URL
  readonly agentId: string
  /** The agent's own token (`aat_…`). */
  readonly token: string
  readonly fetch?: typeof globalThis.fetch | undefined
}

/** One agent, acted on with its own token on `/clients/{id}/…`. */
export class AgentHandle {
  readonly agentId: string
  readonly #target: Http.Target
  readonly #fetch: typeof globalThis.fetch | undefined
  readonly #streams = new Set<AbortController>()
  readonly #servers = new Set<Serve.Server>()

  /** Throws InvalidOptions for a base URL that is not https (http only for localhost and 127.0.0.1). */
  constructor(credentials: AgentCredentials) {
    this.agentId = credentials.agentId
    this.#target = targetOrThrow(credentials.baseUrl, credentials.token)
    this.#fetch = credentials.fetch
  }

  get #path(): string {
    return `/clients/${Http.segment(this.agentId)}`
  }

  #call<A>(request: Http.Request, options?: CallOptions): Promise<A> {
    return run(Http.json(this.#target, request), { fetch: this.#fetch, signal: options?.signal }) as Promise<A>
  }

  #request(body: Record<string, unknown>, options?: CallOptions): Promise<RequestRecord> {
    return this.#call({ method: "POST", path: `${this.#path}/requests`, json: body, retry: true }, options)
  }

  /** Sends a prompt; answers its request record at once. */
  prompt(input: PromptInput, options?: CallOptions): Promise<RequestRecord> {
    return this.#request({ ...input, method: "prompt", requestId: requestId(input.requestId) }, options)
  }

  /** A prompt for the running turn, taken after its current step (a new turn when none runs). */
  steer(input: Omit<PromptInput, "whileRunning">, options?: CallOptions): Promise<RequestRecord> {
    return this.#request({ ...input, method: "steer", requestId: requestId(input.requestId) }, options)
  }

  /** Runs a turn on the history as it is. */
  continue(input: { readonly requestId?: string } = {}, options?: CallOptions): Promise<RequestRecord> {
    return this.#request({ method: "continue", requestId: requestId(input.requestId) }, options)
  }

  /** Changes the agent's settings (not keyScope, spendLimit or modelHeaders: those are the tenant's). */
  configure(input: AgentConfigureInput, options?: CallOptions): Promise<RequestRecord> {
    return this.#request({ ...input, method: "configure", requestId: requestId(input.requestId) }, options)
  }

  /** The agent's status now, as a settled request record (`outcome.result`). */
  status(options?: CallOptions): Promise<RequestRecord> {
    return this.#request({ method: "status" }, options)
  }

  /** Cancels queued runs and stops the running turn; answers the abort's own record, settled. */
  abort(input: { readonly requestId?: string } = {}, options?: CallOptions): Promise<RequestRecord> {
    return this.#request({ method: "abort", requestId: requestId(input.requestId) }, options)
  }

  /** A request's record; with `wait`, once it settles or `wait` seconds pass. */
  request(id: string, options?: WaitOptions): Promise<RequestRecord> {
    return run(awaitRecord(this.#target, `${this.#path}/requests/${Http.segment(id)}`, options?.wait ?? 0), {
      fetch: this.#fetch,
      signal: options?.signal
    })
  }

  history(options?: HistoryOptions): Promise<HistoryPage> {
    return this.#call({
      method: "GET",
      path: `${this.#path}/history`,
      // Always a page: without `limit` or `before` this route answers the whole history ({messages}).
      query: { before: options?.before, limit: options?.limit ?? 50 },
      retry: true
    }, options)
  }

  /**
   * The agent's events as a follower (`watch=1`: never serves tools),
   * reconnecting by itself from the last cursor (see EventStream). Ends on
   * `close()`, on `signal`, or when the loop is left.
   */
  events(options: EventsOptions = {}): AsyncIterable<EventStream.Frame> {
    const controller = new AbortController()
    const signal = options.signal === undefined
      ? controller.signal
      : AbortSignal.any([controller.signal, options.signal])
    const iterable = EventStream.iterate({
      ...EventStream.agentOptions({
        baseUrl: this.#target.baseUrl,
        agentId: this.agentId,
        token: this.#target.token,
        cursor: options.cursor
      }),
      signal,
      fetch: this.#fetch
    })
    const streams = this.#streams
    return {
      [Symbol.asyncIterator]() {
        streams.add(controller)
        const iterator = iterable[Symbol.asyncIterator]()
        const forget = <R>(result: R) => {
          streams.delete(controller)
          return result
        }
        return {
          next: () =>
            iterator.next().then((result) => (result.done === true ? forget(result) : result), (error) => {
              forget(undefined)
              throw error
            }),
          return: (value?: unknown) =>
            (iterator.return?.(value) ?? Promise.resolve({ done: true as const, value: undefined })).then(forget)
        }
      }
    }
  }

  /** Serves tools for this agent (see Serve.serve). */
  async serve(tools: ReadonlyArray<Serve.Tool<any>>, options: Serve.Options = {}): Promise<Serve.Server> {
    const server = await Serve.serve(
      { baseUrl: this.#target.baseUrl, agentId: this.agentId, token: this.#target.token },
      tools,
      { ...options, fetch: options.fetch ?? this.#fetch }
    )
    this.#servers.add(server)
    void server.done.then(() => this.#servers.delete(server))
    return server
  }

  /** Closes what this handle opened: event streams at once, servers as their `close()` does. */
  async close(): Promise<void> {
    for (const controller of this.#streams) controller.abort()
    this.#streams.clear()
    await Promise.all([...this.#servers].map((server) => server.close()))
  }
}

/** An agent, acted on with its own token (no tenant key needed, e.g. after a restart). */
export const connectAgent = (credentials: AgentCredentials): AgentHandle => new AgentHandle(credentials)
