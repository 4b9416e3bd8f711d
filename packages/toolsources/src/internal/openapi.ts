/**
 * An OpenAPI 3.0 or 3.1 document (JSON) as tools: one per operation, named
 * by its operationId (else method and path), its arguments one JSON Schema
 * object with a property per path, query and header parameter and `body`
 * for a JSON request body.
 *
 * `$ref`s are followed inside the document only: a document must not make
 * the runtime fetch other URLs (it would bypass the egress rules), so a
 * reference elsewhere, like a recursive one, is left as a described
 * placeholder.
 *
 * Safe methods (GET, HEAD, OPTIONS) run in parallel, others sequentially;
 * an operation's `x-agent-runtime-executionMode` and
 * `x-agent-runtime-deadlineMs` replace that and the 30 s deadline.
 */
import { dereference } from "@apidevtools/json-schema-ref-parser"
import { Effect, Either } from "effect"
import type { Caller, CallResult, OpenApiSource, SourceTool } from "../ToolSources.ts"
import * as Driver from "./driver.ts"
import * as Names from "./names.ts"
import * as Outcome from "./outcome.ts"

const defaultDeadlineMs = 30_000
const documentLimitBytes = 10 * 1024 * 1024
const answerLimitBytes = 1024 * 1024
const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const
const safeMethods = new Set<string>(["get", "head", "options"])
/** The OpenAPI specification has header parameters of these names ignored: the request itself sets them. */
const ignoredHeaders = new Set(["accept", "content-type", "authorization"])

// The document is the tenant's JSON; each field read is checked where it is used.
type Node = Record<string, any>

interface Parameter {
  readonly name: string
  readonly in: "path" | "query" | "header"
  /** Its property in the tool's arguments. */
  readonly argument: string
  readonly required: boolean
}

interface Operation {
  readonly method: string
  readonly path: string
  readonly baseUrl: string
  readonly parameters: ReadonlyArray<Parameter>
  readonly body?: { readonly contentType: string; readonly required: boolean }
}

const isNode = (value: unknown): value is Node => typeof value === "object" && value !== null && !Array.isArray(value)

const fail = (reason: string) => Effect.fail(new Driver.ListingFailed({ reason }))

/** At most `limit` bytes of a body as text, and whether there was more. */
const readText = async (response: Response, limit: number) => {
  if (response.body === null) return { text: "", truncated: false }
  const reader = response.body.getReader()
  const chunks: Array<Uint8Array> = []
  let size = 0
  while (size <= limit) {
    const { done, value } = await reader.read()
    if (done) return { text: Buffer.concat(chunks).toString("utf8"), truncated: false }
    chunks.push(value)
    size += value.byteLength
  }
  await reader.cancel()
  return { text: Buffer.concat(chunks).subarray(0, limit).toString("utf8"), truncated: true }
}

/** A deep copy of `schema` with each `$ref` left by dereferencing replaced by a placeholder that says why. */
const withoutRefs = (schema: unknown): unknown => {
  if (Array.isArray(schema)) return schema.map(withoutRefs)
  if (!isNode(schema)) return schema
  if (typeof schema.$ref === "string") {
    return {
      description: schema.$ref.startsWith("#")
        ? `(recursive: ${schema.$ref})`
        : `(not loaded: ${schema.$ref}; only references inside the document are followed)`
    }
  }
  return Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, withoutRefs(value)]))
}

/** The first server's URL with its variables at their defaults, resolved against the document's URL. */
const serverUrl = (servers: unknown, documentUrl: string | undefined): string | undefined => {
  const first = Array.isArray(servers) && isNode(servers[0]) ? servers[0] : { url: "/" }
  if (typeof first.url !== "string") return undefined
  const url = first.url.replace(/\{([^}]+)\}/g, (whole: string, name: string) => {
    const value = first.variables?.[name]?.default
    return typeof value === "string" ? value : whole
  })
  try {
    return new URL(url, documentUrl).href
  } catch {
    return undefined
  }
}

const loadDocument = (source: OpenApiSource, dependencies: Driver.Dependencies, caller: Caller) =>
  Effect.gen(function*() {
    if ((source.url === undefined) === (source.document === undefined)) {
      return yield* fail("the source needs either a document URL or an inline document")
    }
    if (source.document !== undefined) return source.document
    const url = source.url!
    const auth = yield* Driver.authHeaders(dependencies.identity, source.auth, caller, url).pipe(
      Effect.mapError(() => new Driver.ListingFailed({ reason: "the identity token could not be signed" }))
    )
    const { status, text, truncated } = yield* Effect.tryPromise({
      try: async (signal) => {
        const response = await dependencies.egress.fetchFunction(url, {
          headers: { ...auth, accept: "application/json" },
          signal
        })
        return { status: response.status, ...await readText(response, documentLimitBytes) }
      },
      catch: (error) => new Driver.ListingFailed({ reason: Outcome.sendFailure(error).reason })
    })
    if (status < 200 || status > 299) return yield* fail(`the document URL answered ${status}`)
    if (truncated) return yield* fail("the document is larger than 10 MiB")
    const parsed = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: () => new Driver.ListingFailed({ reason: "the document is not JSON (YAML is not supported)" })
    })
    return isNode(parsed) ? parsed : yield* fail("not an OpenAPI 3.x document")
  })

