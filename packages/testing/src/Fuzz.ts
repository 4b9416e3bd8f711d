/**
 * Schema-driven fuzzing of a real node: requests are generated with
 * fast-check from the API's own OpenAPI document (and, for the gateway,
 * from the request shapes of its protocols in `FuzzWorld`), then bent
 * out of shape (wrong types, missing and extra fields, huge strings and
 * arrays, NUL bytes and broken unicode, deep nesting, huge numbers, wrong
 * content types, truncated, oversized and invalid UTF-8 bodies, bad and
 * foreign credentials, garbage path segments) and sent over plain
 * node:http, which puts on the wire whatever a client could: raw percent
 * escapes, bytes that are not UTF-8, bodies cut short.
 *
 * Every answer is held to the contract: no 5xx, a 4xx carries the
 * surface's error body (`{error, code}` on REST, each protocol's own shape
 * on the gateway), no secret appears in any answer, and another tenant's
 * resources are never reached. Generation is deterministic for a seed.
 */
import { Effect } from "effect"
import fc from "fast-check"
import * as Http from "node:http"
import * as Net from "node:net"

// ---------------------------------------------------------------------------
// Operations

/** A JSON Schema as the OpenAPI 3.1 document writes it. */
export type JsonSchema = { readonly [key: string]: any }

/** Whose error body a 4xx must have. */
export type Surface = "rest" | "chat" | "messages"

/** Which credential an operation wants. */
export type Security = "none" | "tenant" | "agent" | "operator" | "gateway"

export interface Parameter {
  readonly name: string
  readonly in: "path" | "query" | "header"
  readonly required: boolean
  readonly schema: JsonSchema
}

export interface Operation {
  readonly listener: "rest" | "gateway"
  readonly method: string
  /** The template, `{name}` for path parameters. */
  readonly path: string
  readonly parameters: ReadonlyArray<Parameter>
  readonly body: JsonSchema | undefined
  readonly security: Security
  readonly surface: Surface
  /** Where `$ref`s point. */
  readonly components: Readonly<Record<string, JsonSchema>>
}

export const label = (operation: Operation) =>
  `${operation.listener === "gateway" ? "gateway " : ""}${operation.method} ${operation.path}`

const securityOf = (requirements: ReadonlyArray<Record<string, unknown>> | undefined): Security => {
  const names = (requirements ?? []).flatMap(Object.keys)
  if (names.includes("operator")) return "operator"
  if (names.includes("agent")) return "agent"
  if (names.includes("bearer")) return "tenant"
  return "none"
}

/** Every operation of the REST API's OpenAPI document. */
export const restOperations = (document: any): ReadonlyArray<Operation> =>
  Object.entries<Record<string, any>>(document.paths).flatMap(([path, methods]) =>
    Object.entries<any>(methods).map((entry): Operation => {
      const [method, operation] = entry
      return {
        listener: "rest",
        method: method.toUpperCase(),
        path,
        parameters: (operation.parameters ?? []).map((parameter: any): Parameter => ({
          name: parameter.name,
          in: parameter.in,
          required: parameter.required === true,
          schema: parameter.schema ?? {}
        })),
        body: operation.requestBody?.content?.["application/json"]?.schema,
        security: securityOf(operation.security),
        surface: "rest",
        components: document.components?.schemas ?? {}
      }
    })
  )

// ---------------------------------------------------------------------------
// Values that follow a schema

/** What the generators fill in from the world under test. */
export interface Fill {
  readonly keys: Keys
  /** Real values for a path parameter: the tenant's own resources (and, marked, another tenant's). */
  readonly ids: (operation: Operation, parameter: string) => ReadonlyArray<Id>
  /** Real values for string fields and parameters of this name (model ids, key scopes, base URLs). */
  readonly values: (name: string) => ReadonlyArray<string> | undefined
  /** The node's MAX_BODY_BYTES: oversized bodies are just over it. */
  readonly maxBodyBytes: number
  /** The longest valid long-poll `wait` to send, so a bounded run stays short. */
  readonly longPollSeconds: number
}

export interface Id {
  readonly value: string
  /** Another tenant's: a request with it must not succeed (an upsert by name aside). */
  readonly foreign?: boolean
}

export interface Keys {
  readonly apiKey: string
  readonly foreignKey: string
  readonly revokedKey: string
  readonly agentToken: string
  readonly foreignAgentToken: string
  readonly operatorToken: string
  readonly tenantId: string
  readonly foreignTenantId: string
}

const resolve = (schema: JsonSchema, components: Readonly<Record<string, JsonSchema>>): JsonSchema => {
  if (typeof schema.$ref !== "string") return schema
  const { $ref, ...rest } = schema
  const target = components[($ref as string).replace("#/components/schemas/", "")] ?? {}
  return resolve({ ...target, ...rest }, components)
}

/** Beyond this depth objects keep only their required fields and arrays their fewest items (schemas recurse). */
const maxDepth = 6

