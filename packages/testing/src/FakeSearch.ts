/**
 * A fake web search provider for tests: one node:http server on 127.0.0.1
 * answering the search requests of Brave (GET /res/v1/web/search), Exa
 * (POST /search) and Parallel (POST /v1beta/search) in their documented
 * shapes. It checks each API's key header against one accepted key (401
 * otherwise, the message quoting the key it got, as some providers do, so
 * tests can check it never reaches an error), records every request, and
 * answers results made from the query (see `resultsFor`). Told to, it
 * answers a status or body of the test's choosing instead.
 *
 * Like `FakeUpstream`, the request path is plain node:http; Effect only owns
 * its lifetime (`start` closes it with the scope).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { setTimeout as sleep } from "node:timers/promises"

export type Api = "brave" | "exa" | "parallel"

export interface RecordedRequest {
  /** The API whose path was asked for; undefined for any other path. */
  readonly api: Api | undefined
  readonly method: string
  /** The path without its query. */
  readonly path: string
  readonly query: Readonly<Record<string, string>>
  /** Lowercased names; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>
  /** The parsed JSON body; the raw text when it is not JSON; undefined when empty. */
  readonly body: unknown
}

/** An answer in place of results. */
export interface Reply {
  readonly status: number
  /** Sent verbatim; by default the API's own error body for the status. */
  readonly body?: string
  /** Waits this long before answering. */
  readonly delayMs?: number
}

export interface Options {
  /** The key each API's key header must carry (`defaultApiKey` by default); null takes any, as a gateway would. */
  readonly apiKey?: string | null
}

export interface FakeSearch {
  /** Base URL without a path, e.g. `http://127.0.0.1:1234`: an API root for all three APIs. */
  readonly url: string
  readonly requests: () => ReadonlyArray<RecordedRequest>
  /** Answers every request that passes the key check with `reply`, until called with undefined. */
  readonly respondWith: (reply: Reply | undefined) => void
  /** Forgets recorded requests and any reply set. */
  readonly reset: () => void
}

export const defaultApiKey = "search-key-0123456789"

export interface Result {
  readonly title: string
  readonly url: string
  readonly snippet: string
  /** `YYYY-MM-DD`; Brave and Exa send it as a date-time. */
  readonly date: string
}

/** The results answered for `query`: `count` of them, numbered from 1. */
export const resultsFor = (query: string, count: number): ReadonlyArray<Result> =>
  Array.from({ length: count }, (_, index) => {
    const n = index + 1
    return {
      title: `Result ${n} for ${query}`,
      url: `https://example.test/${n}?q=${encodeURIComponent(query)}`,
      snippet: `Snippet ${n} about ${query}.`,
      date: `2026-01-${String(n).padStart(2, "0")}`
    }
  })

interface State {
  readonly apiKey: string | null
  readonly recorded: Array<RecordedRequest>
  /** Aborted at close, so a delayed reply does not outlive the server. */
  readonly closing: AbortController
  reply: Reply | undefined
}

/** Starts the server on 127.0.0.1; it closes with the scope, cutting open connections. */
export const start = (options: Options = {}): Effect.Effect<FakeSearch, never, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.async<{ readonly server: Http.Server; readonly state: State }>((resume) => {
        const state: State = {
          apiKey: options.apiKey === undefined ? defaultApiKey : options.apiKey,
          recorded: [],
          closing: new AbortController(),
          reply: undefined
        }
        const server = Http.createServer((req, res) => handle(state, req, res))
        server.once("error", (error) => resume(Effect.die(error)))
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ server, state })))
      }),
      ({ server, state }) =>
        Effect.async<void>((resume) => {
          state.closing.abort()
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    ),
    ({ server, state }): FakeSearch => ({
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      requests: () => [...state.recorded],
      respondWith: (reply) => {
        state.reply = reply
      },
      reset: () => {
        state.recorded.length = 0
        state.reply = undefined
      }
    })
  )

const routes: Record<string, { readonly api: Api; readonly method: string; readonly keyHeader: string }> = {
  "/res/v1/web/search": { api: "brave", method: "GET", keyHeader: "x-subscription-token" },
  "/search": { api: "exa", method: "POST", keyHeader: "x-api-key" },
  "/v1beta/search": { api: "parallel", method: "POST", keyHeader: "x-api-key" }
}

const handle = (state: State, req: Http.IncomingMessage, res: Http.ServerResponse) => {
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    respond(state, req, res, Buffer.concat(chunks).toString("utf8")).catch(() => res.destroy())
  })
}

