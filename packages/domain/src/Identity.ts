/**
 * Identity tokens: the runtime's own signed tokens (EdDSA JWTs) sent to tool
 * servers, and the public keys that verify them, published at
 * `/.well-known/jwks.json` (see docs/identity.md).
 */
import { Schema } from "effect"
import { Timestamp } from "./Common.ts"

/** The header that carries an identity token on calls to tool servers; modelHeaders may not set it. */
export const identityHeader = "x-agent-runtime-identity"

/** One public key (RFC 8037 OKP, Ed25519). */
export class Jwk extends Schema.Class<Jwk>("Jwk")({
  kid: Schema.String.annotations({ description: "the key's id, named by the `kid` of the tokens it signs" }),
  kty: Schema.Literal("OKP"),
  crv: Schema.Literal("Ed25519"),
  x: Schema.String.annotations({ description: "the public key, base64url" }),
  alg: Schema.Literal("EdDSA"),
  use: Schema.Literal("sig")
}) {}

/** The keys that verify identity tokens: the signing key, one waiting to sign, and retiring ones. */
export class Jwks extends Schema.Class<Jwks>("Jwks")({
  keys: Schema.Array(Jwk)
}) {}

/** The answer of a key rotation. */
export class KeyRotated extends Schema.Class<KeyRotated>("KeyRotated")({
  kid: Schema.String.annotations({ description: "the new key, already published in the JWKS" }),
  activatesAt: Timestamp.annotations({ description: "when it starts signing (Unix seconds)" })
}) {}