/** A value the schema accepts, as far as generation can tell (patterns and formats are best effort). */
export const valid = (
  schema_: JsonSchema,
  components: Readonly<Record<string, JsonSchema>>,
  fill: Pick<Fill, "values" | "longPollSeconds">,
  name = "",
  depth = 0
): fc.Arbitrary<unknown> => {
  const schema = resolve(schema_, components)
  const members = schema.anyOf ?? schema.oneOf
  if (Array.isArray(members)) {
    return fc.oneof(...members.map((member: JsonSchema) => valid(member, components, fill, name, depth)))
  }
  if ("const" in schema) return fc.constant(schema.const)
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum)
  if (Array.isArray(schema.type)) {
    return fc.oneof(...schema.type.map((type: string) => valid({ ...schema, type }, components, fill, name, depth)))
  }
  switch (schema.type) {
    case "string": {
      const min: number = schema.minLength ?? 0
      const max: number = Math.min(schema.maxLength ?? 24, Math.max(min, 24))
      const generated = schema.pattern !== undefined
        ? fc.stringMatching(new RegExp(schema.pattern)).map((value) =>
          value.padEnd(min, "x").slice(0, schema.maxLength ?? Math.max(min, value.length))
        )
        : fc.string({ minLength: min, maxLength: max })
      const real = fill.values(name)
      return real === undefined || real.length === 0
        ? generated
        : fc.oneof({ weight: 2, arbitrary: fc.constantFrom(...real) }, { weight: 1, arbitrary: generated })
    }
    case "integer":
    case "number": {
      let min: number = schema.minimum ?? (schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum + 1 : -1e6)
      let max: number = schema.maximum ?? (schema.exclusiveMaximum !== undefined ? schema.exclusiveMaximum - 1 : 1e6)
      if (name === "wait") max = Math.min(max, fill.longPollSeconds)
      min = Math.max(min, -Number.MAX_SAFE_INTEGER)
      max = Math.max(min, Math.min(max, Number.MAX_SAFE_INTEGER))
      return schema.type === "integer"
        ? fc.integer({ min: Math.ceil(min), max: Math.floor(max) })
        : fc.double({ min, max, noNaN: true, noDefaultInfinity: true })
    }
    case "boolean":
      return fc.boolean()
    case "null":
      return fc.constant(null)
    case "array": {
      const min: number = schema.minItems ?? 0
      const max: number = depth >= maxDepth ? min : Math.min(schema.maxItems ?? 3, Math.max(min, 3))
      return fc.array(valid(schema.items ?? {}, components, fill, name, depth + 1), { minLength: min, maxLength: max })
    }
    case "object": {
      const properties = Object.entries<JsonSchema>(schema.properties ?? {})
      const required: ReadonlyArray<string> = schema.required ?? []
      const kept = depth >= maxDepth ? properties.filter(([key]) => required.includes(key)) : properties
      const record = fc.record(
        Object.fromEntries(kept.map(([key, property]) => [key, valid(property, components, fill, key, depth + 1)])),
        { requiredKeys: required.filter((key) => kept.some(([name]) => name === key)) }
      )
      const additional = schema.additionalProperties
      if (additional === undefined || additional === false || depth >= maxDepth) return record
      // Header maps (the document gives no pattern for their names) get names and values a header can carry.
      const headers = /headers$/i.test(name)
      const extra = fc.dictionary(
        headers ? fc.stringMatching(/^x-[a-z0-9-]{1,12}$/) : fc.string({ minLength: 1, maxLength: 12 }),
        headers
          ? fc.string({ unit: "binary-ascii", maxLength: 20 }).map((value) => value.replace(/[^\x20-\x7e]/g, ""))
          : valid(additional === true ? {} : additional, components, fill, "", depth + 1),
        { maxKeys: Math.min(schema.maxProperties ?? 3, 3) }
      )
      return fc.tuple(extra, record).map(([rest, known]) => ({ ...rest, ...known }))
    }
    default:
      // No type: any JSON (`unknown` fields such as an agent's context).
      return fc.jsonValue({ maxDepth: 2 })
  }
}

// ---------------------------------------------------------------------------
// Bending values out of shape

/** Strings that have broken services before: NUL, lone surrogates, direction marks, injection, very long. */
export const nastyString: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    "",
    " ",
    "\u0000",
    "a\u0000b",
    "\u0000\u0000\u0000",
    "\ud800",
    "\udfff\ud800",
    "\uffff",
    "\ufeff",
    "\u202e",
    "\r\n",
    "💩",
    "é",
    "%00",
    "%",
    "../../etc/passwd",
    "' OR 1=1 --",
    "<script>",
    "${x}",
    "null",
    "-1",
    "NaN",
    "tok_0000",
    "client_0000",
    "tn_0000",
    "__proto__"
  ),
  fc.string({ unit: "binary", maxLength: 30 }),
  fc.string({ unit: "grapheme", maxLength: 30 }),
  fc.string({ maxLength: 10 }).map((value) => `${value}\u0000${value}`),
  fc.constantFrom(300, 5_000).map((size) => "\u00e9\u4e2d".repeat(size))
)

/** Raw JSON numerals no JavaScript number holds exactly (placed into the text after stringifying). */
const hugeNumerals = [
  "1e400",
  "-1e400",
  "1e-400",
  "123456789012345678901234567890",
  "9007199254740993",
  "9223372036854775808",
  "-9223372036854775809",
  "2147483648",
  "-0",
  "1E+2",
  "0.000000000000000000001"
]
const numeralMarker = (index: number) => `@@fuzz-numeral-${index}@@`

type JsonPath = ReadonlyArray<string | number>

const pathsOf = (value: unknown, path: JsonPath = [], out: Array<JsonPath> = []): Array<JsonPath> => {
  out.push(path)
  if (Array.isArray(value)) value.forEach((item, index) => pathsOf(item, [...path, index], out))
  else if (value !== null && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) pathsOf(item, [...path, key], out)
  }
  return out
}

const drop = Symbol("drop")

const setAt = (value: unknown, path: JsonPath, replace: (old: unknown) => unknown): unknown => {
  if (path.length === 0) return replace(value)
  const [head, ...rest] = path
  if (Array.isArray(value)) {
    const copy = [...value]
    const next = setAt(copy[head as number], rest, replace)
    if (next === drop) copy.splice(head as number, 1)
    else copy[head as number] = next
    return copy
  }
  if (value !== null && typeof value === "object") {
    const copy: Record<string, unknown> = { ...(value as Record<string, unknown>) }
    const next = setAt(copy[head as string], rest, replace)
    if (next === drop) delete copy[head as string]
    else {Object.defineProperty(copy, head as string, {
        value: next,
        enumerable: true,
        writable: true,
        configurable: true
      })}
    return copy
  }
  return value
}

/** Deep nesting is written into the text after stringifying too: JSON.stringify itself recurses. */
const nestedMarker = (depth: number, kind: "array" | "object") => `@@fuzz-nested-${kind}-${depth}@@`
const nestedText = (depth: number, kind: "array" | "object") =>
  kind === "array" ? `${"[".repeat(depth)}1${"]".repeat(depth)}` : `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`