type Json = { readonly [key: string]: unknown }

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const respond = async (state: State, req: Http.IncomingMessage, res: Http.ServerResponse, raw: string) => {
  const url = new URL(req.url ?? "/", "http://fake")
  const method = req.method ?? "GET"
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value
  }
  let body: unknown = undefined
  if (raw !== "") {
    try {
      body = JSON.parse(raw)
    } catch {
      body = raw
    }
  }
  const route = routes[url.pathname]
  state.recorded.push({
    api: route?.api,
    method,
    path: url.pathname,
    query: Object.fromEntries(url.searchParams),
    headers,
    body
  })
  if (route === undefined || route.method !== method) {
    return send(res, 404, { error: `no route ${method} ${url.pathname}` })
  }
  const { api } = route
  const presented = headers[route.keyHeader]
  if (state.apiKey !== null && presented !== state.apiKey) {
    return send(res, 401, errorBody(api, 401, `invalid API key ${presented ?? "(none)"}`))
  }
  if (state.reply !== undefined) {
    const reply = state.reply
    if (reply.delayMs !== undefined) await sleep(reply.delayMs, undefined, { signal: state.closing.signal })
    return reply.body === undefined
      ? send(res, reply.status, errorBody(api, reply.status, defaultDetail(reply.status)))
      : send(res, reply.status, reply.body)
  }
  switch (api) {
    case "brave":
      return brave(res, url.searchParams)
    case "exa":
      return exa(res, body)
    case "parallel":
      return parallel(res, body)
  }
}

const defaultDetail = (status: number) =>
  status === 429 ? "rate limit exceeded" : status >= 500 ? "internal server error" : `request failed (${status})`

/** The error body each API documents, carrying `detail`. */
const errorBody = (api: Api, status: number, detail: string): Json => {
  switch (api) {
    case "brave":
      return {
        type: "ErrorResponse",
        error: {
          id: Crypto.randomUUID(),
          status,
          code: status === 401 ? "SUBSCRIPTION_TOKEN_INVALID" : "ERROR",
          detail
        },
        time: Math.floor(Date.now() / 1000)
      }
    case "exa":
      return { requestId: Crypto.randomUUID(), error: detail }
    case "parallel":
      return { type: "error", error: { ref_id: Crypto.randomUUID(), message: detail } }
  }
}

const escapeHtml = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")
    .replace(/'/g, "&#x27;")

/** Brave: `q` required, `count` 1 to 20 (default 20); descriptions mark the query in `<strong>`, as HTML. */
const brave = (res: Http.ServerResponse, params: URLSearchParams) => {
  const query = params.get("q")
  const count = Number(params.get("count") ?? 20)
  if (query === null || query === "") return send(res, 422, errorBody("brave", 422, "q: field required"))
  if (!Number.isInteger(count) || count < 1 || count > 20) {
    return send(res, 422, errorBody("brave", 422, "count: must be between 1 and 20"))
  }
  return send(res, 200, {
    type: "search",
    query: { original: query },
    web: {
      type: "search",
      results: resultsFor(query, count).map((result, index) => ({
        type: "search_result",
        title: escapeHtml(result.title),
        url: result.url,
        description: escapeHtml(result.snippet).replace(escapeHtml(query), `<strong>${escapeHtml(query)}</strong>`),
        page_age: `${result.date}T00:00:00`,
        age: `${index + 1} days ago`,
        language: "en"
      }))
    }
  })
}

/** Exa: `query` required, `numResults` (default 10); page text only when `contents.text` asks, cut to its `maxCharacters`. */
const exa = (res: Http.ServerResponse, body: unknown) => {
  if (!isObject(body) || typeof body.query !== "string") {
    return send(res, 400, errorBody("exa", 400, "query: Required"))
  }
  const count = typeof body.numResults === "number" ? body.numResults : 10
  const text = isObject(body.contents) ? body.contents.text : undefined
  const maxCharacters = isObject(text) && typeof text.maxCharacters === "number" ? text.maxCharacters : undefined
  return send(res, 200, {
    requestId: Crypto.randomUUID(),
    resolvedSearchType: "neural",
    results: resultsFor(body.query, Math.min(count, 100)).map((result) => ({
      id: result.url,
      title: result.title,
      url: result.url,
      publishedDate: `${result.date}T00:00:00.000Z`,
      author: null,
      ...(text === undefined || text === false ? {} : { text: result.snippet.slice(0, maxCharacters) })
    }))
  })
}

/** Parallel: `objective` or `search_queries` required, `max_results` (default 10). */
const parallel = (res: Http.ServerResponse, body: unknown) => {
  const queries = isObject(body) && Array.isArray(body.search_queries) ? body.search_queries : []
  const objective = isObject(body) && typeof body.objective === "string" ? body.objective : undefined
  const query = objective ?? (typeof queries[0] === "string" ? queries[0] : undefined)
  if (query === undefined) {
    return send(res, 422, errorBody("parallel", 422, "at least one of objective or search_queries must be provided"))
  }
  const count = isObject(body) && typeof body.max_results === "number" ? body.max_results : 10
  return send(res, 200, {
    search_id: `search_${Crypto.randomUUID().replace(/-/g, "")}`,
    results: resultsFor(query, Math.min(count, 20)).map((result) => ({
      url: result.url,
      title: result.title,
      publish_date: result.date,
      excerpts: [result.snippet]
    }))
  })
}

const send = (res: Http.ServerResponse, status: number, body: Json | string) => {
  const text = typeof body === "string" ? body : JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}
