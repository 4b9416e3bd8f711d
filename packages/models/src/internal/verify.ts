/**
 * Checks a key with its provider by listing models: cheap, free, and
 * refused with 401/403 when the key is bad.
 */
import { Provider } from "@agent-runtime/domain"
import type { Egress } from "@agent-runtime/egress"
import { Effect, Redacted } from "effect"

export interface Target {
  readonly api: string
  readonly baseUrl: string
  readonly apiKey: Redacted.Redacted<string>
  /** For the messages type: how the key is sent. */
  readonly auth?: "x-api-key" | "bearer"
  readonly headers?: Record<string, string>
}

const request = (target: Target): { url: string; headers: Record<string, string> } => {
  const key = Redacted.value(target.apiKey)
  const base = target.baseUrl.replace(/\/$/, "")
  switch (target.api) {
    case "anthropic-messages":
      return {
        url: `${base}/v1/models`,
        headers: {
          "anthropic-version": "2023-06-01",
          ...(target.auth === "bearer" ? { authorization: `Bearer ${key}` } : { "x-api-key": key })
        }
      }
    case "google-generative-ai":
      return { url: `${base}/models`, headers: { "x-goog-api-key": key } }
    case "mistral-conversations":
      return { url: `${base}/v1/models`, headers: { authorization: `Bearer ${key}` } }
    default:
      return { url: `${base}/models`, headers: { authorization: `Bearer ${key}` } }
  }
}

export const verify = (egress: Egress.Service, target: Target) =>
  Effect.suspend(() => {
    const { headers, url } = request(target)
    return egress.fetch(url, { headers: { ...target.headers, ...headers } }).pipe(
      Effect.map((response): Provider.KeyVerification => {
        void response.body?.cancel()
        if (response.ok) return new Provider.KeyVerification({ status: "valid" })
        if (response.status === 401 || response.status === 403) {
          return new Provider.KeyVerification({
            status: "invalid",
            detail: `the provider refused the key (${response.status})`
          })
        }
        return new Provider.KeyVerification({
          status: "unverified",
          detail: `the provider answered ${response.status}; the key is stored unchecked`
        })
      }),
      Effect.catchAll((error) =>
        Effect.succeed(
          new Provider.KeyVerification({
            status: "unverified",
            detail: `could not reach the provider: ${error.message}`
          })
        )
      ),
      Effect.timeoutTo({
        duration: "10 seconds",
        onSuccess: (verification) => verification,
        onTimeout: () =>
          new Provider.KeyVerification({ status: "unverified", detail: "the provider did not answer in 10 s" })
      })
    )
  })
