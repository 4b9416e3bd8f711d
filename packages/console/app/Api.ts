/**
 * The console's client of the HTTP API: the same routes and wire shapes as any
 * client (types from the domain schemas' encoded side). The session cookie
 * goes along by itself; changes carry `X-Agent-Runtime-Console: 1`, which the
 * API asks of cookie-authenticated writes. The operator's routes take the
 * operator token instead, kept in this tab only (sessionStorage).
 */
import type {
  Agent,
  Billing,
  Definition,
  Input,
  Me,
  OAuth,
  Provider,
  Runner,
  Schedule,
  Session,
  Tenant,
  Token,
  Volume,
  Webhook
} from "@agent-runtime/domain"
import type { Schema } from "effect"

type Wire<S extends Schema.Schema.Any> = Schema.Schema.Encoded<S>

export type MeInfo = Wire<typeof Me.Me>
export type AgentSummary = Wire<typeof Agent.AgentSummary>
export type AgentDetail = Wire<typeof Agent.AgentDetail>
export type TokenInfo = Wire<typeof Token.Token>
export type TokenCreated = Wire<typeof Token.TokenCreated>
export type WebhookEndpoint = Wire<typeof Webhook.WebhookEndpoint>
export type WebhookEndpointCreated = Wire<typeof Webhook.WebhookEndpointCreated>
export type WebhookDelivery = Wire<typeof Webhook.WebhookDelivery>
export type WebhookAttempt = Wire<typeof Webhook.WebhookAttempt>
export type Usage = Wire<typeof Billing.Usage>
export type BillingInfo = Wire<typeof Billing.Billing>
export type LedgerEntry = Wire<typeof Billing.LedgerEntry>
export type RunnerList = Wire<typeof Runner.RunnerList>
export type TenantInfo = Wire<typeof Tenant.Tenant>
export type TenantCreated = Wire<typeof Tenant.TenantCreated>
export type PendingInput = Wire<typeof Input.Input>
export type ProviderInfo = Wire<typeof Provider.Provider>
export type KeyScope = Wire<typeof Provider.KeyScope>
export type DefinitionInfo = Wire<typeof Definition.Definition>
export type VolumeInfo = Wire<typeof Volume.Volume>
export type FileList = Wire<typeof Volume.FileList>
export type ScheduleInfo = Wire<typeof Schedule.Schedule>
export type OAuthGrant = Wire<typeof OAuth.OAuthGrant>
export type HistoryPage = Wire<typeof Session.HistoryPage>
export type HistoryEntry = Wire<typeof Session.HistoryEntry>

/** An answer that was not 2xx, with the API's `{error, code}`. */
export class ApiError extends Error {
  readonly status: number
  readonly code: string | undefined
  constructor(status: number, message: string, code: string | undefined) {
    super(message)
    this.status = status
    this.code = code
  }
}

const operatorKey = "agent-runtime:operator-token"

export const operatorToken = {
  get: (): string | null => sessionStorage.getItem(operatorKey),
  set: (token: string) => sessionStorage.setItem(operatorKey, token),
  clear: () => sessionStorage.removeItem(operatorKey)
}

export const apiError = async (response: Response): Promise<ApiError> => {
  let message = `the service answered ${response.status}`
  let code: string | undefined
  try {
    const body = await response.json()
    if (typeof body?.error === "string") message = body.error
    if (typeof body?.code === "string") code = body.code
  } catch {
    // Not the API's error body: the status says enough.
  }
  return new ApiError(response.status, message, code)
}

export interface Sent {
  readonly method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE"
  readonly body?: unknown
  /** A raw body (a file upload), sent as it is. */
  readonly raw?: Blob
  /** The operator's routes: the operator token instead of the session. */
  readonly operator?: boolean
  readonly signal?: AbortSignal
  readonly headers?: Record<string, string>
}

/** The response of a request, or the API's error. */
export const fetchApi = async (path: string, sent: Sent = {}): Promise<Response> => {
  const method = sent.method ?? "GET"
  const headers: Record<string, string> = { ...sent.headers }
  if (method !== "GET") headers["x-agent-runtime-console"] = "1"
  if (sent.body !== undefined) headers["content-type"] = "application/json"
  if (sent.raw !== undefined) headers["content-type"] = sent.raw.type || "application/octet-stream"
  if (sent.operator === true) headers.authorization = `Bearer ${operatorToken.get() ?? ""}`
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    cache: "no-store",
    ...(sent.signal === undefined ? {} : { signal: sent.signal }),
    ...(sent.raw !== undefined
      ? { body: sent.raw }
      : sent.body === undefined
      ? {}
      : { body: JSON.stringify(sent.body) })
  })
  if (!response.ok) throw await apiError(response)
  return response
}

/** A JSON answer. */
export const api = async <A>(path: string, sent: Sent = {}): Promise<A> => {
  const response = await fetchApi(path, sent)
  return (response.status === 204 ? undefined : await response.json()) as A
}

/** A page of a list, and the next page's path from the Link header (RFC 8288) when more follow. */
export const apiPage = async <A>(path: string, sent: Sent = {}): Promise<{ items: Array<A>; next: string | null }> => {
  const response = await fetchApi(path, sent)
  const link = response.headers.get("link") ?? ""
  const next = /<([^>]+)>;\s*rel="next"/.exec(link)?.[1] ?? null
  return { items: await response.json(), next }
}

/** Path segments escaped. */
export const path = (strings: TemplateStringsArray, ...values: Array<string>) =>
  strings.reduce((out, part, i) => out + part + (i < values.length ? encodeURIComponent(values[i]!) : ""), "")
