/**
 * The two requests of every turn, `POST /v1/agents/{id}/prompt` and
 * `GET /v1/agents/{id}/requests/{requestId}`, served straight from
 * node:http: the HttpApi pipeline (request wrapper, tracer and logger
 * middlewares, router, security middleware, response conversion) costs a
 * node about 0.4 ms of CPU per request before any handler, as much as a
 * whole turn's statements (docs/benchmarks.md). The same services, schemas
 * (the endpoints' own), errors and log line serve them here.
 *
 * Only the common case is taken: an API key, no Origin header (browsers get
 * the API's CORS handling), a path of plain characters, for a prompt a JSON
 * body with its length declared and within MAX_BODY_BYTES, for a request no
 * query but `wait`. Anything else goes on to the API, untouched.
 */
import { Tokens } from "@agent-runtime/accounts"
import { Agents } from "@agent-runtime/agent"
import { Api, type ApiError, Run, Token } from "@agent-runtime/domain"
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { NodeSpans, TraceParent } from "@agent-runtime/telemetry"
import { Headers, HttpTraceContext } from "@effect/platform"
import { Context, Duration, Effect, FiberRef, Layer, LogLevel, Option, Runtime, Schema } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import * as Metrics from "../Metrics.ts"
import { ServerConfig } from "../ServerConfig.ts"
import { apiKey, apiKeyCaller } from "./Authentication.ts"
import * as Errors from "./Errors.ts"

const promptPath = /^\/v1\/agents\/([\w.~-]+)\/prompt$/
const requestPath = /^\/v1\/agents\/([\w.~-]+)\/requests\/([\w.~-]+)(?:\?wait=([\w.~-]*))?$/

// The endpoints' routes as the API's router names them, for their spans and metrics.
const promptRoute = "/v1/agents/:id/prompt"
const requestRoute = "/v1/agents/:id/requests/:requestId"

// The endpoints' own schemas and statuses.
const decodePrompt = Schema.decodeUnknown(Api.payload(Run.PromptInput))
const decodeRequestParams = Schema.decodeUnknown(Api.RequestParams)
const encodeRecord = Schema.encode(Run.RequestRecord)

/** Serves a request if it is one of the hot routes' common case; false hands it on to the API. */
export class HotRoutes extends Context.Tag("@agent-runtime/server/HotRoutes")<
  HotRoutes,
  { readonly serve: (request: IncomingMessage, response: ServerResponse) => boolean }
>() {}

/** A node:http server that offers each request to the hot routes before its own listeners (the API's). */
export const server = (hot: HotRoutes["Type"]): Server => {
  const created = createServer()
  const emit = created.emit
  created.emit = function(this: Server, event: string | symbol, ...args: Array<any>) {
    if (event === "request" && hot.serve(args[0], args[1])) return true
    return emit.apply(this, [event, ...args] as Parameters<Server["emit"]>)
  } as Server["emit"]
  return created
}

/** The body as it arrived (its declared length, which node holds it to). */
const body = (request: IncomingMessage) =>
  Effect.async<Buffer, ApiError.InvalidRequest>((resume) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resume(Effect.succeed(Buffer.concat(chunks))))
    request.on("error", () => resume(Effect.fail(Errors.unreadableJson)))
  })

const parse = (bytes: Buffer) =>
  Effect.flatMap(
    // An empty body is null, as the API reads it.
    Effect.try({
      try: () => JSON.parse(bytes.length === 0 ? "null" : bytes.toString("utf8")) as unknown,
      catch: () => Errors.unreadableJson
    }),
    Errors.checkedJson
  )

const send = (response: ServerResponse, status: number, value: unknown, headers?: Record<string, string>) => {
  const text = JSON.stringify(value)
  response.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text)
  })
  response.end(text)
}

export const layer: Layer.Layer<
  HotRoutes,
  never,
  DatabaseHealth.DatabaseHealth | Tokens.Tokens | Agents.Agents | ServerConfig
