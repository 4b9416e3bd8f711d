/**
 * A JSON Schema written as a TypeScript type, for the model's prompt. Only
 * what reads well as a type is kept (types, properties and whether they are
 * required, items, enums, consts, unions, descriptions as comments); what
 * does not (`$ref`, formats, bounds) or lies deeper than `maxDepth` is `unknown`.
 */
const maxDepth = 6

const identifier = /^[A-Za-z_$][A-Za-z0-9_$]*$/

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const literal = (value: unknown): string => JSON.stringify(value) ?? "unknown"

/** `text` as a doc comment at `indent`, one line when it fits on one. */
export const comment = (text: string, indent: string): string => {
  const lines = text.replaceAll("*/", "*\\/").trim().split(/\r?\n/)
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`
  return `${indent}/**\n${lines.map((line) => `${indent} * ${line}`.trimEnd()).join("\n")}\n${indent} */\n`
}

const objectType = (schema: Record<string, unknown>, indent: string, depth: number): string => {
  const properties = isRecord(schema.properties) ? Object.entries(schema.properties) : []
  if (properties.length === 0) {
    const values = schema.additionalProperties
    return `Record<string, ${isRecord(values) ? typeText(values, indent, depth + 1) : "unknown"}>`
  }
  const required = new Set(Array.isArray(schema.required) ? schema.required : [])
  const inner = `${indent}  `
  const members = properties.map(([key, value]) => {
    const description = isRecord(value) && typeof value.description === "string"
      ? comment(value.description, inner)
      : ""
    const name = identifier.test(key) ? key : JSON.stringify(key)
    return `${description}${inner}${name}${required.has(key) ? "" : "?"}: ${typeText(value, inner, depth + 1)}`
  })
  return `{\n${members.join("\n")}\n${indent}}`
}

const ofType = (type: unknown, schema: Record<string, unknown>, indent: string, depth: number): string => {
  switch (type) {
    case "string":
    case "number":
    case "boolean":
    case "null":
      return type
    case "integer":
      return "number"
    case "array": {
      const items = schema.items
      if (Array.isArray(items)) return `[${items.map((item) => typeText(item, indent, depth + 1)).join(", ")}]`
      return `Array<${items === undefined ? "unknown" : typeText(items, indent, depth + 1)}>`
    }
    case "object":
      return objectType(schema, indent, depth)
    default:
      return "unknown"
  }
}

/** The type of values `schema` accepts, written for a line indented by `indent`. */
export const typeText = (schema: unknown, indent: string, depth = 0): string => {
  if (schema === false) return "never"
  if (!isRecord(schema) || depth > maxDepth) return "unknown"
  if ("const" in schema) return literal(schema.const)
  if (Array.isArray(schema.enum)) return schema.enum.length === 0 ? "never" : schema.enum.map(literal).join(" | ")
  const union = schema.anyOf ?? schema.oneOf
  if (Array.isArray(union) && union.length > 0) {
    return union.map((member) => typeText(member, indent, depth + 1)).join(" | ")
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length > 0) {
    return schema.allOf.map((member) => typeText(member, indent, depth + 1)).join(" & ")
  }
  const types = Array.isArray(schema.type)
    ? schema.type
    : schema.type !== undefined
    ? [schema.type]
    : schema.properties !== undefined
    ? ["object"]
    : schema.items !== undefined
    ? ["array"]
    : []
  if (types.length === 0) return "unknown"
  const members = types.map((type) => ofType(type, schema, indent, depth))
  if (schema.nullable === true && !members.includes("null")) members.push("null")
  return members.join(" | ")
}
