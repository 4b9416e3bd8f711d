/**
 * An OpenAPI service for tool source tests, on a loopback port: a pet store
 * whose OpenAPI 3.1 document (`/openapi.json`, its parameters and schemas
 * behind `$ref`s, its server the relative `/api`) describes the operations
 * it implements in memory:
 *
 * - `GET /api/pets?limit=` (listPets), `POST /api/pets` with a JSON body
 *   (createPet), `GET /api/pets/{petId}` (getPet, 404 for an unknown pet),
 * - `DELETE /api/pets/{petId}` (deletePet) needing the header
 *   `x-api-key: <apiKey>`, else 401,
 * - `GET /api/pets/{petId}/owner` with no operationId.
 *
 * Also served: `/remote-ref.json`, a document with a `$ref` to
 * `/schemas/remote.json` by absolute URL (a client must never fetch it), and
 * `/not-openapi.json`, a Swagger 2.0 document. Every request is recorded
 * (method, path, query, headers, body) so tests can assert exactly what was
 * sent.
 */
import { Effect, type Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { text as readText } from "node:stream/consumers"

export interface Recorded {
  readonly method: string
  readonly path: string
  readonly query: Record<string, Array<string>>
  readonly headers: Http.IncomingHttpHeaders
  /** The body parsed as JSON, the text when it is not JSON, undefined when empty. */
  readonly body: unknown
}

export interface OpenApiTestServer {
  /** The origin, e.g. `http://127.0.0.1:4711`. */
  readonly url: string
  /** Where the document is served. */
  readonly documentUrl: string
  readonly apiKey: string
  /** The document as served, a fresh copy each time (for inline sources). */
  readonly document: () => Record<string, unknown>
  readonly requests: ReadonlyArray<Recorded>
  /** The requests to paths starting with `prefix`. */
  readonly requestsTo: (prefix: string) => ReadonlyArray<Recorded>
}

export interface Options {
  /** What `deletePet` wants in `x-api-key`. Default `key-123`. */
  readonly apiKey?: string
}

const json = { "application/json": { schema: { $ref: "#/components/schemas/Pet" } } }

const petstore = () => ({
  openapi: "3.1.0",
  info: { title: "Pets", version: "1.0.0" },
  servers: [{ url: "/api" }],
  paths: {
    "/pets": {
      get: {
        operationId: "listPets",
        summary: "List the pets",
        parameters: [{ $ref: "#/components/parameters/Limit" }],
        responses: { "200": { description: "the pets" } }
      },
      post: {
        operationId: "createPet",
        summary: "Add a pet",
        requestBody: {
          required: true,
          description: "the new pet",
          content: { "application/json": { schema: { $ref: "#/components/schemas/NewPet" } } }
        },
        responses: { "201": { description: "the pet", content: json } }
      }
    },
    "/pets/{petId}": {
      parameters: [{ $ref: "#/components/parameters/PetId" }],
      get: {
        operationId: "getPet",
        summary: "One pet",
        description: "Answers 404 for a pet that does not exist.",
        responses: { "200": { description: "the pet", content: json }, "404": { description: "no such pet" } }
      },
      delete: {
        operationId: "deletePet",
        summary: "Remove a pet",
        security: [{ apiKey: [] }],
        parameters: [{ name: "x-request-id", in: "header", description: "for the logs", schema: { type: "string" } }],
        responses: { "204": { description: "removed" }, "401": { description: "no key" } }
      }
    },
    "/pets/{petId}/owner": {
      parameters: [{ $ref: "#/components/parameters/PetId" }],
      get: { summary: "The pet's owner", responses: { "200": { description: "the owner" } } }
    }
  },
  components: {
    parameters: {
      PetId: { name: "petId", in: "path", required: true, description: "the pet's id", schema: { type: "string" } },
      Limit: { name: "limit", in: "query", description: "at most this many", schema: { type: "integer", minimum: 1 } }
    },
    schemas: {
      Owner: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
      NewPet: {
        type: "object",
        properties: {
          name: { type: "string" },
          tag: { type: "string" },
          owner: { $ref: "#/components/schemas/Owner" }
        },
        required: ["name"]
      },
      Pet: {
        allOf: [{ $ref: "#/components/schemas/NewPet" }, {
          type: "object",
          properties: { id: { type: "string" } },
          required: ["id"]
        }]
      }
    },
    securitySchemes: { apiKey: { type: "apiKey", in: "header", name: "x-api-key" } }
  }
})

const withRemoteRef = (origin: string) => ({
  openapi: "3.1.0",
  info: { title: "Remote ref", version: "1.0.0" },
  servers: [{ url: "/api" }],
  paths: {
    "/pets": {
      post: {
        operationId: "createPet",
        requestBody: {
          required: true,
          content: { "application/json": { schema: { $ref: `${origin}/schemas/remote.json` } } }
        },
        responses: { "201": { description: "the pet" } }
      }
    }
  }
})

const swagger = { swagger: "2.0", info: { title: "Old", version: "1" }, paths: {} }

interface Pet {
  readonly id: string
  readonly name: string
  readonly tag?: string
  readonly owner?: { readonly name: string }
}

const parse = (text: string): unknown => {
  if (text === "") return undefined
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

export const start = (options: Options = {}): Effect.Effect<OpenApiTestServer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const apiKey = options.apiKey ?? "key-123"
    const requests: Array<Recorded> = []
    const pets = new Map<string, Pet>([
      ["1", { id: "1", name: "Rex", tag: "dog", owner: { name: "Ann" } }],
      ["2", { id: "2", name: "Tom", tag: "cat" }]
    ])
    let origin = ""

    const send = (response: Http.ServerResponse, status: number, body?: unknown) => {
      if (body === undefined) return response.writeHead(status).end()
      response.writeHead(status, { "content-type": "application/json" })
      response.end(JSON.stringify(body))
    }

    const route = (request: Http.IncomingMessage, url: URL, body: unknown, response: Http.ServerResponse) => {
      const method = request.method ?? "GET"
      const path = url.pathname
      if (method === "GET" && path === "/openapi.json") return send(response, 200, petstore())
      if (method === "GET" && path === "/remote-ref.json") return send(response, 200, withRemoteRef(origin))
      if (method === "GET" && path === "/schemas/remote.json") return send(response, 200, { type: "object" })
      if (method === "GET" && path === "/not-openapi.json") return send(response, 200, swagger)
      if (path === "/api/pets" && method === "GET") {
        const limit = Number(url.searchParams.get("limit") ?? Infinity)
        return send(response, 200, [...pets.values()].slice(0, limit))
      }
      if (path === "/api/pets" && method === "POST") {
        const input = body as Omit<Pet, "id">
        if (typeof input?.name !== "string") return send(response, 400, { error: "name is required" })
        const pet = { ...input, id: String(pets.size + 1) }
        pets.set(pet.id, pet)
        return send(response, 201, pet)
      }
      const match = /^\/api\/pets\/([^/]+)(\/owner)?$/.exec(path)
      if (match === null) return send(response, 404, { error: `no route ${method} ${path}` })
      const id = decodeURIComponent(match[1]!)
      const pet = pets.get(id)
      if (method === "DELETE" && match[2] === undefined) {
        if (request.headers["x-api-key"] !== apiKey) return send(response, 401, { error: "x-api-key is wrong" })
        if (pet === undefined) return send(response, 404, { error: `no pet ${id}` })
        pets.delete(id)
        return send(response, 204)
      }
      if (method !== "GET") return send(response, 405, { error: "method not allowed" })
      if (pet === undefined) return send(response, 404, { error: `no pet ${id}` })
      return send(response, 200, match[2] === undefined ? pet : pet.owner ?? {})
    }

    const http = Http.createServer((request, response) => {
      void readText(request).then((text) => {
        const url = new URL(request.url ?? "/", origin)
        const body = parse(text)
        const query: Record<string, Array<string>> = {}
        for (const [name, value] of url.searchParams) (query[name] ??= []).push(value)
        requests.push({ method: request.method ?? "GET", path: url.pathname, query, headers: request.headers, body })
        route(request, url, body, response)
      })
    })

    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        http.listen(0, "127.0.0.1", () => {
          origin = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
          resume(Effect.void)
        })
      }),
      () =>
        Effect.async<void>((resume) => {
          http.closeAllConnections()
          http.close(() => resume(Effect.void))
        })
    )

    return {
      url: origin,
      documentUrl: `${origin}/openapi.json`,
      apiKey,
      document: petstore,
      requests,
      requestsTo: (prefix) => requests.filter((request) => request.path.startsWith(prefix))
    }
  })