> = Layer.effect(
  HotRoutes,
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const agents = yield* Agents.Agents
    const tokens = yield* Tokens.Tokens
    const health = yield* DatabaseHealth.DatabaseHealth
    const exporting = yield* NodeSpans.Exporting
    const runtime = yield* Effect.runtime<never>()
    // Without an exporter the answers run with the tracer off, so no library makes a span in them either (see
    // NodeSpans): set on the runtime they are forked from, not around each answer.
    const runFork = Runtime.runFork(
      exporting ? runtime : Runtime.setFiberRef(runtime, FiberRef.currentTracerEnabled, false)
    )
    // The line each answer logs, as the API's logger middleware does, is made only where it is written.
    const logsAnswers = LogLevel.lessThanEqual(yield* FiberRef.get(FiberRef.currentMinimumLogLevel), LogLevel.Info)

    // The API's bearer scheme takes whatever follows the scheme's 7 characters.
    const secretOf = (request: IncomingMessage) => request.headers.authorization!.slice(7)
    /** A bad key is answered before a bad request, as the API answers it before reading the request. */
    const keyFirst = (request: IncomingMessage) => Effect.tapError(() => apiKey(tokens, secretOf(request)))

    // The key is checked in the statement that reads the agent (and with each read of the request).
    const prompt = (request: IncomingMessage, agentId: string) =>
      Effect.gen(function*() {
        const payload = yield* Effect.flatMap(Effect.flatMap(body(request), parse), decodePrompt).pipe(
          Effect.catchTag("ParseError", Errors.invalidInput),
          keyFirst(request)
        )
        const accepted = agents.promptAs(apiKeyCaller(tokens, secretOf(request)), agentId, payload)
        const traceparent = TraceParent.valid(request.headers.traceparent)
        return yield* encodeRecord(
          yield* traceparent === undefined ? accepted : Effect.locally(accepted, TraceParent.fromCaller, traceparent)
        )
      })

    const settled = (request: IncomingMessage, agentId: string, requestId: string, wait: string | undefined) =>
      Effect.gen(function*() {
        const params = yield* decodeRequestParams(wait === undefined ? {} : { wait }).pipe(
          Effect.catchTag("ParseError", Errors.invalidInput),
          keyFirst(request)
        )
        const record = yield* agents.requestAs(
          apiKeyCaller(tokens, secretOf(request)),
          agentId,
          requestId,
          Duration.seconds(params.wait ?? 0)
        )
        return yield* encodeRecord(record)
      })

    /**
     * The server span the API's tracer would open (named, parented by a caller's `traceparent` and described
     * as it does), made only while the node exports its spans: without an exporter a span is cost for nothing.
     */
    const traced = exporting
      ? (request: IncomingMessage, route: string, answering: Effect.Effect<number>) =>
        Effect.useSpan(`http.server ${request.method}`, {
          kind: "server",
          captureStackTrace: false,
          parent: Option.getOrUndefined(HttpTraceContext.fromHeaders(Headers.fromInput(request.headers)))
        }, (span) => {
          const url = request.url ?? ""
          const query = url.indexOf("?")
          span.attribute("http.request.method", request.method)
          span.attribute("url.path", query === -1 ? url : url.slice(0, query))
          if (query !== -1) span.attribute("url.query", url.slice(query + 1))
          span.attribute("url.scheme", "http")
          span.attribute("http.route", route)
          if (request.headers["user-agent"] !== undefined) {
            span.attribute("user_agent.original", request.headers["user-agent"])
          }
          return Effect.tap(
            Effect.withParentSpan(answering, span),
            (status) => span.attribute("http.response.status_code", status)
          )
        })
      : (_request: IncomingMessage, _route: string, answering: Effect.Effect<number>) => answering

    /**
     * Answers with `effect`'s value, or its failure as the API answers it; logged, traced and counted under
     * `route` (the endpoint's pattern) as the API does.
     */
    const answer = (
      request: IncomingMessage,
      response: ServerResponse,
      route: string,
      status: number,
      effect: Effect.Effect<unknown, unknown>
    ) => {
      const started = performance.now()
      Metrics.requestStarted()
      const answering = effect.pipe(
        PersistenceError.orDie,
        Effect.matchCauseEffect({
          onSuccess: (value) => Effect.sync(() => send(response, status, value)).pipe(Effect.as(status)),
          onFailure: (cause) =>
            Effect.map(Errors.failureOf(health, request.method, cause), (error) => {
              const answered = Errors.answerOf(error)
              send(response, answered.status, answered.body, answered.headers)
              return answered.status
            })
        }),
        logsAnswers
          ? Effect.tap((sent) =>
            Effect.annotateLogs(Effect.log("Sent HTTP response"), {
              "http.method": request.method,
              "http.url": request.url,
              "http.status": sent
            })
          )
          : (answered) => answered
      )
      const fiber = runFork(
        traced(request, route, answering).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              Metrics.requestEnded()
              // A client that left before its answer, as the platform counts it.
              const sent = exit._tag === "Success" ? exit.value : 499
              Metrics.observeRequest(request.method!, route, sent, (performance.now() - started) / 1000)
            })
          )
        )
      )
      // A client that left: what it asked for stops, as in the API.
      response.on("close", () => {
        if (!response.writableEnded) fiber.unsafeInterruptAsFork(fiber.id())
      })
    }

    const isCommon = (request: IncomingMessage) =>
      request.headers.origin === undefined && request.headers.authorization?.startsWith(`Bearer ${Token.apiKeyPrefix}`)

    return HotRoutes.of({
      serve: (request, response) => {
        const url = request.url ?? ""
        if (request.method === "POST") {
          const match = promptPath.exec(url)
          const length = Number(request.headers["content-length"])
          if (
            match === null || !isCommon(request) || !(length <= config.maxBodyBytes) ||
            request.headers["content-type"]?.split(";")[0]!.trim().toLowerCase() !== "application/json"
          ) return false
          answer(request, response, promptRoute, Api.promptAccepted, prompt(request, match[1]!))
          return true
        }
        if (request.method === "GET") {
          const match = requestPath.exec(url)
          if (match === null || !isCommon(request)) return false
          answer(request, response, requestRoute, 200, settled(request, match[1]!, match[2]!, match[3]))
          return true
        }
        return false
      }
    })
  })
)