/** Path-level and operation-level parameters, the operation's winning; only those an HTTP call can carry. */
const parametersOf = (item: Node, operation: Node): Array<Node> => {
  const byKey = new Map<string, Node>()
  for (const parameter of [...(item.parameters ?? []), ...(operation.parameters ?? [])]) {
    if (isNode(parameter) && typeof parameter.name === "string") {
      byKey.set(`${parameter.in}:${parameter.name}`, parameter)
    }
  }
  return [...byKey.values()].filter((parameter) =>
    parameter.in === "path" || parameter.in === "query" ||
    (parameter.in === "header" && !ignoredHeaders.has(parameter.name.toLowerCase()))
  )
}

const schemaOf = (parameter: Node): unknown => {
  if (parameter.schema !== undefined) return parameter.schema
  const content = isNode(parameter.content) ? Object.values(parameter.content)[0] : undefined
  return isNode(content) && content.schema !== undefined ? content.schema : {}
}

const describe = (schema: unknown, description: unknown) =>
  withoutRefs(typeof description === "string" && isNode(schema) ? { ...schema, description } : schema)

interface Compiled {
  readonly tools: Array<SourceTool>
  readonly operations: Map<string, Operation>
}

const compile = (source: OpenApiSource, document: Node) =>
  Effect.gen(function*() {
    if (typeof document.openapi !== "string" || !/^3\.[01]\.\d+/.test(document.openapi) || !isNode(document.paths)) {
      return yield* fail("not an OpenAPI 3.x document")
    }
    const resolved: Node = yield* Effect.tryPromise({
      try: () =>
        dereference(document, {
          resolve: { external: false, file: false, http: false },
          dereference: { circular: "ignore" },
          mutateInputSchema: false
        }),
      catch: (error) =>
        new Driver.ListingFailed({ reason: `a $ref in the document does not resolve: ${(error as Error).message}` })
    })
    const found: Array<
      {
        readonly raw: string
        readonly operationId?: string
        readonly tool: Omit<SourceTool, "name">
        readonly operation: Operation
      }
    > = []
    for (const [path, item] of Object.entries(resolved.paths as Node)) {
      if (!isNode(item)) continue
      for (const method of methods) {
        const operation = item[method]
        if (!isNode(operation)) continue
        const baseUrl = source.baseUrl ?? serverUrl(operation.servers ?? item.servers ?? resolved.servers, source.url)
        if (baseUrl === undefined) {
          return yield* fail("the document's server URL is relative or invalid; give the source a baseUrl")
        }
        if (!URL.canParse(baseUrl)) return yield* fail("the baseUrl is not a valid URL")
        const taken = new Set(["body"])
        const properties: Record<string, unknown> = {}
        const required: Array<string> = []
        const parameters = parametersOf(item, operation).map((parameter): Parameter => {
          const argument = taken.has(parameter.name) ? `${parameter.in}_${parameter.name}` : parameter.name
          taken.add(argument)
          properties[argument] = describe(schemaOf(parameter), parameter.description)
          const isRequired = parameter.in === "path" || parameter.required === true
          if (isRequired) required.push(argument)
          return { name: parameter.name, in: parameter.in, argument, required: isRequired }
        })
        const requestBody = isNode(operation.requestBody) ? operation.requestBody : undefined
        const content: Node = isNode(requestBody?.content) ? requestBody.content : {}
        const contentType = Object.keys(content).find((type) => /^application\/([\w.-]+\+)?json\b/i.test(type))
        const bodyRequired = requestBody?.required === true
        // A body only sent as something other than JSON cannot be made from the model's arguments.
        if (bodyRequired && contentType === undefined) continue
        if (contentType !== undefined) {
          properties.body = describe(content[contentType]?.schema ?? {}, requestBody?.description)
          if (bodyRequired) required.push("body")
        }
        const deadlineMs = Driver.deadlineOf(operation["x-agent-runtime-deadlineMs"])
        const description = [operation.summary, operation.description].filter((text) => typeof text === "string")
          .join("\n\n")
        found.push({
          raw: typeof operation.operationId === "string" ? operation.operationId : `${method} ${path}`,
          ...(typeof operation.operationId === "string" ? { operationId: operation.operationId } : {}),
          tool: {
            description: description === "" ? `${method.toUpperCase()} ${path}` : description,
            parameters: {
              type: "object",
              properties,
              ...(required.length === 0 ? {} : { required }),
              additionalProperties: false
            },
            ...(deadlineMs === undefined ? {} : { deadlineMs }),
            executionMode: Driver.executionModeOf(operation["x-agent-runtime-executionMode"]) ??
              (safeMethods.has(method) ? "parallel" : "sequential")
          },
          operation: {
            method: method.toUpperCase(),
            path,
            baseUrl,
            parameters,
            ...(contentType === undefined ? {} : { body: { contentType, required: bodyRequired } })
          }
        })
      }
    }
    const names = Names.unique(found.map(({ raw }) => raw), /[^A-Za-z0-9_]+/g)
    const compiled: Compiled = { tools: [], operations: new Map() }
    found.forEach(({ operation, operationId, tool }, index) => {
      const name = names[index]!
      if (!Names.admits(source.operations, operationId ?? name, name)) return
      compiled.tools.push({ name, ...tool })
      compiled.operations.set(name, operation)
    })
    return compiled
  })

