/**
 * Text PostgreSQL can keep. Its `text` refuses the NUL character and its
 * `jsonb` refuses `\u0000` and unpaired surrogate escapes (SQLSTATE 22P05,
 * 22021): a model, a tool or an application that says one would make every
 * write of the row fail, for ever. What comes from outside the service (a
 * model's response, a tool's result, an application's answer) is made
 * storable where it enters, so what a node holds in memory is what its
 * journal holds; the store's own JSON writes go through `stringify` as well,
 * so nothing that slipped past an entry point can wedge a write.
 *
 * Each NUL and each unpaired surrogate becomes U+FFFD, the replacement
 * character, in strings and in object keys. Clean values (nearly all) are
 * returned as they are, after one scan.
 */

/** The replacement character, U+FFFD. */
export const replacement = "\uFFFD"

// eslint-disable-next-line no-control-regex -- NUL is the character this module is about
const unstorable = /[\u0000\uD800-\uDFFF]/
const unpaired = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g

/** Whether `text` holds a character PostgreSQL cannot store (or a surrogate, paired or not: then look closer). */
const suspect = (text: string) => unstorable.test(text)

/** `text` with each NUL and unpaired surrogate replaced by U+FFFD; the same string when there is none. */
export const text = (value: string): string =>
  suspect(value) ? value.replaceAll("\u0000", replacement).replace(unpaired, replacement) : value

/** Whether `value` (a JSON-like value) holds only storable text, keys included. */
export const isStorable = (value: unknown): boolean => {
  if (typeof value === "string") return !suspect(value) || text(value) === value
  if (value === null || typeof value !== "object") return true
  if (Array.isArray(value)) return value.every(isStorable)
  for (const key in value) {
    if (!isStorable(key) || !isStorable((value as Record<string, unknown>)[key])) return false
  }
  return true
}

/**
 * `value` (a JSON-like value: plain objects, arrays, strings, numbers, booleans, null) with its text made
 * storable. The same value when it is already storable; otherwise a copy, the original left as it was.
 */
export const value = <A>(input: A): A => isStorable(input) ? input : clean(input) as A

const clean = (input: unknown): unknown => {
  if (typeof input === "string") return text(input)
  if (input === null || typeof input !== "object") return input
  if (Array.isArray(input)) return input.map(clean)
  // Values JSON writes by their own rule (a Date, a Buffer) are left to it.
  if (typeof (input as { toJSON?: unknown }).toJSON === "function") return input
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(input)) out[text(key)] = clean(inner)
  return out
}

/**
 * The JSON text of `input` for a `jsonb` parameter, storable. `JSON.stringify` writes a NUL as `\u0000` and
 * an unpaired surrogate as `\udXXX`; a paired one is written as itself. So JSON text without a `\u0000` or
 * `\ud` escape is storable as it is, and only then is the value walked.
 */
export const stringify = (input: unknown): string => {
  const json = JSON.stringify(input) ?? "null"
  return json.includes("\\u0000") || json.includes("\\ud") ? JSON.stringify(value(input)) : json
}
