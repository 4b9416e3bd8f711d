/**
 * Call results in the words the model reads, and what a failed request
 * means: refused before anything was sent (safe to try again) or lost on the
 * way (the outcome is unknown, so it is never sent again).
 */
import { EgressError } from "@agent-runtime/egress"
import { IdentityError } from "@agent-runtime/identity"
import type { CallResult } from "../ToolSources.ts"

export const result = (text: string, isError: boolean, code?: string): CallResult => ({
  content: [{ type: "text", text }],
  isError,
  ...(code === undefined ? {} : { code })
})

export const failed = (text: string) => result(text, true, "failed")

export const unavailable = (why: string) => result(`${why}, so the call was not sent.`, true, "unavailable")

export const invalidArguments = (why: string) => result(`${why}; the call was not sent.`, true, "invalid_arguments")

export const timeout = (deadlineMs: number) =>
  result(
    `No answer within ${deadlineMs} ms; the call may or may not have taken effect. It was not sent again.`,
    true,
    "timeout"
  )

export const connectionLost = result(
  "The connection to the tool's server was lost while the call was out; it may or may not have taken effect. " +
    "It was not sent again.",
  true,
  "connection_lost"
)

/** Error codes of a connection that never opened: nothing of the request reached the server. */
const beforeSending = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "ETIMEDOUT",
  "UND_ERR_CONNECT_TIMEOUT"
])

/** The innermost `code` of an error and its causes (undici's fetch rejects with `TypeError("fetch failed")`). */
const codeOf = (error: unknown): string | undefined => {
  let found: string | undefined
  for (let current = error, depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const { code } = current as { code?: unknown }
    if (typeof code === "string") found = code
    current = (current as { cause?: unknown }).cause
  }
  return found
}

/**
 * What a rejected request means. `sent: false` when it never left: the
 * egress rules refused it, the identity token could not be signed, or the
 * connection did not open (a certificate refused included).
 */
export const sendFailure = (error: unknown): { readonly sent: boolean; readonly reason: string } => {
  if (error instanceof EgressError.EgressError) return { sent: false, reason: error.message }
  if (error instanceof IdentityError.IdentityError) {
    return { sent: false, reason: "the identity token could not be signed" }
  }
  const code = codeOf(error)
  if (code !== undefined && (beforeSending.has(code) || /CERT|TLS|SSL/.test(code))) {
    return { sent: false, reason: `could not connect: ${code}` }
  }
  return { sent: true, reason: `the connection was lost (${code ?? String(error)})` }
}

/** A rejected request as a call's result. */
export const ofSendFailure = (error: unknown): CallResult => {
  const failure = sendFailure(error)
  return failure.sent ? connectionLost : unavailable(failure.reason)
}
