/**
 * API tokens: the tenant's keys (art_...). Only a hash is stored; the secret
 * is shown once, in TokenCreated.
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

export const apiKeyPrefix = "art_"

export const TokenId = Schema.String.pipe(Schema.pattern(/^tok_[A-Za-z0-9]+$/)).annotations({
  description: "token id (tok_...)"
})

export class Token extends Schema.Class<Token>("Token")({
  id: TokenId,
  name: Schema.String,
  prefix: Schema.String.annotations({ description: "the first characters of the key, to tell keys apart" }),
  createdAt: Timestamp
}) {}

export class TokenInput extends Schema.Class<TokenInput>("TokenInput")({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(80))
}) {}

export class TokenCreated extends Schema.Class<TokenCreated>("TokenCreated")({
  ...Token.fields,
  token: Schema.String.annotations({ description: "the API key (art_...), shown only once" })
}) {}
