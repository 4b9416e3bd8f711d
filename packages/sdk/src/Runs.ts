/**
 * Stateless runs: one input in, one answer out (see docs/runs.md). With an
 * output schema, the answer comes back typed: an Effect `Schema` is sent as
 * its JSON Schema and the run's `output` decoded with it, so what only the
 * Schema can check (refinements, transformations) is checked here, failing
 * with OutputInvalid (`output_invalid`); a plain JSON Schema is sent as it
 * is and the output returned as the runtime checked it.
 *
 * ```ts
 * const Vote = Schema.Struct({ vote: Schema.Literal("yes", "no"), reason: Schema.String })
 * const run = await runtime.runs.create({ systemPrompt: "Vote yes or no.", input: "Ship on Friday?", output: Vote })
 * run.output // { vote: "no", reason: "…" }, typed
 * ```
 *
 * Effect users call `client.runs.create(...)` of the typed RuntimeClient with `outputSpec(schema)` and decode
 * with `decodeOutput(schema)`.
 */
import { Run as RunSchemas, type Session, type StatelessRun } from "@agent-runtime/domain"
import type { HttpClient } from "@effect/platform"
import { Duration, Effect, Either, JSONSchema, ParseResult, Schema } from "effect"
import { randomUUID } from "node:crypto"
import * as EventStream from "./EventStream.ts"
import * as Http from "./internal/http.ts"
import { run as runPromise } from "./internal/promise.ts"
import { type ApiError, OutputInvalid, type TransportError } from "./SdkError.ts"

export type Run = typeof StatelessRun.StatelessRun.Encoded
export type HistoryPage = typeof Session.HistoryPage.Encoded

/** An output schema: an Effect Schema of the answer, or a JSON Schema object (`type: "object"`). */
export type OutputSchema<A> = Schema.Schema<A, any, never> | Readonly<Record<string, unknown>>

/** A run's input as the runtime takes it, with `output` as a schema of either kind. */
export type RunInput<A = unknown> =
  & Omit<typeof StatelessRun.RunInput.Encoded, "output" | "wait">
  & { readonly output?: OutputSchema<A> | undefined }

/** A run whose `output` is the decoded answer. */
export type TypedRun<A> = Omit<Run, "output"> & { readonly output?: A }

const isEffectSchema = <A>(schema: OutputSchema<A>): schema is Schema.Schema<A, any, never> => Schema.isSchema(schema)

/** The JSON Schema of an Effect Schema, whole at the top level (the runtime wants `type: "object"` there). */
const jsonSchemaOf = (schema: Schema.Schema.Any): Record<string, unknown> => {
  const definitions: Record<string, JSONSchema.JsonSchema7> = {}
  const root = JSONSchema.fromAST(schema.ast, { definitions, topLevelReferenceStrategy: "skip" })
  return Object.keys(definitions).length === 0 ? { ...root } : { ...root, $defs: definitions }
}

/** The `output` field of a run or a prompt for `schema` (for the Promise API's JSON and the typed client alike). */
export const outputSpec = <A>(schema: OutputSchema<A>): RunSchemas.OutputSpec =>
  new RunSchemas.OutputSpec({ schema: isEffectSchema(schema) ? jsonSchemaOf(schema) : { ...schema } })

/**
 * The run (as the Promise API or the typed client answers it) with its output decoded by `schema` (an Effect
 * Schema), or OutputInvalid; as it is for a JSON Schema.
 */
export const decodeOutput =
  <A>(schema: OutputSchema<A>) =>
  <R extends { readonly id: string; readonly output?: unknown }>(
    run: R
  ): Effect.Effect<Omit<R, "output"> & { readonly output?: A }, OutputInvalid> => {
    if (!isEffectSchema(schema) || run.output === undefined) {
      return Effect.succeed(run as Omit<R, "output"> & { readonly output?: A })
    }
    return Either.match(Schema.decodeUnknownEither(schema)(run.output, { errors: "all" }), {
      onLeft: (error) =>
        Effect.fail(
          new OutputInvalid({
            message: `run ${run.id}: the output does not fit the schema: ${
              ParseResult.TreeFormatter.formatErrorSync(error)
            }`,
            runId: run.id
          })
        ),
      onRight: (output) => Effect.succeed({ ...run, output })
    })
  }