interface Mutation {
  readonly name: string
  readonly apply: (value: unknown, at: number) => unknown
}

const anyJson = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  fc.string({ maxLength: 8 }),
  fc.constant([]),
  fc.constant({}),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.jsonValue({ maxDepth: 2 })
)

const pick = (value: unknown, at: number, where: (node: unknown) => boolean = () => true): JsonPath | undefined => {
  const candidates = pathsOf(value).filter((path) => where(path.reduce<any>((node, key) => node?.[key], value)))
  return candidates.length === 0 ? undefined : candidates[at % candidates.length]
}

const isObject = (node: unknown): node is Record<string, unknown> =>
  node !== null && typeof node === "object" && !Array.isArray(node)

/** One change to a valid value, named for the report of a failure. */
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  anyJson.map((replacement): Mutation => ({
    name: `wrong type (${JSON.stringify(replacement)?.slice(0, 20)})`,
    apply: (value, at) => setAt(value, pick(value, at) ?? [], () => replacement)
  })),
  nastyString.map((replacement): Mutation => ({
    name: `string ${JSON.stringify(replacement).slice(0, 24)}`,
    apply: (value, at) => {
      const path = pick(value, at, (node) => typeof node === "string") ?? pick(value, at) ?? []
      return setAt(value, path, () => replacement)
    }
  })),
  nastyString.map((key): Mutation => ({
    name: `key ${JSON.stringify(key).slice(0, 24)}`,
    apply: (value, at) => {
      const path = pick(value, at, isObject)
      return path === undefined ? value : setAt(value, path, (node) => {
        const copy = { ...(node as Record<string, unknown>) }
        Object.defineProperty(copy, key, { value: "x", enumerable: true, writable: true, configurable: true })
        return copy
      })
    }
  })),
  fc.constant<Mutation>({
    name: "missing field",
    apply: (value, at) => {
      const path = pick(value, at, (node) => node !== value)
      return path === undefined ? {} : setAt(value, path, () => drop)
    }
  }),
  fc.constant<Mutation>({
    name: "extra field",
    apply: (value, at) => {
      const path = pick(value, at, isObject)
      return path === undefined
        ? value
        : setAt(value, path, (node) => ({ ...(node as object), fuzzExtra: [1, "x", null] }))
    }
  }),
  fc.constantFrom(20_000, 200_000).map((size): Mutation => ({
    name: `huge string (${size})`,
    apply: (value, at) =>
      setAt(value, pick(value, at, (node) => typeof node === "string") ?? pick(value, at) ?? [], () => "x".repeat(size))
  })),
  fc.constantFrom(1_000, 30_000).map((size): Mutation => ({
    name: `huge array (${size})`,
    apply: (value, at) =>
      setAt(value, pick(value, at, Array.isArray) ?? pick(value, at) ?? [], (node) => {
        // Copies of a small first item (never of a huge or marker one, which would make the body gigabytes).
        const first: unknown = Array.isArray(node) ? node[0] : undefined
        const small = typeof first === "number" || typeof first === "boolean" ||
          (typeof first === "string" && first.length < 64 && !first.startsWith("@@fuzz-"))
        return Array.from({ length: size }, () => (small ? first : "x"))
      })
  })),
  fc.tuple(fc.constantFrom(64, 1_000, 10_000, 100_000), fc.constantFrom<"array" | "object">("array", "object")).map((
    [depth, kind]
  ): Mutation => ({
    name: `nested ${depth} ${kind}s`,
    apply: (value, at) => setAt(value, pick(value, at) ?? [], () => nestedMarker(depth, kind))
  })),
  fc.nat(hugeNumerals.length - 1).map((index): Mutation => ({
    name: `numeral ${hugeNumerals[index]}`,
    apply: (value, at) =>
      setAt(
        value,
        pick(value, at, (node) => typeof node === "number") ?? pick(value, at) ?? [],
        () => numeralMarker(index)
      )
  }))
)

/** JSON text of a value, with numeral and nesting markers replaced by their raw text. */
const stringify = (value: unknown): string => {
  let out = JSON.stringify(value) ?? "null"
  if (!out.includes("@@fuzz-")) return out
  hugeNumerals.forEach((numeral, index) => {
    out = out.replaceAll(`"${numeralMarker(index)}"`, numeral)
  })
  return out.replace(
    /"@@fuzz-nested-(array|object)-(\d+)@@"/g,
    (_, kind: "array" | "object", depth: string) => nestedText(Number(depth), kind)
  )
}

// ---------------------------------------------------------------------------
// Requests

export type Body =
  | { readonly _tag: "Bytes"; readonly bytes: Buffer; readonly chunked: boolean }
  /** Just over MAX_BODY_BYTES, made when sent (so a long run does not hold them all). */
  | { readonly _tag: "Oversized"; readonly bytes: number; readonly chunked: boolean }

export interface Request {
  readonly operation: Operation
  readonly method: string
  /** As sent: already percent-encoded (or deliberately not). */
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: Body | undefined
  /** A path parameter holds another tenant's resource, and the credential acts for the tenant under test. */
  readonly foreign: boolean
  /** What was done to it, for the message of a failure. */
  readonly notes: ReadonlyArray<string>
}

const unreserved = /[A-Za-z0-9\-._~]/

