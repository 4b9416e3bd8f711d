/**
 * Connected applications: what a person allowed a coding agent (an MCP
 * client) to do as the account, through OAuth at /mcp.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

export class OAuthGrant extends Schema.Class<OAuthGrant>("OAuthGrant")({
  id: Schema.String.annotations({ description: "the grant's id; DELETE /v1/oauth/grants/{id} revokes it" }),
  clientName: Schema.String.annotations({
    description: "the name the application registered itself with (unverified: judge it by its redirect URI)"
  }),
  login: Schema.NullOr(Schema.String).annotations({ description: "who allowed it, as they signed in" }),
  scope: Schema.String,
  createdAt: Timestamp,
  usedAt: Schema.NullOr(Timestamp).annotations({ description: "when it last got tokens" })
}) {}

export class SignInLinkInput extends Schema.Class<SignInLinkInput>("SignInLinkInput")({
  tenant: Schema.String.annotations({ description: "the tenant the link signs in to" })
}) {}

export class SignInLink extends Schema.Class<SignInLink>("SignInLink")({
  url: Schema.String.annotations({ description: "opens a console session once; shown only in this answer" }),
  expiresAt: Timestamp
}) {}