/** A query or header value as text: arrays are repeated (query) or joined, objects sent as JSON. */
const asText = (value: unknown) => typeof value === "object" ? JSON.stringify(value) : String(value)

/** The request for `operation` from the model's arguments, or what is missing. */
const buildRequest = (
  operation: Operation,
  args: Record<string, unknown>
): Either.Either<{ readonly url: URL; readonly headers: Record<string, string>; readonly body?: string }, string> => {
  const missing = operation.parameters.find((parameter) => parameter.required && args[parameter.argument] == null)
  if (missing !== undefined) return Either.left(`the argument ${missing.argument} is required`)
  if (operation.body?.required === true && args.body === undefined) return Either.left("the argument body is required")
  const values = (location: Parameter["in"]) =>
    operation.parameters.flatMap((parameter) =>
      parameter.in === location && args[parameter.argument] != null
        ? [{ parameter, value: args[parameter.argument] }]
        : []
    )
  const pathValues = new Map(values("path").map(({ parameter, value }) => [parameter.name, asText(value)]))
  const path = operation.path.replace(
    /\{([^}]+)\}/g,
    (whole: string, name: string) => pathValues.has(name) ? encodeURIComponent(pathValues.get(name)!) : whole
  )
  const url = new URL(operation.baseUrl.replace(/\/+$/, "") + path)
  for (const { parameter, value } of values("query")) {
    for (const item of Array.isArray(value) ? value : [value]) url.searchParams.append(parameter.name, asText(item))
  }
  const headers: Record<string, string> = { accept: "application/json" }
  for (const { parameter, value } of values("header")) {
    headers[parameter.name] = Array.isArray(value) ? value.map(asText).join(",") : asText(value)
  }
  if (operation.body === undefined || args.body === undefined) return Either.right({ url, headers })
  headers["content-type"] = operation.body.contentType
  return Either.right({ url, headers, body: JSON.stringify(args.body) })
}

/** Any status but 2xx is the operation's failure; a redirect included, as none is followed. */
const answer = (status: number, text: string, truncated: boolean): CallResult => {
  const shown = `HTTP ${status}${text === "" ? "" : `\n\n${text}`}${
    truncated ? "\n\n[the rest of the answer, past 1 MiB, was cut]" : ""
  }`
  return status >= 200 && status <= 299 ? Outcome.result(shown, false) : Outcome.failed(shown)
}

export const driver = (source: OpenApiSource, dependencies: Driver.Dependencies): Driver.Driver => {
  /** Offered name to its operation, from the latest listing. */
  let operations = new Map<string, Operation>()

  const call = (caller: Caller, tool: SourceTool, args: Record<string, unknown>) =>
    Effect.gen(function*() {
      const operation = operations.get(tool.name)
      if (operation === undefined) return Outcome.unavailable(`the document no longer has the operation ${tool.name}`)
      const request = buildRequest(operation, args)
      if (Either.isLeft(request)) return Outcome.invalidArguments(request.left)
      const auth = yield* Effect.either(
        Driver.authHeaders(dependencies.identity, source.auth, caller, operation.baseUrl)
      )
      if (Either.isLeft(auth)) return Outcome.ofSendFailure(auth.left)
      const { body, headers, url } = request.right
      const deadlineMs = tool.deadlineMs ?? defaultDeadlineMs
      return yield* Effect.tryPromise({
        try: async (signal) => {
          const response = await dependencies.egress.fetchFunction(url, {
            method: operation.method,
            headers: { ...headers, ...auth.right },
            ...(body === undefined ? {} : { body }),
            signal
          })
          const { text, truncated } = await readText(response, answerLimitBytes)
          return answer(response.status, text, truncated)
        },
        catch: Outcome.ofSendFailure
      }).pipe(
        Effect.merge,
        // Interrupting the request aborts it.
        Effect.timeoutTo({
          duration: deadlineMs,
          onTimeout: () => Outcome.timeout(deadlineMs),
          onSuccess: (result) => result
        })
      )
    })

  return {
    list: (caller) =>
      loadDocument(source, dependencies, caller).pipe(
        Effect.flatMap((document) => compile(source, document)),
        Effect.map((compiled) => {
          operations = compiled.operations
          return compiled.tools
        })
      ),
    call: (caller, tool, args) => call(caller, tool, args),
    close: Effect.void
  }
}
