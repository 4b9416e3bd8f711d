/**
 * OAuth grants: coding agents connected through the hosted MCP server.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

export class OAuthGrant extends Schema.Class<OAuthGrant>("OAuthGrant")({
  id: Schema.String,
  clientName: Schema.String,
  login: Schema.NullOr(Schema.String),
  scope: Schema.String,
  createdAt: Timestamp,
  usedAt: Schema.NullOr(Timestamp).annotations({ description: "when it last got tokens" })
}) {}
