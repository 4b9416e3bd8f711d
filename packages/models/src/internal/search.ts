/**
 * The search APIs behind web_search, each spoken as its public reference
 * describes it: how a query becomes a request, and how the answer becomes
 * results. Which key and API root a request uses is `WebSearch`'s concern.
 */
import { Effect, Option, Schema, Stream } from "effect"
import type { ParseError } from "effect/ParseResult"
import type { SearchResult } from "../WebSearch.ts"

/** The longest snippet kept per result; APIs that can cut their text are asked for this many characters. */
export const snippetChars = 1000

export interface Request {
  readonly url: URL
  readonly method: "GET" | "POST"
  readonly headers: Record<string, string>
  readonly body?: string
}

export interface Api {
  /** The public API root; a key scope entry's baseUrl replaces it. */
  readonly root: string
  /** The header that carries the key. */
  readonly keyHeader: string
  readonly request: (root: string, query: string, count: number) => Request
  /** The results of a successful answer's body text. */
  readonly results: (body: string) => Effect.Effect<ReadonlyArray<SearchResult>, ParseError>
}

const result = (
  title: string | null | undefined,
  url: string,
  snippet: string,
  published: string | null | undefined
): SearchResult => ({
  title: title === null || title === undefined || title === "" ? url : title,
  url,
  snippet: snippet.replace(/\s+/g, " ").trim().slice(0, snippetChars),
  ...(published === null || published === undefined || published === "" ? {} : { published })
})

const entities: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'", "#x27": "'" }

/** Brave marks the query's words in its descriptions (`<strong>`) and escapes them as HTML. */
const plainText = (html: string) =>
  html.replace(/<[^>]*>/g, "").replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, name: string) => entities[name]!)

const jsonHeaders = { accept: "application/json", "content-type": "application/json" }

const BraveResponse = Schema.Struct({
  // Absent when nothing matched.
  web: Schema.optional(Schema.Struct({
    results: Schema.Array(Schema.Struct({
      title: Schema.String,
      url: Schema.String,
      description: Schema.optional(Schema.String),
      page_age: Schema.optional(Schema.String),
      age: Schema.optional(Schema.String)
    }))
  }))
})

const ExaResponse = Schema.Struct({
  results: Schema.Array(Schema.Struct({
    title: Schema.optional(Schema.NullOr(Schema.String)),
    url: Schema.String,
    text: Schema.optional(Schema.String),
    publishedDate: Schema.optional(Schema.NullOr(Schema.String))
  }))
})

const ParallelResponse = Schema.Struct({
  results: Schema.Array(Schema.Struct({
    url: Schema.String,
    title: Schema.optional(Schema.NullOr(Schema.String)),
    publish_date: Schema.optional(Schema.NullOr(Schema.String)),
    excerpts: Schema.optional(Schema.Array(Schema.String))
  }))
})

/** By provider id (see `toolProviders` in Keys.ts). */
export const apis: Readonly<Record<string, Api>> = {
  // Brave Search API, web search (GET /res/v1/web/search).
  brave: {
    root: "https://api.search.brave.com",
    keyHeader: "x-subscription-token",
    request: (root, query, count) => {
      const url = new URL(`${root}/res/v1/web/search`)
      url.searchParams.set("q", query)
      url.searchParams.set("count", String(count))
      return { url, method: "GET", headers: { accept: "application/json" } }
    },
    results: (body) =>
      Effect.map(
        Schema.decodeUnknown(Schema.parseJson(BraveResponse))(body),
        (answer) =>
          (answer.web?.results ?? []).map((item) =>
            result(plainText(item.title), item.url, plainText(item.description ?? ""), item.page_age ?? item.age)
          )
      )
  },
  // https://exa.ai/docs/reference/search
  exa: {
    root: "https://api.exa.ai",
    keyHeader: "x-api-key",
    request: (root, query, count) => ({
      url: new URL(`${root}/search`),
      method: "POST",
      headers: jsonHeaders,
      body: JSON.stringify({ query, numResults: count, contents: { text: { maxCharacters: snippetChars } } })
    }),
    results: (body) =>
      Effect.map(
        Schema.decodeUnknown(Schema.parseJson(ExaResponse))(body),
        (answer) => answer.results.map((item) => result(item.title, item.url, item.text ?? "", item.publishedDate))
      )
  },
  // https://docs.parallel.ai/api-reference/search-beta/search
  parallel: {
    root: "https://api.parallel.ai",
    keyHeader: "x-api-key",
    request: (root, query, count) => ({
      url: new URL(`${root}/v1beta/search`),
      method: "POST",
      // The beta flag v1beta was released under; later deployments ignore it.
      headers: { ...jsonHeaders, "parallel-beta": "search-extract-2025-10-10" },
      body: JSON.stringify({
        search_queries: [query],
        max_results: count,
        excerpts: { max_chars_per_result: snippetChars }
      })
    }),
    results: (body) =>
      Effect.map(
        Schema.decodeUnknown(Schema.parseJson(ParallelResponse))(body),
        (answer) =>
          answer.results.map((item) =>
            result(item.title, item.url, (item.excerpts ?? []).join(" … "), item.publish_date)
          )
      )
  }
}

/** The body as text, or none when it is longer than `limit` bytes: reading stops there. */
export const readText = (response: Response, limit: number): Effect.Effect<Option.Option<string>, unknown> =>
  response.body === null
    ? Effect.succeed(Option.some(""))
    : Stream.fromReadableStream(() => response.body!, (cause) => cause).pipe(
      Stream.runFoldWhile(
        { chunks: [] as Array<Uint8Array>, size: 0 },
        (read) => read.size <= limit,
        (read, chunk) => {
          read.chunks.push(chunk)
          read.size += chunk.byteLength
          return read
        }
      ),
      Effect.map((read) => read.size > limit ? Option.none() : Option.some(Buffer.concat(read.chunks).toString("utf8")))
    )

/** The provider's own message in an error body: Brave `error.detail`, Parallel `error.message`, Exa `error`. */
const messageIn = (text: string): string | undefined => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return undefined
  }
  if (typeof parsed !== "object" || parsed === null) return undefined
  const { error, message } = parsed as { error?: unknown; message?: unknown }
  if (typeof error === "string") return error
  if (typeof error === "object" && error !== null) {
    const inner = error as { detail?: unknown; message?: unknown }
    if (typeof inner.detail === "string") return inner.detail
    if (typeof inner.message === "string") return inner.message
  }
  return typeof message === "string" ? message : undefined
}

/**
 * A short reason from an error answer, for the caller and the model. Some
 * providers quote the key they were sent; `secrets` (the key, the key scope
 * entry's header values) never pass.
 */
export const errorDetail = (text: string, secrets: ReadonlyArray<string>) => {
  let detail = messageIn(text) ?? text
  for (const secret of secrets) if (secret.length > 0) detail = detail.split(secret).join("[redacted]")
  return detail.replace(/\s+/g, " ").trim().slice(0, 300)
}