/** Percent-encodes the UTF-8 bytes of a string (lone surrogates become U+FFFD, as in any encoder). */
export const percentEncode = (value: string) =>
  [...Buffer.from(value, "utf8")].map((byte) => {
    const char = String.fromCharCode(byte)
    return byte < 128 && unreserved.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`
  }).join("")

/** Path segments and query values no resource has: raw escapes (broken on purpose), NUL, very long. */
const garbageSegment: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    "%00",
    "a%00",
    "%00%00",
    "%FF",
    "%C3%28",
    "%E0%A4%A",
    "%ED%A0%80",
    "%",
    "%%",
    "%zz",
    "%2F",
    "%2e%2e",
    "..",
    "%20",
    "+",
    "0",
    "-1",
    "1e400",
    "null",
    "%EF%BB%BF",
    "%F0%9F%92%A9",
    "a".repeat(3_000)
  ),
  nastyString.filter((value) => value.length < 2_000).map(percentEncode),
  fc.string({ maxLength: 20 }).map(percentEncode)
)

/** Header values a client can send (latin-1, no control characters) that no credential or id has. */
const garbageHeader: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom("", " ", "null", "-1", "1e400", "a".repeat(4_000), "\u00ff\u00fe", "tn_0000", "client_0000", "%00"),
  fc.string({ unit: "binary-ascii", maxLength: 40 }).map((value) => value.replace(/[^\x20-\x7e]/g, "")),
  fc.string({ maxLength: 40 })
)

interface Credential {
  readonly name: string
  readonly headers: Record<string, string>
  /** Whose resources it reaches: another tenant's ids are foreign only to the tenant's own credentials. */
  readonly other?: boolean
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

const credentials = (operation: Operation, keys: Keys): fc.Arbitrary<Credential> => {
  const proper: ReadonlyArray<Credential> = operation.security === "tenant"
    ? [
      { name: "api key", headers: bearer(keys.apiKey) },
      { name: "api key", headers: bearer(keys.apiKey) },
      {
        name: "operator for tenant",
        headers: { ...bearer(keys.operatorToken), "x-agent-runtime-tenant": keys.tenantId }
      }
    ]
    : operation.security === "agent"
    ? [{ name: "agent token", headers: bearer(keys.agentToken) }]
    : operation.security === "operator"
    ? [{ name: "operator token", headers: bearer(keys.operatorToken) }]
    : operation.security === "gateway"
    ? operation.surface === "messages"
      ? [{ name: "x-api-key", headers: { "x-api-key": keys.apiKey } }, {
        name: "api key",
        headers: bearer(keys.apiKey)
      }]
      : [{ name: "api key", headers: bearer(keys.apiKey) }]
    : [{ name: "none", headers: {} }]
  const wrong: ReadonlyArray<fc.Arbitrary<Credential>> = [
    fc.constant({ name: "none", headers: {} }),
    fc.constant({ name: "foreign api key", headers: bearer(keys.foreignKey), other: true }),
    fc.constant({ name: "revoked api key", headers: bearer(keys.revokedKey) }),
    fc.constant({ name: "agent token", headers: bearer(keys.agentToken) }),
    fc.constant({ name: "foreign agent token", headers: bearer(keys.foreignAgentToken), other: true }),
    fc.constant({ name: "operator without tenant", headers: bearer(keys.operatorToken) }),
    fc.constant({
      name: "operator for foreign tenant",
      headers: { ...bearer(keys.operatorToken), "x-agent-runtime-tenant": keys.foreignTenantId },
      other: true
    }),
    garbageHeader.map((tenant) => ({
      name: "operator for garbage tenant",
      headers: { ...bearer(keys.operatorToken), "x-agent-runtime-tenant": tenant }
    })),
    fc.constant({
      name: "api key with foreign tenant header",
      headers: { ...bearer(keys.apiKey), "x-agent-runtime-tenant": keys.foreignTenantId }
    }),
    fc.constant({ name: "foreign x-api-key", headers: { "x-api-key": keys.foreignKey }, other: true }),
    fc.constantFrom(
      "Bearer",
      "Bearer ",
      "bearer  ",
      "Basic YTpi",
      "Token x",
      `Bearer ${keys.apiKey}x`,
      `Bearer  ${keys.apiKey} `
    )
      .map((authorization) => ({ name: "malformed authorization", headers: { authorization } })),
    garbageHeader.map((token) => ({ name: "garbage token", headers: bearer(token) })),
    fc.constant({ name: "huge token", headers: bearer(`art_${"a".repeat(6_000)}`) }),
    // Over node:http's 16 KiB of headers: refused by the parser, before any handler.
    fc.constant({ name: "headers over the limit", headers: bearer(`art_${"a".repeat(20_000)}`) })
  ]
  return fc.oneof(
    { weight: 12, arbitrary: fc.constantFrom(...proper) },
    { weight: 1, arbitrary: fc.oneof(...wrong) }
  )
}

const contentTypes = [
  undefined,
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=fuzz",
  "multipart/form-data",
  "application/json; charset=utf-16",
  "application/xml",
  "application/octet-stream",
  "APPLICATION/JSON",
  "application/json-patch+json",
  "*/*",
  ";;;"
]

/** A well-formed form or multipart body carrying the value's top-level fields. */
const formOf = (value: unknown, multipart: boolean): string => {
  const fields = isObject(value) ? Object.entries(value) : [["value", value]]
  const plain = fields.map((
    [key, item]
  ): [string, string] => [String(key), typeof item === "string" ? item : JSON.stringify(item) ?? ""])
  if (!multipart) return new URLSearchParams(plain).toString()
  return plain.map(([key, item]) => `--fuzz\r\ncontent-disposition: form-data; name="${key}"\r\n\r\n${item}\r\n`).join(
    ""
  ) + '--fuzz\r\ncontent-disposition: form-data; name="file"; filename="a.txt"\r\n' +
    "content-type: text/plain\r\n\r\nhello\r\n--fuzz--\r\n"
}

interface BodyChoice {
  readonly body: Body
  readonly contentType: string | undefined
  readonly note: string
}

const utf8 = (text: string) => Buffer.from(text, "utf8")

const bodies = (operation: Operation, fill: Fill): fc.Arbitrary<BodyChoice | undefined> => {
  const json = "application/json"
  const bytes = (text: string | Buffer, chunked = false): Body => ({
    _tag: "Bytes",
    bytes: typeof text === "string" ? utf8(text) : text,
    chunked
  })
  if (operation.body === undefined) {
    // Routes without a body get one now and then: it must be ignored or refused, never trusted.
    return fc.oneof(
      { weight: 12, arbitrary: fc.constant(undefined) },
      {
        weight: 1,
        arbitrary: fc.constant<BodyChoice>({
          body: bytes('{"a":"\\u0000"}'),
          contentType: json,
          note: "body on a route without one"
        })
      },
      {
        weight: 1,
        arbitrary: fc.constant<BodyChoice>({
          body: bytes("{"),
          contentType: json,
          note: "broken body on a route without one"
        })
      }
    )
  }
  const value = valid(operation.body, operation.components, fill)
  const chunked = fc.boolean()
  return fc.oneof(
    {
      weight: 6,
      arbitrary: fc.tuple(value, chunked).map(([v, c]): BodyChoice => ({
        body: bytes(stringify(v), c),
        contentType: json,
        note: "valid"
      }))
    },
    {
      weight: 10,
      arbitrary: fc.tuple(value, fc.array(fc.tuple(mutation, fc.nat()), { minLength: 1, maxLength: 2 })).map(
        ([v, changes]) => {
          const changed = changes.reduce((acc, [change, at]) => change.apply(acc, at), v)
          return {
            body: bytes(stringify(changed)),
            contentType: json,
            note: changes.map(([change]) => change.name).join(", ")
          }
        }
      )
    },
    {
      weight: 2,
      arbitrary: fc.tuple(value, fc.nat()).map(([v, at]): BodyChoice => {
        const text = stringify(v)
        return { body: bytes(text.slice(0, at % Math.max(1, text.length))), contentType: json, note: "truncated" }
      })
    },
    {
      weight: 2,
      arbitrary: fc.tuple(
        value,
        fc.nat(),
        fc.constantFrom([0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xc0, 0xaf])
      )
        .map(([v, at, bad]): BodyChoice => {
          const text = utf8(stringify(v))
          // Inside a string where there is one, so the JSON stays well-formed and only the encoding is wrong.
          const quote = text.indexOf(34, at % Math.max(1, text.length))
          const cut = quote === -1 ? at % Math.max(1, text.length) : quote + 1
          return {
            body: bytes(Buffer.concat([text.subarray(0, cut), Buffer.from(bad), text.subarray(cut)])),
            contentType: json,
            note: `invalid UTF-8 ${bad.map((b) => b.toString(16)).join(" ")}`
          }
        })
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        "",
        " ",
        "null",
        "[]",
        '"x"',
        "1",
        "true",
        "{}",
        '{"a":1}{}',
        "{'a':1}",
        "NaN",
        "\ufeff{}",
        '{"a":"\\ud800"}',
        "[".repeat(100_000)
      )
        .map((text): BodyChoice => ({
          body: bytes(text),
          contentType: json,
          note: `body ${JSON.stringify(text.slice(0, 12))}`
        }))
    },
    {
      weight: 3,
      arbitrary: fc.tuple(value, fc.constantFrom(...contentTypes)).map(([v, contentType]): BodyChoice => ({
        body: bytes(
          contentType?.includes("urlencoded")
            ? formOf(v, false)
            : contentType?.includes("multipart")
            ? formOf(v, true)
            : stringify(v)
        ),
        contentType,
        note: `content-type ${contentType ?? "none"}`
      }))
    },
    {
      weight: 1,
      arbitrary: fc.tuple(value, fc.nat()).map(([v, at]): BodyChoice => {
        // A NUL byte in a form field: the same class as in JSON, through another decoder.
        const fields = isObject(v) ? Object.keys(v) : []
        const field = fields.length === 0 ? "name" : fields[at % fields.length]!
        return {
          body: bytes(`${encodeURIComponent(field)}=a%00b`),
          contentType: "application/x-www-form-urlencoded",
          note: `form field ${field} with NUL`
        }
      })
    },
    {
      weight: 1,
      arbitrary: chunked.map((c): BodyChoice => ({
        body: { _tag: "Oversized", bytes: fill.maxBodyBytes + 1 + 1024, chunked: c },
        contentType: json,
        note: c ? "oversized, chunked" : "oversized"
      }))
    }
  )
}

const queryValue = (parameter: Parameter, operation: Operation, fill: Fill): fc.Arbitrary<string | undefined> => {
  const real = valid(parameter.schema, operation.components, fill, parameter.name).map((value) =>
    typeof value === "string" ? percentEncode(value) : percentEncode(String(value))
  )
  return fc.oneof(
    { weight: parameter.required ? 0 : 3, arbitrary: fc.constant(undefined) },
    { weight: 4, arbitrary: real },
    { weight: 2, arbitrary: garbageSegment }
  )
}

const headerValue = (parameter: Parameter, operation: Operation, fill: Fill): fc.Arbitrary<string | undefined> =>
  fc.oneof(
    { weight: parameter.required ? 0 : 3, arbitrary: fc.constant(undefined) },
    {
      weight: parameter.required ? 12 : 4,
      arbitrary: valid(parameter.schema, operation.components, fill, parameter.name).map((value) =>
        String(value).replace(/[^\x20-\x7e]/g, "")
      )
    },
    { weight: 2, arbitrary: garbageHeader }
  )

/** The segment for a path parameter: a real id (most of the time) or garbage. */
const segment = (
  operation: Operation,
  parameter: Parameter,
  fill: Fill
): fc.Arbitrary<{ value: string; foreign: boolean }> => {
  const ids = fill.ids(operation, parameter.name)
  const garbage = garbageSegment.map((value) => ({ value, foreign: false }))
  if (ids.length === 0) return garbage
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc.constantFrom(...ids).map((id) => ({ value: percentEncode(id.value), foreign: id.foreign === true }))
    },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(...ids), fc.constantFrom("%00", "x", "%FF", "/x", "%2F..")).map((
        [id, tail]
      ) => ({
        value: percentEncode(id.value) + tail,
        foreign: false
      }))
    },
    { weight: 2, arbitrary: garbage }
  )
}

const otherMethods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

/** Requests for one operation. */
export const requests = (operation: Operation, fill: Fill): fc.Arbitrary<Request> => {
  const pathParameters = operation.parameters.filter((parameter) => parameter.in === "path")
  const queryParameters = operation.parameters.filter((parameter) => parameter.in === "query")
  const headerParameters = operation.parameters.filter((parameter) => parameter.in === "header")
  return fc.record({
    segments: fc.tuple(...pathParameters.map((parameter) => segment(operation, parameter, fill))),
    query: fc.tuple(...queryParameters.map((parameter) => queryValue(parameter, operation, fill))),
    extraQuery: fc.oneof({ weight: 8, arbitrary: fc.constant("") }, {
      weight: 1,
      arbitrary: fc.constantFrom(
        "&fuzz=1",
        "&limit=1&limit=2",
        "&%00=%00",
        "&after",
        "&=",
        "&wait=1e400",
        "&poll=1&poll=0"
      )
    }),
    headers: fc.tuple(...headerParameters.map((parameter) => headerValue(parameter, operation, fill))),
    credential: credentials(operation, fill.keys),
    body: bodies(operation, fill),
    method: fc.oneof(
      { weight: 30, arbitrary: fc.constant(operation.method) },
      { weight: 1, arbitrary: fc.constantFrom(...otherMethods.filter((method) => method !== operation.method)) }
    ),
    suffix: fc.oneof({ weight: 30, arbitrary: fc.constant("") }, {
      weight: 1,
      arbitrary: fc.constantFrom("/", "/%00", "/..", "%FF", "/x", ";x", "//")
    })
  }).map(({ body, credential, extraQuery, headers, method, query, segments, suffix }): Request => {
    let path = operation.path
    pathParameters.forEach((parameter, index) => {
      path = path.replace(`{${parameter.name}}`, segments[index]!.value)
    })
    const pairs = queryParameters.flatMap((parameter, index) => {
      const value = query[index]
      return value === undefined ? [] : [`${parameter.name}=${value}`]
    })
    const search = pairs.join("&") + extraQuery
    const sent: Record<string, string> = { ...credential.headers }
    headerParameters.forEach((parameter, index) => {
      const value = headers[index]
      if (value !== undefined) sent[parameter.name] = value
    })
    if (body?.contentType !== undefined) sent["content-type"] = body.contentType
    return {
      operation,
      method,
      path: path + suffix + (search === "" ? "" : `?${search.replace(/^&/, "")}`),
      headers: sent,
      body: body?.body,
      foreign: credential.other !== true && segments.some((segment) => segment.foreign),
      notes: [
        `credential: ${credential.name}`,
        ...(body === undefined ? [] : [`body: ${body.note}`]),
        ...(method === operation.method ? [] : [`method ${method}`]),
        ...(suffix === "" ? [] : [`path suffix ${suffix}`])
      ]
    }
  })
}

// ---------------------------------------------------------------------------
// Sending

export interface Answer {
  /** 0 when no answer came. */
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly text: string
  /** Why no (whole) answer came. */
  readonly error?: string
}

const materialize = (body: Body): Buffer =>
  body._tag === "Bytes" ? body.bytes : utf8(`{"name":"${"x".repeat(Math.max(0, body.bytes - 11))}"}`)

/**
 * Sends one request. An event stream is read until its first frame (REST)
 * or its end (the gateway's model streams end by themselves).
 */
export const send = (base: string, request: Request, agent: Http.Agent, timeoutMs: number): Promise<Answer> =>
  new Promise((resolve) => {
    const url = new URL(base)
    const body = request.body === undefined ? undefined : materialize(request.body)
    const chunked = request.body?.chunked === true
    const headers: Record<string, string | number> = { ...request.headers }
    if (body !== undefined && !chunked) headers["content-length"] = body.length
    if (chunked) headers["transfer-encoding"] = "chunked"
    let settled = false
    const done = (answer: Answer) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve(answer)
    }
    const outgoing = Http.request({
      host: url.hostname,
      port: url.port,
      method: request.method,
      path: request.path,
      headers,
      agent
    }, (response) => {
      const chunks: Array<Buffer> = []
      const stream = String(response.headers["content-type"] ?? "").startsWith("text/event-stream")
      const firstFrameOnly = stream && request.operation.listener === "rest"
      const finish = (error?: string) =>
        done({
          status: response.statusCode ?? 0,
          headers: response.headers,
          text: Buffer.concat(chunks).toString("utf8"),
          ...(error === undefined ? {} : { error })
        })
      response.on("data", (chunk: Buffer) => {
        chunks.push(chunk)
        if (firstFrameOnly && Buffer.concat(chunks).includes("\n\n")) {
          finish()
          outgoing.destroy()
        }
      })
      response.on("end", () => finish())
      response.on("error", (error) => finish(firstFrameOnly ? undefined : error.message))
      response.on("aborted", () => finish(firstFrameOnly ? undefined : "answer cut"))
    })
    const timer = setTimeout(() => {
      done({ status: 0, headers: {}, text: "", error: `no answer in ${timeoutMs} ms` })
      outgoing.destroy()
    }, timeoutMs)
    outgoing.on("error", (error) => done({ status: 0, headers: {}, text: "", error: error.message }))
    if (body === undefined) outgoing.end()
    else if (chunked) {
      const half = Math.floor(body.length / 2)
      outgoing.write(body.subarray(0, half))
      outgoing.end(body.subarray(half))
    } else outgoing.end(body)
  })

/**
 * Requests no conforming client sends, written byte for byte: framing that
 * node:http refuses before any handler sees it. `path` is the route asked for.
 */
export const malformed: ReadonlyArray<{ readonly name: string; readonly text: (path: string) => string }> = [
  {
    name: "headers over the limit",
    text: (path) => `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`
  },
  {
    name: "request line over the limit",
    text: (path) => `GET ${path}?${"a".repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`
  },
  {
    name: "content-length not a number",
    text: (path) => `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}`
  },
  {
    name: "two content-lengths",
    text: (path) => `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`
  },
  {
    name: "content-length and chunked",
    text: (path) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`
  },
  {
    name: "bad chunk size",
    text: (path) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`
  },
  { name: "method with a symbol", text: (path) => `GE@T ${path} HTTP/1.1\r\nHost: x\r\n\r\n` },
  { name: "raw NUL in the path", text: (path) => `GET ${path}\u0000 HTTP/1.1\r\nHost: x\r\n\r\n` },
  { name: "space in the path", text: (path) => `GET ${path} x HTTP/1.1\r\nHost: x\r\n\r\n` },
  { name: "header without a colon", text: (path) => `GET ${path} HTTP/1.1\r\nHost: x\r\nBad header\r\n\r\n` },
  { name: "folded header", text: (path) => `GET ${path} HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n` },
  { name: "unknown HTTP version", text: (path) => `GET ${path} HTTP/9.9\r\nHost: x\r\n\r\n` },
  { name: "HTTP/2 preface", text: () => "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" },
  { name: "TLS hello", text: () => "\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u0001\u00fc\u0003\u0003" }
]

/** Writes `text` on a new connection and reads the first answer on it. */
export const sendRaw = (base: string, text: string, timeoutMs: number): Promise<Answer> =>
  new Promise((resolve) => {
    const url = new URL(base)
    const chunks: Array<Buffer> = []
    const socket = Net.connect(Number(url.port), url.hostname, () => socket.end(Buffer.from(text, "latin1")))
    const done = (error?: string) => {
      clearTimeout(timer)
      socket.destroy()
      const all = Buffer.concat(chunks).toString("utf8")
      const head = all.indexOf("\r\n\r\n")
      const status = Number(all.match(/^HTTP\/1\.1 (\d{3})/)?.[1] ?? 0)
      const headers: Http.IncomingHttpHeaders = {}
      for (const line of all.slice(0, Math.max(0, head)).split("\r\n").slice(1)) {
        const colon = line.indexOf(":")
        if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
      }
      const length = Number(headers["content-length"] ?? Number.NaN)
      const rest = head === -1 ? "" : all.slice(head + 4)
      resolve({
        status,
        headers,
        text: Number.isNaN(length) ? rest : Buffer.from(rest).subarray(0, length).toString("utf8"),
        ...(status === 0 ? { error: error ?? "the connection closed without an answer" } : {})
      })
    }
    const timer = setTimeout(() => done(`no answer in ${timeoutMs} ms`), timeoutMs)
    socket.on("data", (chunk: Buffer) => chunks.push(chunk))
    socket.on("close", () => done())
    socket.on("error", (error) => done(error.message))
  })

// ---------------------------------------------------------------------------
// Checking

/** The spec's error codes and their statuses. */
export const restCodes: Readonly<Record<string, number>> = {
  INVALID_REQUEST: 400,
  UNAUTHORIZED: 401,
  PAYMENT_REQUIRED: 402,
  SPEND_LIMIT: 402,
  INSUFFICIENT_CREDIT: 402,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  CONFLICT: 409,
  IDEMPOTENCY_CONFLICT: 409,
  IDEMPOTENCY_IN_PROGRESS: 409,
  APPLICATION_CONNECTED: 409,
  APPLICATION_NOT_CONNECTED: 409,
  REPLAY_GAP: 409,
  AGENT_KEYLESS: 409,
  GONE: 410,
  TOO_LARGE: 413,
  RATE_LIMITED: 429,
  INTERNAL: 500,
  UNAVAILABLE: 503
}

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const errorShape = (surface: Surface, status: number, body: unknown): string | undefined => {
  if (!isObject(body)) return "the error body is not a JSON object"
  switch (surface) {
    case "rest": {
      const keys = Object.keys(body).sort().join(",")
      if (keys !== "code,error" || typeof body.error !== "string" || typeof body.code !== "string") {
        return "the error body is not {error, code}"
      }
      return restCodes[body.code] === status ? undefined : `code ${body.code} with status ${status}`
    }
    case "chat": {
      const error = body.error
      return isObject(error) && typeof error.message === "string" && typeof error.type === "string" && "code" in error
        ? undefined
        : "the error body is not OpenAI's {error: {message, type, param, code}}"
    }
    case "messages": {
      const error = body.error
      return body.type === "error" && isObject(error) && typeof error.type === "string" &&
          typeof error.message === "string"
        ? undefined
        : 'the error body is not Anthropic\'s {type: "error", error: {type, message}}'
    }
  }
}

/** The surface whose error body an answer to this request must have (the gateway's messages routes answer Anthropic's). */
const surfaceOf = (request: Request): Surface =>
  request.operation.listener === "rest" ? "rest" : request.path.startsWith("/v1/messages") ? "messages" : "chat"

/** What is wrong with an answer, if anything. */
export const check = (request: Request, answer: Answer, secrets: ReadonlyArray<string>): ReadonlyArray<string> => {
  const problems: Array<string> = []
  if (answer.status === 0) {
    // A server may answer an oversized upload early and close before it was all sent.
    if (request.body?._tag !== "Oversized") problems.push(`no answer: ${answer.error}`)
  } else if (answer.status >= 500) problems.push(`status ${answer.status}`)
  else if (answer.status >= 400) {
    const shape = errorShape(surfaceOf(request), answer.status, parse(answer.text))
    if (shape !== undefined) problems.push(shape)
    if (answer.status === 429 && answer.headers["retry-after"] === undefined) problems.push("429 without Retry-After")
  } else if (answer.status < 300 && request.foreign && request.method !== "PUT") {
    problems.push(`another tenant's resource answered ${answer.status}`)
  }
  const headerText = Object.values(answer.headers).flat().join("\n")
  for (const secret of secrets) {
    if (answer.text.includes(secret) || headerText.includes(secret)) {
      problems.push(`a secret in the answer (${secret.slice(0, 8)}...)`)
    }
  }
  return problems
}

