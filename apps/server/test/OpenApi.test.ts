/**
 * The OpenAPI document is generated from the same definition the server
 * runs: it validates as OpenAPI 3.1 and lists every mounted route.
 */
import { Http, TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Context, Effect, Layer } from "effect"

class Node extends Context.Tag("Node")<Node, TestNode.TestNode>() {}

const NodeLive = Layer.scoped(Node, Effect.flatMap(TestDatabase.make, (databaseUrl) => TestNode.start({ databaseUrl })))

const routes = [
  ["get", "/healthz"],
  ["get", "/readyz"],
  ["get", "/v1/me"],
  ["post", "/v1/tokens"],
  ["get", "/v1/tokens"],
  ["delete", "/v1/tokens/{id}"],
  ["post", "/v1/admin/tenants"],
  ["get", "/v1/admin/tenants"],
  ["get", "/v1/admin/tenants/{id}"],
  ["put", "/v1/admin/platform-keys/{provider}"],
  ["delete", "/v1/admin/platform-keys/{provider}"],
  ["get", "/v1/admin/runners"],
  ["post", "/v1/admin/runners/{address}/drain"],
  ["post", "/v1/admin/identity-keys/rotate"],
  ["get", "/.well-known/jwks.json"],
  ["get", "/v1/models"],
  ["get", "/v1/providers"],
  ["get", "/v1/providers/{name}"],
  ["put", "/v1/providers/{name}"],
  ["delete", "/v1/providers/{name}"],
  ["put", "/v1/keys/{provider}"],
  ["delete", "/v1/keys/{provider}"],
  ["get", "/v1/key-scopes"],
  ["get", "/v1/key-scopes/{scope}"],
  ["delete", "/v1/key-scopes/{scope}"],
  ["put", "/v1/key-scopes/{scope}/providers/{provider}"],
  ["delete", "/v1/key-scopes/{scope}/providers/{provider}"],
  ["put", "/v1/key-scopes/{scope}/model-providers/{name}"],
  ["get", "/v1/key-scopes/{scope}/model-providers/{name}"],
  ["delete", "/v1/key-scopes/{scope}/model-providers/{name}"],
  ["post", "/v1/agents"],
  ["get", "/v1/agents"],
  ["get", "/v1/agents/{id}"],
  ["delete", "/v1/agents/{id}"],
  ["post", "/v1/agents/{id}/prompt"],
  ["post", "/v1/agents/{id}/abort"],
  ["post", "/v1/agents/{id}/fork"],
  ["post", "/v1/agents/{id}/continue"],
  ["post", "/v1/agents/{id}/execute"],
  ["post", "/v1/agents/{id}/configure"],
  ["post", "/v1/agents/{id}/definition"],
  ["post", "/v1/runs"],
  ["get", "/v1/runs"],
  ["get", "/v1/runs/{id}"],
  ["get", "/v1/runs/{id}/messages"],
  ["get", "/v1/runs/{id}/events"],
  ["post", "/v1/runs/{id}/abort"],
  ["delete", "/v1/runs/{id}"],
  ["post", "/v1/agents/{id}/schedules"],
  ["get", "/v1/agents/{id}/schedules"],
  ["delete", "/v1/agents/{id}/schedules/{scheduleId}"],
  ["get", "/v1/schedules"],
  ["post", "/v1/definitions"],
  ["get", "/v1/definitions"],
  ["get", "/v1/definitions/{id}"],
  ["patch", "/v1/definitions/{id}"],
  ["delete", "/v1/definitions/{id}"],
  ["get", "/v1/agents/{id}/requests/{requestId}"],
  ["get", "/v1/agents/{id}/state"],
  ["get", "/v1/agents/{id}/history"],
  ["get", "/v1/agents/{id}/events"],
  ["post", "/v1/agents/{id}/browser-tokens"],
  ["get", "/v1/agents/{id}/inputs"],
  ["post", "/v1/agents/{id}/inputs/{inputId}/answer"],
  ["post", "/v1/agents/{id}/answers"],
  ["put", "/v1/agents/by-key/{key}"],
  ["get", "/v1/agents/{keyOrId}/credentials"],
  ["post", "/clients/{id}/requests"],
  ["get", "/clients/{id}/requests/{requestId}"],
  ["get", "/clients/{id}/events"],
  ["post", "/clients/{id}/mcp"],
  ["get", "/clients/{id}/state"],
  ["get", "/clients/{id}/history"],
  ["get", "/clients/{id}/inputs"],
  ["post", "/clients/{id}/inputs/{inputId}/answer"],
  ["post", "/clients/{id}/answers"],
  ["post", "/clients/{id}/inputs/{inputId}"],
  ["delete", "/clients/{id}"],
  ["post", "/clients/{id}/metadata"],
  ["post", "/clients/{id}/schedules"],
  ["get", "/clients/{id}/schedules"],
  ["delete", "/clients/{id}/schedules/{scheduleId}"],
  ["get", "/v1/inputs"],
  ["get", "/v1/agents/{id}/mounts"],
  ["put", "/v1/agents/{id}/mounts"],
  ["post", "/v1/volumes"],
  ["get", "/v1/volumes"],
  ["get", "/v1/volumes/{volumeId}"],
  ["delete", "/v1/volumes/{volumeId}"],
  ["post", "/v1/volumes/{volumeId}/fork"],
  ["get", "/v1/volumes/{volumeId}/files"],
  ["get", "/v1/volumes/{volumeId}/file"],
  ["put", "/v1/volumes/{volumeId}/file"],
  ["delete", "/v1/volumes/{volumeId}/file"],
  ["post", "/v1/volumes/{volumeId}/snapshots"],
  ["get", "/v1/volumes/{volumeId}/snapshots"],
  ["delete", "/v1/volumes/{volumeId}/snapshots/{snapshotId}"],
  ["get", "/v1/volumes/{volumeId}/changes"],
  ["get", "/v1/volumes/{volumeId}/files/{path}"],
  ["put", "/v1/volumes/{volumeId}/files/{path}"],
  ["delete", "/v1/volumes/{volumeId}/files/{path}"],
  ["post", "/v1/volumes/{volumeId}/links"],
  ["get", "/clients/{id}/files"],
  ["get", "/clients/{id}/files/{path}"],
  ["put", "/clients/{id}/files/{path}"],
  ["post", "/clients/{id}/links"],
  ["put", "/clients/{id}/uploads/{requestId}/{name}"],
  ["get", "/v1/links/{volumeId}"],
  ["put", "/v1/links/{volumeId}"],
  ["put", "/v1/agents/{id}/uploads/{requestId}/{name}"],
  ["get", "/v1/files/{fileId}"],
  ["post", "/v1/webhooks"],
  ["get", "/v1/webhooks"],
  ["get", "/v1/webhooks/{webhookId}"],
  ["patch", "/v1/webhooks/{webhookId}"],
  ["delete", "/v1/webhooks/{webhookId}"],
  ["post", "/v1/webhooks/{webhookId}/secret"],
  ["get", "/v1/webhooks/{webhookId}/attempts"],
  ["get", "/v1/webhooks/{webhookId}/deliveries"],
  ["post", "/v1/webhooks/{webhookId}/deliveries/{eventId}/resend"],
  ["get", "/v1/usage-webhook"],
  ["put", "/v1/usage-webhook"],
  ["delete", "/v1/usage-webhook"],
  ["post", "/v1/usage-webhook/secret"],
  ["get", "/v1/telemetry"],
  ["put", "/v1/telemetry"],
  ["delete", "/v1/telemetry"],
  ["post", "/v1/telemetry/test"],
  ["get", "/v1/usage"],
  ["get", "/v1/billing"],
  ["patch", "/v1/billing"],
  ["get", "/v1/billing/ledger"],
  ["post", "/v1/billing/checkout"],
  ["get", "/v1/billing/checkouts/{id}"],
  ["post", "/v1/billing/card-check"],
  ["get", "/v1/billing/auto-topup"],
  ["put", "/v1/billing/auto-topup"],
  ["post", "/v1/billing/payments/webhook"],
  ["put", "/v1/admin/tenants/{id}/billing"],
  ["get", "/v1/admin/tenants/{id}/billing"],
  ["post", "/v1/admin/tenants/{id}/ledger"],
  ["get", "/v1/admin/webhooks/{webhookId}/attempts"],
  ["get", "/v1/oauth/grants"],
  ["delete", "/v1/oauth/grants/{id}"],
  ["post", "/v1/admin/sign-in-links"],
  ["post", "/v1/admin/oauth-keys/rotate"]
] as const

