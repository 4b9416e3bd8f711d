/**
 * The REST API as one `HttpApi` definition, one group per area. The server
 * implements the groups and the OpenAPI document is generated from here.
 */
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import * as ApiError from "./ApiError.ts"
import { Authentication, OperatorAuthentication } from "./Auth.ts"
import { created, Deleted, Page, PageParams } from "./Common.ts"
import { Me } from "./Me.ts"
import { Tenant, TenantCreated, TenantInput } from "./Tenant.ts"
import { Token, TokenCreated, TokenInput } from "./Token.ts"

const idParam = HttpApiSchema.param("id", Schema.String)

export class HealthGroup extends HttpApiGroup.make("health", { topLevel: true })
  .add(
    HttpApiEndpoint.get("healthz", "/healthz")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ok") }))
      .annotate(OpenApi.Description, "The process is up.")
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ready") }))
      .addError(ApiError.Unavailable.Wire)
      .annotate(OpenApi.Description, "200 while serving; 503 while starting or draining.")
  )
  .annotate(OpenApi.Title, "Health")
{}

export class MeGroup extends HttpApiGroup.make("me")
  .add(HttpApiEndpoint.get("get", "/v1/me").addSuccess(Me))
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Account")
{}

export class TokensGroup extends HttpApiGroup.make("tokens")
  .add(
    HttpApiEndpoint.post("create", "/v1/tokens")
      .setPayload(TokenInput)
      .addSuccess(TokenCreated, created)
      .annotate(OpenApi.Description, "Creates an API key; the key itself is shown only in this answer.")
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/tokens")
      .setUrlParams(PageParams)
      .addSuccess(Page(Token))
      .annotate(OpenApi.Description, "The tenant's API keys, oldest first, without their secrets.")
  )
  .add(
    HttpApiEndpoint.del("revoke")`/v1/tokens/${idParam}`
      .addSuccess(Deleted)
      .addError(ApiError.NotFound.Wire)
      .annotate(OpenApi.Description, "Revokes an API key; calls with it fail with 401 from then on.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Tokens")
{}

export class AdminGroup extends HttpApiGroup.make("admin")
  .add(
    HttpApiEndpoint.post("createTenant", "/v1/admin/tenants")
      .setPayload(TenantInput)
      .addSuccess(TenantCreated, created)
      .annotate(OpenApi.Description, "Creates a tenant and its first API key (shown only in this answer).")
  )
  .add(
    HttpApiEndpoint.get("listTenants", "/v1/admin/tenants")
      .setUrlParams(PageParams)
      .addSuccess(Page(Tenant))
  )
  .add(
    HttpApiEndpoint.get("getTenant")`/v1/admin/tenants/${idParam}`
      .addSuccess(Tenant)
      .addError(ApiError.NotFound.Wire)
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Operator")
  .annotate(OpenApi.Description, "Tenant administration with the operator token.")
{}

/**
 * Schema failures are answered as INVALID_REQUEST (see the server's error
 * mapping), so the framework's own decode-error body never reaches a client
 * and is left out of the document.
 */
const withoutDecodeError = (spec: Record<string, any>): Record<string, any> => {
  const decodeError = "#/components/schemas/HttpApiDecodeError"
  for (const path of Object.values<Record<string, any>>(spec.paths)) {
    for (const operation of Object.values<Record<string, any>>(path)) {
      const invalid = operation.responses?.["400"]
      const schema = invalid?.content?.["application/json"]?.schema
      if (!schema?.anyOf) continue
      const rest = schema.anyOf.filter((member: { $ref?: string }) => member.$ref !== decodeError)
      invalid.content["application/json"].schema = rest.length === 1 ? rest[0] : { anyOf: rest }
      invalid.description = "{error, code: \"INVALID_REQUEST\"} with HTTP 400; the error names each field and why"
    }
  }
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete spec.components.schemas[name]
  return spec
}

/** Every group of the API; the server mounts those implemented so far. */
export class Api extends HttpApi.make("agent-runtime")
  .add(HealthGroup)
  .add(MeGroup)
  .add(TokensGroup)
  .add(AdminGroup)
  // Any route can meet these: unreadable or invalid input, unknown routes, oversized bodies, defects.
  .addError(ApiError.InvalidRequest.Wire)
  .addError(ApiError.NotFound.Wire)
  .addError(ApiError.TooLarge.Wire)
  .addError(ApiError.Internal.Wire)
  .annotate(OpenApi.Title, "Agent Runtime")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(OpenApi.Transform, withoutDecodeError)
{}