// ---------------------------------------------------------------------------
// Running and reporting

export interface Problem {
  readonly label: string
  readonly method: string
  readonly path: string
  readonly notes: ReadonlyArray<string>
  /** The start of the body sent. */
  readonly body: string
  readonly status: number
  readonly answer: string
  readonly problems: ReadonlyArray<string>
}

/** Requests sent and statuses seen, per operation. */
export class Report {
  readonly rows = new Map<string, { sent: number; statuses: Map<number, number> }>()

  add(label: string, status: number) {
    const row = this.rows.get(label) ?? { sent: 0, statuses: new Map<number, number>() }
    row.sent++
    row.statuses.set(status, (row.statuses.get(status) ?? 0) + 1)
    this.rows.set(label, row)
  }

  get sent() {
    return [...this.rows.values()].reduce((sum, row) => sum + row.sent, 0)
  }

  /** Every status seen, with its count. */
  statuses(): ReadonlyMap<number, number> {
    const all = new Map<number, number>()
    for (const row of this.rows.values()) {
      for (const [status, count] of row.statuses) all.set(status, (all.get(status) ?? 0) + count)
    }
    return new Map([...all].sort(([a], [b]) => a - b))
  }

  format(): string {
    const line = (statuses: ReadonlyMap<number, number>) =>
      [...statuses].sort(([a], [b]) => a - b).map(([status, count]) => `${status}×${count}`).join(" ")
    const width = Math.max(...[...this.rows.keys()].map((key) => key.length))
    return [
      ...[...this.rows].sort(([a], [b]) => a.localeCompare(b)).map(([key, row]) =>
        `${key.padEnd(width)}  ${String(row.sent).padStart(5)}  ${line(row.statuses)}`
      ),
      `${"all".padEnd(width)}  ${String(this.sent).padStart(5)}  ${line(this.statuses())}`
    ].join("\n")
  }
}

