/**
 * The part of the OpenAI SDK's client that pi-ai's chat-completions adapter
 * uses (`chat.completions.create(params, options).withResponse()`), sent with
 * undici's `request` and its event stream read straight off the socket. The
 * SDK's request pipeline, with fetch's WHATWG request, response and streams,
 * cost a turn about a millisecond of CPU for one small request; the request
 * sent here is the one the SDK sends, and its failures are the SDK's own
 * error classes, built as the SDK builds them, so pi-ai reads them as before.
 */
import { ServerSentEvents } from "@agent-runtime/domain"
import { APIConnectionError, APIError, APIUserAbortError } from "openai"

/** The answer to a request: its status, headers and body, read as it arrives. */
export interface Answer {
  readonly statusCode: number
  readonly headers: Record<string, string | Array<string> | undefined>
  readonly body: AsyncIterable<Uint8Array> & {
    text(): Promise<string>
    destroy(): unknown
  }
}

/** Sends one request (the egress's `requestFunction`). */
export type Send = (url: string, options: {
  readonly method: "POST"
  readonly headers: Record<string, string>
  readonly body: string
  readonly signal?: AbortSignal | undefined
}) => Promise<Answer>

/** What pi-ai makes its client with (see the pi-ai patch's `openAIClient`). */
export interface ClientOptions {
  readonly apiKey?: string | undefined
  readonly baseURL: string
  readonly defaultHeaders: Record<string, string | null | undefined>
}

/**
 * A client for pi-ai: requests go through `send`, and `onResponse` hears each answer's status and headers
 * before its body is read.
 */
export const client = (send: Send, onResponse: (status: number, headers: Headers) => void) =>
(
  options: ClientOptions
) => ({
  chat: {
    completions: {
      create: (params: unknown, requestOptions?: { readonly signal?: AbortSignal | undefined }) => ({
        withResponse: () => respond(send, onResponse, options, params, requestOptions?.signal)
      })
    }
  }
})

/** The SDK's headers for the request, then the client's own; a null or undefined value removes a header. */
const headersOf = (options: ClientOptions): Record<string, string> => {
  const headers: Record<string, string> = {
    accept: "application/json",
    "content-type": "application/json",
    ...(options.apiKey === undefined ? {} : { authorization: `Bearer ${options.apiKey}` })
  }
  for (const [name, value] of Object.entries(options.defaultHeaders)) {
    const key = name.toLowerCase()
    if (value === null || value === undefined) delete headers[key]
    else headers[key] = value
  }
  return headers
}

/** The SDK's URL for a path under the base URL. */
const urlOf = (baseURL: string, path: string) => baseURL.endsWith("/") ? baseURL + path.slice(1) : baseURL + path

const headersFrom = (raw: Answer["headers"]) => {
  const headers = new Headers()
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined) continue
    if (Array.isArray(value)) { for (const item of value) headers.append(name, item) }
    else headers.set(name, value)
  }
  return headers
}

const parsedOrUndefined = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const respond = async (
  send: Send,
  onResponse: (status: number, headers: Headers) => void,
  options: ClientOptions,
  params: unknown,
  signal: AbortSignal | undefined
) => {
  let answer: Answer
  try {
    answer = await send(urlOf(options.baseURL, "/chat/completions"), {
      method: "POST",
      headers: headersOf(options),
      body: JSON.stringify(params),
      signal
    })
  } catch (error) {
    if (signal?.aborted === true) throw new APIUserAbortError()
    throw new APIConnectionError({ cause: error as Error })
  }
  const headers = headersFrom(answer.headers)
  const status = answer.statusCode
  onResponse(status, headers)
  if (status < 200 || status > 299) {
    const text = await answer.body.text().catch((error: unknown) => String(error))
    const parsed = parsedOrUndefined(text)
    throw APIError.generate(status, parsed as object | undefined, parsed === undefined ? text : undefined, headers)
  }
  return { data: chunks(answer.body, signal, headers), response: { status, headers } }
}

/**
 * The stream's chunks, as the SDK yields them: each event's data parsed (failing on data that is not JSON),
 * a chunk carrying `error` thrown as the SDK's error, nothing after `[DONE]`, and an abort ending the stream
 * quietly (pi-ai then reports it aborted).
 */
async function* chunks(body: Answer["body"], signal: AbortSignal | undefined, headers: Headers) {
  const events = new ServerSentEvents.Parser()
  // Invalid UTF-8 becomes U+FFFD, and a character split between chunks is joined, as the SDK decodes.
  const decoder = new TextDecoder()
  let finished = false
  let done = false
  try {
    for await (const bytes of body) {
      for (const item of events.push(decoder.decode(bytes, { stream: true }))) {
        // As the SDK reads: comments, and frames with neither data nor an event, are nothing.
        if (done || item._tag === "Comment" || (item.event === undefined && item.data === undefined)) continue
        const text = item.data ?? ""
        if (text.startsWith("[DONE]")) {
          done = true
          continue
        }
        const data = JSON.parse(text)
        // The Assistants API's events, which a chat completion never sends and pi-ai would pass over.
        if (item.event?.startsWith("thread.") === true) continue
        if (data !== null && typeof data === "object" && data.error) {
          throw new APIError(undefined, data.error, undefined, headers)
        }
        yield data
      }
    }
    finished = true
  } catch (error) {
    if (signal?.aborted === true) return
    throw error
  } finally {
    if (!finished) body.destroy()
  }
}
