/**
 * OpenAPI tool sources against a pet store over HTTP on loopback: the
 * document read by URL or given inline, `$ref`s resolved inside it and
 * never fetched elsewhere, tools shaped from operations, and calls sending
 * exactly the request the operation describes (path, query, body, auth).
 */
import { OpenApiTestServer } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import type { ToolSources } from "../src/index.ts"
import { caller, closedPort, IdentityLive, issuer, makeSources } from "./fixtures.ts"

const source = (extra: Partial<ToolSources.OpenApiSource>): ToolSources.OpenApiSource => ({
  kind: "openapi",
  name: "pets",
  auth: { type: "none" },
  ...extra
})

const textOf = (result: ToolSources.CallResult) => result.content.map((part) => part.text).join("\n")

const toolOf = (listing: ToolSources.Listing, name: string) => listing.tools.find((tool) => tool.name === name)!

const decodeJwt = (token: string) => JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8"))

layer(IdentityLive, { excludeTestServices: true })("OpenAPI tool sources", (it) => {
  it.scoped("a document by URL: one tool per operation, $refs resolved, parameters and body as one schema", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const listing = yield* sources.list(source({ url: server.documentUrl }), caller)
      expect(listing.status).toBe("listed")
      expect(listing.tools.map((tool) => [tool.name, tool.executionMode])).toEqual([
        ["listPets", "parallel"],
        ["createPet", "sequential"],
        ["getPet", "parallel"],
        ["deletePet", "sequential"],
        ["get_pets_petId_owner", "parallel"]
      ])
      expect(JSON.stringify(listing.tools)).not.toContain("$ref")

      expect(toolOf(listing, "getPet")).toEqual({
        name: "getPet",
        description: "One pet\n\nAnswers 404 for a pet that does not exist.",
        parameters: {
          type: "object",
          properties: { petId: { type: "string", description: "the pet's id" } },
          required: ["petId"],
          additionalProperties: false
        },
        executionMode: "parallel"
      })
      expect(toolOf(listing, "listPets").parameters).toEqual({
        type: "object",
        properties: { limit: { type: "integer", minimum: 1, description: "at most this many" } },
        additionalProperties: false
      })
      expect(toolOf(listing, "createPet").parameters).toEqual({
        type: "object",
        properties: {
          body: {
            type: "object",
            description: "the new pet",
            properties: {
              name: { type: "string" },
              tag: { type: "string" },
              owner: { type: "object", properties: { name: { type: "string" } }, required: ["name"] }
            },
            required: ["name"]
          }
        },
        required: ["body"],
        additionalProperties: false
      })
      expect(toolOf(listing, "deletePet").parameters).toEqual({
        type: "object",
        properties: {
          petId: { type: "string", description: "the pet's id" },
          "x-request-id": { type: "string", description: "for the logs" }
        },
        required: ["petId"],
        additionalProperties: false
      })
      expect(toolOf(listing, "get_pets_petId_owner").description).toBe("The pet's owner")
      expect(server.requests.map((request) => `${request.method} ${request.path}`)).toEqual(["GET /openapi.json"])
    }))

  it.scoped("calls send exactly the request described: path, query, JSON body, accept", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const pets = source({ url: server.documentUrl })

      const got = yield* sources.call(pets, caller, "getPet", { petId: "1" })
      expect(got.isError).toBe(false)
      expect(textOf(got)).toBe('HTTP 200\n\n{"id":"1","name":"Rex","tag":"dog","owner":{"name":"Ann"}}')
      const listed = yield* sources.call(pets, caller, "listPets", { limit: 1 })
      expect(textOf(listed)).toBe('HTTP 200\n\n[{"id":"1","name":"Rex","tag":"dog","owner":{"name":"Ann"}}]')
      const created = yield* sources.call(pets, caller, "createPet", { body: { name: "Bo", tag: "fish" } })
      expect(textOf(created)).toBe('HTTP 201\n\n{"name":"Bo","tag":"fish","id":"3"}')
      expect(textOf(yield* sources.call(pets, caller, "get_pets_petId_owner", { petId: "1" })))
        .toBe('HTTP 200\n\n{"name":"Ann"}')

      const [get, list, create] = server.requestsTo("/api")
      expect(get).toMatchObject({ method: "GET", path: "/api/pets/1", query: {}, body: undefined })
      expect(get!.headers.accept).toBe("application/json")
      expect(get!.headers.authorization).toBeUndefined()
      expect(list).toMatchObject({ method: "GET", path: "/api/pets", query: { limit: ["1"] } })
      expect(create).toMatchObject({ method: "POST", path: "/api/pets", body: { name: "Bo", tag: "fish" } })
      expect(create!.headers["content-type"]).toBe("application/json")
      expect(server.requestsTo("/openapi.json")).toHaveLength(1)
    }))

  it.scoped("a 404 from an operation fails with its status and body; path values are encoded", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const result = yield* sources.call(source({ url: server.documentUrl }), caller, "getPet", { petId: "a b/c" })
      expect(result).toEqual({
        content: [{ type: "text", text: 'HTTP 404\n\n{"error":"no pet a b/c"}' }],
        isError: true,
        code: "failed"
      })
      expect(server.requestsTo("/api").map((request) => request.path)).toEqual(["/api/pets/a%20b%2Fc"])
    }))

  it.scoped("header auth is sent as configured; without it the operation answers 401", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const keyed = source({
        url: server.documentUrl,
        auth: { type: "header", name: "x-api-key", value: Redacted.make(server.apiKey) }
      })
      const removed = yield* sources.call(keyed, caller, "deletePet", { petId: "2", "x-request-id": "r-1" })
      expect(removed).toEqual({ content: [{ type: "text", text: "HTTP 204" }], isError: false })
      const [, remove] = server.requests
      expect(remove).toMatchObject({ method: "DELETE", path: "/api/pets/2" })
      expect(remove!.headers["x-api-key"]).toBe(server.apiKey)
      expect(remove!.headers["x-request-id"]).toBe("r-1")
      // The document was read with the same auth.
      expect(server.requests[0]!.headers["x-api-key"]).toBe(server.apiKey)

      const refused = yield* sources.call(source({ url: server.documentUrl }), caller, "deletePet", { petId: "1" })
      expect(refused).toMatchObject({ isError: true, code: "failed" })
      expect(textOf(refused)).toBe('HTTP 401\n\n{"error":"x-api-key is wrong"}')
    }))

  it.scoped("bearer and runtime auth: a bearer header, and a fresh identity token per request for the API", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const bearer = source({ url: server.documentUrl, auth: { type: "bearer", token: Redacted.make("tok") } })
      yield* sources.call(bearer, caller, "getPet", { petId: "1" })
      expect(server.requestsTo("/api")[0]!.headers.authorization).toBe("Bearer tok")

      const runtime = source({ document: server.document(), baseUrl: `${server.url}/api`, auth: { type: "runtime" } })
      const alice = { ...caller, subject: "user_42", actor: "alice", context: { ticket: "T-1" } }
      yield* sources.call(runtime, alice, "getPet", { petId: "1" })
      yield* sources.call(runtime, alice, "getPet", { petId: "2" })
      const [first, second] = server.requestsTo("/api").slice(1).map((request) => request.headers)
      expect(first!.authorization).toBe(`Bearer ${first!["x-agent-runtime-identity"]}`)
      expect(decodeJwt(first!["x-agent-runtime-identity"] as string)).toMatchObject({
        iss: issuer,
        aud: `${server.url}/api`,
        sub: "user_42",
        act: "alice",
        ctx: { ticket: "T-1" },
        tenant: "tn_1",
        agent: "client_1"
      })
      expect(second!["x-agent-runtime-identity"]).not.toBe(first!["x-agent-runtime-identity"])
    }))

  it.scoped("an inline document with a baseUrl is not fetched; without one its relative server is an error", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const inline = source({ document: server.document(), baseUrl: `${server.url}/api` })
      expect((yield* sources.list(inline, caller)).tools).toHaveLength(5)
      expect(textOf(yield* sources.call(inline, caller, "getPet", { petId: "2" }))).toContain('"name":"Tom"')
      expect(server.requests.map((request) => request.path)).toEqual(["/api/pets/2"])

      expect(yield* sources.list(source({ document: server.document() }), caller)).toEqual({
        status: "error",
        tools: [],
        error: "the document's server URL is relative or invalid; give the source a baseUrl"
      })
    }))

  it.scoped("the operations filter goes by operationId; a filtered operation is never called", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const filtered = source({
        url: server.documentUrl,
        operations: { include: ["getPet", "listPets", "deletePet"], exclude: ["deletePet"] }
      })
      expect((yield* sources.list(filtered, caller)).tools.map((tool) => tool.name)).toEqual(["listPets", "getPet"])
      const refused = yield* sources.call(filtered, caller, "deletePet", { petId: "1" })
      expect(refused).toMatchObject({ isError: true, code: "unavailable" })
      expect(server.requestsTo("/api")).toHaveLength(0)
    }))

  it.scoped("missing required arguments: invalid_arguments, nothing sent", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const pets = source({ url: server.documentUrl })
      expect(yield* sources.call(pets, caller, "getPet", {})).toEqual({
        content: [{ type: "text", text: "the argument petId is required; the call was not sent." }],
        isError: true,
        code: "invalid_arguments"
      })
      expect(yield* sources.call(pets, caller, "createPet", {})).toMatchObject({ code: "invalid_arguments" })
      expect(server.requestsTo("/api")).toHaveLength(0)
    }))

  it.scoped("a document that is not OpenAPI 3.x, or not there, is an error status", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      expect(yield* sources.list(source({ url: `${server.url}/not-openapi.json` }), caller)).toEqual({
        status: "error",
        tools: [],
        error: "not an OpenAPI 3.x document"
      })
      expect((yield* sources.list(source({ url: `${server.url}/missing.json` }), caller)).error)
        .toBe("the document URL answered 404")
      const port = yield* closedPort
      expect((yield* sources.list(source({ url: `http://127.0.0.1:${port}/openapi.json` }), caller)).error)
        .toBe("could not connect: ECONNREFUSED")
    }))

  it.scoped("a $ref to another URL is never fetched; the schema says it was not loaded", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources()
      const listing = yield* sources.list(source({ url: `${server.url}/remote-ref.json` }), caller)
      expect(listing.status).toBe("listed")
      expect(toolOf(listing, "createPet").parameters).toEqual({
        type: "object",
        properties: {
          body: {
            description:
              `(not loaded: ${server.url}/schemas/remote.json; only references inside the document are followed)`
          }
        },
        required: ["body"],
        additionalProperties: false
      })
      expect(server.requestsTo("/schemas")).toHaveLength(0)
    }))

  it.scoped("egress refuses private addresses: the document is not read, a call is not sent", () =>
    Effect.gen(function*() {
      const server = yield* OpenApiTestServer.start()
      const sources = yield* makeSources({}, { allowPrivate: false })
      const port = server.url.split(":")[2]
      const byUrl = yield* sources.list(source({ url: server.documentUrl }), caller)
      expect(byUrl.status).toBe("error")
      expect(byUrl.error).toBe(
        `outbound request to 127.0.0.1:${port} refused: the http: scheme is not allowed; use https (not_https)`
      )

      const inline = source({ document: server.document(), baseUrl: `https://127.0.0.1:${port}/api` })
      expect((yield* sources.list(inline, caller)).status).toBe("listed")
      const call = yield* sources.call(inline, caller, "getPet", { petId: "1" })
      expect(call).toMatchObject({ isError: true, code: "unavailable" })
      expect(textOf(call)).toContain("127.0.0.1 is not a public address")
      expect(server.requests).toHaveLength(0)
    }))
})
