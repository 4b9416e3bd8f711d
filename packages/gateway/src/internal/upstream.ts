/**
 * One exchange with a target's upstream, shared by pass-through and
 * translated calls: the URL under the model's base URL, the provider key in
 * the header its protocol expects, the request through the egress module's
 * dispatcher (kept-alive connections whose connect hook checks every
 * address), and what an upstream failure becomes for the client.
 */
import type { Credentials } from "@agent-runtime/models"
import { Option, Redacted } from "effect"
import type * as Http from "node:http"
import type { Dispatcher } from "undici"
import { GatewayError } from "../GatewayError.ts"

const urls = new Map<string, URL>()
/** Parsed once per base URL and path: the hot path builds no URL objects. */
const urlOf = (base: string, path: string) => {
  const key = base + path
  let url = urls.get(key)
  if (url === undefined) {
    url = new URL(base.replace(/\/+$/, "") + path)
    urls.set(key, url)
  }
  return url
}

/** The target's sealed headers, the JSON content type and its key (messages: x-api-key unless the provider says bearer). */
export const headers = (target: Credentials.Target, anthropic: boolean): Record<string, string> => {
  const out: Record<string, string> = { ...target.headers, "content-type": "application/json" }
  if (Option.isSome(target.apiKey)) {
    const key = Redacted.value(target.apiKey.value)
    if (anthropic && !target.bearer) out["x-api-key"] = key
    else out.authorization = `Bearer ${key}`
  }
  return out
}

export interface Exchange {
  readonly dispatcher: Dispatcher
  readonly target: Credentials.Target
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
  readonly signal: AbortSignal
}

/**
 * Sends the request. A refused provider key is ours, not the client's (502,
 * not 401); a connection that cannot be made is 502 `UPSTREAM_UNREACHABLE`.
 */
export const send = async (exchange: Exchange): Promise<Dispatcher.ResponseData> => {
  const url = urlOf(exchange.target.model.baseUrl, exchange.path)
  let answer: Dispatcher.ResponseData
  try {
    answer = await exchange.dispatcher.request({
      origin: url.origin,
      path: url.pathname + url.search,
      method: "POST",
      headers: exchange.headers,
      body: exchange.body,
      signal: exchange.signal
    })
  } catch (error) {
    throw unreachable(exchange.target, error)
  }
  const status = answer.statusCode
  if (status === 401 || status === 403) {
    await answer.body.dump()
    throw new GatewayError({
      status: 502,
      code: "model_key_invalid",
      message: `provider ${exchange.target.provider} refused the key (${status})`
    })
  }
  return answer
}

export const unreachable = (target: Credentials.Target, error: unknown) =>
  new GatewayError({
    status: 502,
    code: "UPSTREAM_UNREACHABLE",
    message: `provider ${target.provider} unreachable: ${(error as { code?: string }).code ?? String(error)}`
  })

/**
 * Runs one exchange for the client at `res`: the upstream request is aborted when the client goes away (and
 * nothing more is written to it), and a failure to reach the upstream answers UPSTREAM_UNREACHABLE.
 */
export const forClient = async (
  res: Http.ServerResponse,
  target: Credentials.Target,
  exchange: (signal: AbortSignal) => Promise<void>
): Promise<void> => {
  const controller = new AbortController()
  const onClose = () => {
    if (!res.writableFinished) controller.abort()
  }
  res.once("close", onClose)
  try {
    await exchange(controller.signal)
  } catch (error) {
    if (controller.signal.aborted) return
    if (error instanceof GatewayError) throw error
    throw unreachable(target, error)
  } finally {
    res.off("close", onClose)
  }
}

/** Seconds from a Retry-After header (delta seconds or an HTTP date), at least 1. */
export const retryAfterOf = (header: string | Array<string> | undefined): number => {
  const value = Array.isArray(header) ? header[0] : header
  if (value === undefined) return 1
  const seconds = Number(value)
  if (Number.isFinite(seconds)) return Math.max(1, Math.ceil(seconds))
  const date = Date.parse(value)
  return Number.isNaN(date) ? 1 : Math.max(1, Math.ceil((date - Date.now()) / 1000))
}

/** The upstream's own message from either error body shape; the provider key is never passed on. */
const messageOf = (target: Credentials.Target, text: string) => {
  let message = text
  try {
    const body = JSON.parse(text)
    if (typeof body?.error?.message === "string") message = body.error.message
  } catch {
    // Not JSON: the text is the message.
  }
  if (Option.isSome(target.apiKey)) message = message.split(Redacted.value(target.apiKey.value)).join("[redacted]")
  return `provider ${target.provider}: ${message.replace(/(api key provided: )\S+/gi, "$1[redacted]").slice(0, 500)}`
}

/**
 * A translated call's upstream failure in the client's terms: 429 stays 429
 * and 5xx (529 included) becomes 503, both with the upstream's Retry-After
 * (1 s if it gave none); other 4xx keep their status.
 */
export const failure = (
  target: Credentials.Target,
  status: number,
  retryAfter: string | Array<string> | undefined,
  text: string
): GatewayError => {
  const message = messageOf(target, text)
  if (status === 429) {
    return new GatewayError({ status, code: "RATE_LIMITED", message, retryAfter: retryAfterOf(retryAfter) })
  }
  if (status >= 500) {
    return new GatewayError({ status: 503, code: "UNAVAILABLE", message, retryAfter: retryAfterOf(retryAfter) })
  }
  return new GatewayError({ status: status >= 400 ? status : 502, code: "INVALID_REQUEST", message })
}

/** An error the upstream reported inside a stream that had started well: the answer is cut, try again. */
export const streamFailure = (target: Credentials.Target, error: unknown): GatewayError => {
  const type = (error as { type?: unknown } | undefined)?.type
  const message = messageOf(target, JSON.stringify({ error }))
  return type === "rate_limit_error" || type === "rate_limit_exceeded"
    ? new GatewayError({ status: 429, code: "RATE_LIMITED", message, retryAfter: 1 })
    : new GatewayError({ status: 503, code: "UNAVAILABLE", message, retryAfter: 1 })
}
