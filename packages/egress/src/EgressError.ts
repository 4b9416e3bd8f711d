/**
 * The one error of outbound requests. Its message names the host and the
 * reason only: tenant URLs may carry secrets in the query string or userinfo,
 * and this text ends up in logs and API answers.
 */
import { Schema } from "effect"

export const Reason = Schema.Literal(
  "invalid_url",
  "not_https",
  "credentials_in_url",
  "private_address",
  "resolution_failed",
  "connect_failed"
)
export type Reason = typeof Reason.Type

export class EgressError extends Schema.TaggedError<EgressError>()("EgressError", {
  reason: Reason,
  /** `host[:port]` of the URL, when it could be parsed. */
  host: Schema.optional(Schema.String),
  message: Schema.String
}) {}

/** An error whose message reads `outbound request to <host> refused: <detail> (<reason>)`. */
export const make = (reason: Reason, host: string | undefined, detail: string): EgressError => {
  const outcome = reason === "connect_failed" || reason === "resolution_failed" ? "failed" : "refused"
  return host === undefined
    ? new EgressError({ reason, message: `outbound URL ${outcome}: ${detail} (${reason})` })
    : new EgressError({ reason, host, message: `outbound request to ${host} ${outcome}: ${detail} (${reason})` })
}
