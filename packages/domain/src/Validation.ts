/**
 * Checks shared by the schemas of several modules: sizes of JSON values in
 * bytes, URLs, JSON objects. Sizes in the spec's "KB"/"MB" are read as
 * 1024-byte multiples, the same as its "KiB"/"MiB".
 */
import { Schema } from "effect"

export const KiB = 1024
export const MiB = 1024 * 1024

/** Bytes of a string encoded as UTF-8, counted without encoding it. */
export const utf8Length = (text: string): number => {
  let bytes = 0
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code < 0x80) bytes += 1
    else if (code < 0x800) bytes += 2
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4
        i++
      } else bytes += 3
    } else bytes += 3
  }
  return bytes
}

/** Bytes of a value written as JSON (UTF-8); 0 for values JSON cannot write. */
export const jsonBytes = (value: unknown): number => {
  const json = JSON.stringify(value)
  return json === undefined ? 0 : utf8Length(json)
}

/** Bytes a base64 string decodes to (padding and whitespace ignored). */
export const base64DecodedBytes = (data: string): number => {
  const chars = data.replace(/[\s=]/g, "").length
  return Math.floor((chars * 3) / 4)
}

/** A JSON object with values of any type. */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type JsonObject = typeof JsonObject.Type

/**
 * An absolute `http:` or `https:` URL. Whether it may be used (public and
 * https unless ALLOW_PRIVATE_URLS) is the egress check's to say, at save and
 * at every call.
 */
export const HttpUrl = Schema.String.pipe(
  Schema.filter((url) => {
    if (!URL.canParse(url)) return "must be an absolute URL"
    const { protocol } = new URL(url)
    return protocol === "https:" || protocol === "http:" || "must be an http or https URL"
  })
).annotations({ description: "absolute http(s) URL", jsonSchema: { type: "string", format: "uri" } })
export type HttpUrl = typeof HttpUrl.Type

/**
 * The deepest nesting of arrays and objects a request body may have (the
 * limit serde_json applies by default). Writing, formatting and storing a
 * value recurse through it, so a body nested ten thousand deep would end a
 * request with a stack overflow instead of an answer.
 */
export const maxJsonDepth = 128

/** Where a request's JSON cannot be taken, and why. */
export interface JsonInputProblem {
  /** The field as the API's errors name one (`a.b.0`), or `value` for the whole body. */
  readonly path: string
  readonly message: string
}

/** Why PostgreSQL could not store a string, if it could not. */
const unstorable = (text: string): string | undefined =>
  text.includes("\u0000")
    ? "must not contain NUL (\\u0000)"
    // A lone UTF-16 surrogate (JSON's "\ud800") has no UTF-8 form: jsonb refuses it and text gets U+FFFD.
    : (text as string & { isWellFormed(): boolean }).isWellFormed()
    ? undefined
    : "must be valid Unicode (a lone surrogate such as \\ud800 is not)"

interface Visit {
  readonly value: unknown
  readonly key: string | number | undefined
  readonly parent: Visit | undefined
  readonly depth: number
}

/**
 * The field as the API's errors name one (`a.b.0`); a key PostgreSQL cannot
 * store is quoted so it shows, and a path deeper than ten is cut short.
 */
const fieldName = (visit: Visit) => {
  const path: Array<string | number> = []
  for (let at: Visit | undefined = visit; at?.key !== undefined; at = at.parent) path.unshift(at.key)
  const shown = path.slice(0, 10).map((key) =>
    typeof key === "string" && unstorable(key) !== undefined ? JSON.stringify(key) : key
  )
  return path.length === 0 ? "value" : `${shown.join(".")}${path.length > 10 ? ".…" : ""}`
}

/**
 * The first place a decoded JSON body cannot be taken: a string or a key
 * PostgreSQL cannot store (a NUL character, a lone surrogate; such a value
 * could be neither stored nor looked up, and a journal write failing on one
 * would take its agent down), a numeral out of a double's range, or nesting
 * deeper than `maxJsonDepth`.
 * Iterative, and paths are built only for the answer, so the check
 * survives any depth and costs little on large bodies.
 */
export const jsonInputProblem = (value: unknown): JsonInputProblem | undefined => {
  const stack: Array<Visit> = [{ value, key: undefined, parent: undefined, depth: 0 }]
  while (stack.length > 0) {
    const visit = stack.pop()!
    const { depth, value } = visit
    if (typeof value === "string") {
      const message = unstorable(value)
      if (message !== undefined) return { path: fieldName(visit), message }
    } else if (typeof value === "number") {
      // JSON has no Infinity: it is what a numeral too large for a double (1e400) parses to, and it would be
      // written back as null, which later reads refuse.
      if (!Number.isFinite(value)) return { path: fieldName(visit), message: "number out of range" }
    } else if (value !== null && typeof value === "object") {
      if (depth >= maxJsonDepth) return { path: fieldName(visit), message: `nested deeper than ${maxJsonDepth} levels` }
      if (Array.isArray(value)) {
        for (let i = value.length - 1; i >= 0; i--) {
          stack.push({ value: value[i], key: i, parent: visit, depth: depth + 1 })
        }
      } else {
        const keys = Object.keys(value)
        for (let i = keys.length - 1; i >= 0; i--) {
          const key = keys[i]!
          const child: Visit = { value: (value as Record<string, unknown>)[key], key, parent: visit, depth: depth + 1 }
          const message = unstorable(key)
          if (message !== undefined) return { path: fieldName(child), message: `key ${message}` }
          stack.push(child)
        }
      }
    }
  }
  return undefined
}