export interface RunOptions {
  readonly rest: string
  readonly gateway: string
  readonly operations: ReadonlyArray<Operation>
  readonly fill: Fill
  readonly secrets: ReadonlyArray<string>
  /** Requests in all, spread evenly over the operations. */
  readonly runs: number
  readonly seed: number
  readonly concurrency?: number
  readonly timeoutMs?: number
  /** Also sends each of `malformed` to both listeners (true by default). */
  readonly malformed?: boolean
}

export interface Result {
  readonly report: Report
  readonly problems: ReadonlyArray<Problem>
}

/**
 * The requests of a run, round-robin over the operations, generated in
 * small batches per operation so a long run never holds them all.
 */
function* generate(options: RunOptions): Generator<Request> {
  const arbitraries = options.operations.map((operation) => requests(operation, options.fill))
  const batch = 16
  const perOperation = Math.ceil(options.runs / options.operations.length)
  let produced = 0
  for (let round = 0; round * batch < perOperation; round++) {
    const samples = arbitraries.map((arbitrary, index) =>
      fc.sample(arbitrary, { seed: options.seed + round * 7919 + index * 104729, numRuns: batch })
    )
    for (let i = 0; i < batch; i++) {
      for (const sample of samples) {
        if (produced++ >= options.runs) return
        yield sample[i]!
      }
    }
  }
}