export interface CreateOptions {
  /** Seconds to wait for the run's end before answering it running; until it ends when absent. */
  readonly wait?: number | undefined
  /** The same key and input are the same run; one is made up per call when absent, so retries are safe. */
  readonly idempotencyKey?: string | undefined
  readonly signal?: AbortSignal | undefined
}

/** The longest wait the runtime takes on a create, and on a read. */
const createWaitSeconds = 60
const readWaitSeconds = 25

const isEnded = (run: Run) => run.status !== "running"

/** Stateless runs over the tenant's API key; `AgentRuntime.runs`. */
export class Runs {
  readonly #target: Http.Target
  readonly #fetch: typeof globalThis.fetch | undefined

  constructor(target: Http.Target, fetch: typeof globalThis.fetch | undefined) {
    this.#target = target
    this.#fetch = fetch
  }

  #promise<A, E>(effect: Effect.Effect<A, E, HttpClient.HttpClient>, signal: AbortSignal | undefined) {
    return runPromise(effect, { fetch: this.#fetch, signal })
  }

  #get(id: string, wait: number): Effect.Effect<Run, ApiError | TransportError, HttpClient.HttpClient> {
    return Effect.map(
      Http.json(this.#target, {
        method: "GET",
        path: `/v1/runs/${Http.segment(id)}`,
        query: { wait: wait > 0 ? wait : undefined },
        retry: true,
        timeout: Duration.sum(Http.defaultTimeout, Duration.seconds(wait))
      }),
      (body) => body as Run
    )
  }

  /** Reads the run until it ends or `seconds` pass, in long polls. */
  #until(run: Run, seconds: number): Effect.Effect<Run, ApiError | TransportError, HttpClient.HttpClient> {
    const deadline = Date.now() + seconds * 1000
    const poll = (current: Run): Effect.Effect<Run, ApiError | TransportError, HttpClient.HttpClient> => {
      const left = Math.ceil((deadline - Date.now()) / 1000)
      return isEnded(current) || left <= 0
        ? Effect.succeed(current)
        : Effect.flatMap(this.#get(current.id, Math.min(readWaitSeconds, left)), poll)
    }
    return poll(run)
  }

  /**
   * Starts a run and answers it once it ends (or `wait` seconds pass); with an Effect Schema as `output`, its
   * output typed (OutputInvalid when the Schema refuses what the runtime's JSON Schema check let through).
   */
  create<A = unknown>(input: RunInput<A>, options: CreateOptions = {}): Promise<TypedRun<A>> {
    const wait = options.wait ?? Number.POSITIVE_INFINITY
    const { output, ...rest } = input
    const created = Effect.map(
      Http.json(this.#target, {
        method: "POST",
        path: "/v1/runs",
        json: {
          ...rest,
          ...(output === undefined ? {} : { output: outputSpec(output) }),
          wait: Math.min(wait, createWaitSeconds)
        },
        headers: { "idempotency-key": options.idempotencyKey ?? `run-${randomUUID()}` },
        retry: true,
        timeout: Duration.sum(Http.defaultTimeout, Duration.seconds(Math.min(wait, createWaitSeconds)))
      }),
      (body) => body as Run
    )
    return this.#promise(
      created.pipe(
        Effect.flatMap((run) => this.#until(run, wait === Number.POSITIVE_INFINITY ? Number.MAX_SAFE_INTEGER : wait)),
        Effect.flatMap(output === undefined ? (run) => Effect.succeed(run as TypedRun<A>) : decodeOutput(output))
      ),
      options.signal
    )
  }

  /** The run; with `wait`, once it ends or `wait` seconds pass. */
  get(id: string, options: { readonly wait?: number; readonly signal?: AbortSignal } = {}): Promise<Run> {
    return this.#promise(
      Effect.flatMap(this.#get(id, 0), (run) => this.#until(run, options.wait ?? 0)),
      options.signal
    )
  }

  /**
   * The tenant's runs, by id. Without `limit`, all of them: the runtime answers up to 1000 a page and the
   * pages its `Link` header names are read in turn. With `limit`, one page of at most that many runs after
   * the run `after`; for the next, pass its last run's id as `after` (an empty page is past the end).
   */
  list(
    options: { readonly after?: string; readonly limit?: number; readonly signal?: AbortSignal } = {}
  ): Promise<ReadonlyArray<Run>> {
    const request: Http.Request = {
      method: "GET",
      path: "/v1/runs",
      query: { after: options.after, limit: options.limit },
      retry: true
    }
    return this.#promise(
      options.limit === undefined ? Http.allPages(this.#target, request) : Http.json(this.#target, request),
      options.signal
    ) as Promise<ReadonlyArray<Run>>
  }

  /** Stops a running run: it ends failed, code aborted. */
  abort(id: string, options: { readonly signal?: AbortSignal } = {}): Promise<Run> {
    return this.#promise(
      Http.json(this.#target, { method: "POST", path: `/v1/runs/${Http.segment(id)}/abort`, retry: true }),
      options.signal
    ) as Promise<Run>
  }

  /** Deletes the run now, with all it wrote. */
  delete(id: string, options: { readonly signal?: AbortSignal } = {}): Promise<{ readonly id: string }> {
    return this.#promise(
      Http.json(this.#target, { method: "DELETE", path: `/v1/runs/${Http.segment(id)}`, retry: true }),
      options.signal
    ) as Promise<{ readonly id: string }>
  }

  /** A page of the run's messages: its input, the model's responses, the tool results. */
  messages(
    id: string,
    options: { readonly before?: number; readonly limit?: number; readonly signal?: AbortSignal } = {}
  ): Promise<HistoryPage> {
    return this.#promise(
      Http.json(this.#target, {
        method: "GET",
        path: `/v1/runs/${Http.segment(id)}/messages`,
        query: { before: options.before, limit: options.limit },
        retry: true
      }),
      options.signal
    ) as Promise<HistoryPage>
  }

  /** The run's events, from its first (or after `cursor`) to its `response` frame, reconnecting as needed. */
  async *events(
    id: string,
    options: { readonly cursor?: number; readonly signal?: AbortSignal } = {}
  ): AsyncIterable<EventStream.Frame> {
    const frames = EventStream.iterate({
      baseUrl: this.#target.baseUrl,
      token: this.#target.token,
      path: `/v1/runs/${Http.segment(id)}/events`,
      cursor: options.cursor ?? 0,
      signal: options.signal,
      fetch: this.#fetch
    })
    for await (const frame of frames) {
      yield frame
      const data = frame.data as { readonly type?: string; readonly id?: string } | undefined
      if (data?.type === "response" && data.id === id) return
    }
  }

  /**
   * Starts a run and follows it: iterate its events as they come, then `result()` for the run as it ended
   * (typed as `create`'s).
   */
  async stream<A = unknown>(
    input: RunInput<A>,
    options: Omit<CreateOptions, "wait"> = {}
  ): Promise<AsyncIterable<EventStream.Frame> & { readonly id: string; readonly result: () => Promise<TypedRun<A>> }> {
    const { output } = input
    const started = await this.create(input, { ...options, wait: 0 })
    const events = this.events(started.id, options.signal === undefined ? {} : { signal: options.signal })
    const result = () =>
      this.#promise(
        this.#until(started as Run, Number.MAX_SAFE_INTEGER).pipe(
          Effect.flatMap(output === undefined ? (run) => Effect.succeed(run as TypedRun<A>) : decodeOutput(output))
        ),
        options.signal
      )
    return { id: started.id, result, [Symbol.asyncIterator]: () => events[Symbol.asyncIterator]() }
  }
}