layer(NodeLive, { excludeTestServices: true })("openapi", (it) => {
  it.effect("validates and lists every route with its schemas", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const response = yield* Http.client(node.rest).get("/v1/openapi.json")
      expect(response.status).toBe(200)
      const spec = response.body
      expect(spec.openapi).toMatch(/^3\.1\./)
      expect(spec.info).toMatchObject({ title: "Agent Runtime", version: "1.0.0" })
      const result = yield* Effect.promise(() => new Validator().validate(spec))
      expect(result.errors ?? []).toEqual([])
      expect(result.valid).toBe(true)

      const listed = Object.entries(spec.paths).flatMap(([path, item]) =>
        Object.keys(item as object).map((method) => `${method} ${path}`)
      )
      expect(listed.sort()).toEqual(routes.map(([method, path]) => `${method} ${path}`).sort())

      for (const [method, path] of routes) {
        const operation = spec.paths[path][method]
        expect(operation.responses["200"] ?? operation.responses["201"] ?? operation.responses["202"]).toBeDefined()
        // Every error answer is the spec's {error, code} body.
        for (const [status, answer] of Object.entries<any>(operation.responses)) {
          if (Number(status) < 400) continue
          const body = answer.content["application/json"].schema
          const refs: Array<string> = body.anyOf ? body.anyOf.map((member: any) => member.$ref) : [body.$ref]
          for (const ref of refs) {
            const schema = spec.components.schemas[ref.split("/").pop()!]
            expect(schema.required).toEqual(["error", "code"])
            expect(Object.keys(schema.properties)).toEqual(["error", "code"])
          }
        }
      }
      expect(spec.paths["/v1/tokens"].post.requestBody.content["application/json"].schema.$ref)
        .toBe("#/components/schemas/TokenInput")
      expect(spec.components.schemas.TokenInput.properties.name).toMatchObject({ minLength: 1, maxLength: 80 })
      // Lists answer a bare array (the model discovery keeps its own {data, next}); paging is said on `limit`.
      const answerOf = (path: string) => {
        const schema = spec.paths[path].get.responses["200"].content["application/json"].schema
        return schema.$ref === undefined ? schema : spec.components.schemas[schema.$ref.split("/").pop()!]
      }
      for (
        const path of [
          "/v1/agents",
          "/v1/definitions",
          "/v1/providers",
          "/v1/tokens",
          "/v1/schedules",
          "/v1/agents/{id}/schedules",
          "/v1/key-scopes",
          "/v1/runs",
          "/v1/volumes",
          "/v1/webhooks",
          "/v1/webhooks/{webhookId}/deliveries",
          "/v1/webhooks/{webhookId}/attempts",
          "/v1/admin/tenants",
          "/v1/agents/{id}/inputs",
          "/clients/{id}/inputs",
          "/clients/{id}/schedules",
          "/v1/inputs",
          "/v1/agents/{id}/mounts"
        ]
      ) expect(answerOf(path).type, path).toBe("array")
      expect(Object.keys(answerOf("/v1/models").properties)).toEqual(["data", "next"])
      // The agent's history: a page with `limit` or `before`, else the whole of it.
      expect(answerOf("/clients/{id}/history").anyOf.map((member: any) => member.$ref)).toEqual([
        "#/components/schemas/HistoryPage",
        "#/components/schemas/History"
      ])
      const limit = spec.paths["/v1/agents"].get.parameters.find((parameter: any) => parameter.name === "limit")
      expect(limit.schema).toMatchObject({ minimum: 1, maximum: 1000 })
      expect(limit.schema.description).toContain('Link: <path?after=<last id>&limit=<n>>; rel="next"')
      expect(spec.paths["/v1/definitions"].post.parameters.map((parameter: any) => parameter.name)).toEqual([
        "idempotency-key"
      ])
      // Every JSON body a client sends refuses fields it does not name, at any depth, and says so; maps (headers,
      // metadata, context, a form's content) say what their values are instead.
      const open: Array<string> = []
      const seen = new Set<unknown>()
      const closed = (schema: any, where: string): void => {
        if (typeof schema !== "object" || schema === null || seen.has(schema)) return
        seen.add(schema)
        if (typeof schema.$ref === "string") {
          return closed(spec.components.schemas[schema.$ref.split("/").pop()!], schema.$ref)
        }
        const map = typeof schema.additionalProperties === "object"
        if (schema.properties !== undefined && schema.additionalProperties !== false && !map) open.push(where)
        for (const [name, property] of Object.entries<any>(schema.properties ?? {})) {
          closed(property, `${where}.${name}`)
        }
        for (const member of [...(schema.anyOf ?? []), ...(schema.allOf ?? []), ...(schema.oneOf ?? [])]) {
          closed(member, where)
        }
        closed(schema.items, `${where}[]`)
      }
      let bodies = 0
      for (const [path, item] of Object.entries<any>(spec.paths)) {
        for (const [method, operation] of Object.entries<any>(item)) {
          const body = operation.requestBody?.content?.["application/json"]?.schema
          if (body === undefined) continue
          bodies++
          closed(body, `${method} ${path}`)
        }
      }
      expect(bodies).toBeGreaterThan(30)
      expect(open).toEqual([])
      expect(spec.components.schemas.TokenInput.additionalProperties).toBe(false)
      // Tenant routes take the console's session cookie or a bearer token (API key, OAuth, operator).
      expect(spec.paths["/v1/me"].get.security).toEqual([{ console: [] }, { bearer: [] }])
      expect(spec.components.securitySchemes.console).toMatchObject({
        type: "apiKey",
        in: "cookie",
        name: "ar_session"
      })
      expect(spec.paths["/v1/admin/tenants"].get.security).toEqual([{ operator: [] }])
      expect(JSON.stringify(spec)).not.toContain("HttpApiDecodeError")
    }))

  it.effect("the docs page renders the document", () =>
    Effect.gen(function*() {
      const node = yield* Node
      const page = yield* Http.client(node.rest).get("/docs")
      expect(page.status).toBe(200)
      expect(page.headers.get("content-type")).toContain("text/html")
      expect(page.text).toContain("Agent Runtime")
      expect(page.text).toContain("/v1/admin/tenants")
    }))
})