/** Sends `runs` generated requests, `concurrency` at a time, and checks every answer. */
export const run = (options: RunOptions): Effect.Effect<Result> =>
  Effect.promise(async () => {
    const report = new Report()
    const problems: Array<Problem> = []
    const agents = {
      rest: new Http.Agent({ keepAlive: true, maxSockets: options.concurrency ?? 4 }),
      gateway: new Http.Agent({ keepAlive: true, maxSockets: options.concurrency ?? 4 })
    }
    const record = (rowLabel: string, request: Request, answer: Answer) => {
      report.add(rowLabel, answer.status)
      const found = check(request, answer, options.secrets)
      if (found.length > 0) {
        problems.push({
          label: rowLabel,
          method: request.method,
          path: request.path.slice(0, 200),
          notes: request.notes,
          body: request.body?._tag === "Bytes" ? request.body.bytes.subarray(0, 2_000).toString("utf8") : "",
          status: answer.status,
          answer: answer.text.slice(0, 300),
          problems: found
        })
      }
    }
    const queue = generate(options)
    const worker = async () => {
      for (let next = queue.next(); !next.done; next = queue.next()) {
        const request = next.value
        const listener = request.operation.listener
        const answer = await send(
          listener === "rest" ? options.rest : options.gateway,
          request,
          agents[listener],
          options.timeoutMs ?? 30_000
        )
        record(
          request.method === request.operation.method ? label(request.operation) : "(other methods)",
          request,
          answer
        )
      }
    }
    try {
      await Promise.all(Array.from({ length: options.concurrency ?? 4 }, worker))
      if (options.malformed !== false) {
        for (
          const [listener, path] of [["rest", "/v1/tokens"], ["gateway", "/v1/chat/completions"], [
            "gateway",
            "/v1/messages"
          ]] as const
        ) {
          const operation = options.operations.find((operation) => operation.listener === listener)
          if (operation === undefined) continue
          for (const raw of malformed) {
            const text = raw.text(path)
            const request: Request = {
              operation,
              method: "RAW",
              // The path the error body follows; "*" when the bytes name none (TLS, HTTP/2).
              path: text.includes(path) ? path : "*",
              headers: {},
              body: undefined,
              foreign: false,
              notes: [`malformed: ${raw.name}`]
            }
            const answer = await sendRaw(
              listener === "rest" ? options.rest : options.gateway,
              text,
              options.timeoutMs ?? 30_000
            )
            record(`${listener === "gateway" ? "gateway " : ""}malformed HTTP`, request, answer)
          }
        }
      }
    } finally {
      agents.rest.destroy()
      agents.gateway.destroy()
    }
    return { report, problems }
  })
