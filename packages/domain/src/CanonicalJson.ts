/**
 * One JSON encoding for values that are compared or digested rather than
 * sent: the same value always encodes to the same text, whatever order its
 * keys were written in. Request bodies are digested with it, so a request id
 * or Idempotency-Key reused with a body that differs anywhere (also deep
 * inside it) is told apart from a retry.
 *
 * It is `JSON.stringify` with the keys of every object sorted: arrays keep
 * their order, `toJSON` is honoured, and undefined, functions and symbols are
 * dropped from objects and written as null in arrays.
 */

/**
 * The canonical text of a value. A value JSON cannot write at all (undefined,
 * a function, a symbol) encodes as `null`, so every value has a text to
 * digest; a cycle throws, as it does for `JSON.stringify`.
 */
export const encode = (value: unknown): string => write(value, "", []) ?? "null"

/** Whether two values have the same canonical encoding. */
export const equals = (a: unknown, b: unknown): boolean => encode(a) === encode(b)

/** undefined for what JSON leaves out; `key` is what `toJSON` is called with, as JSON.stringify does. */
const write = (input: unknown, key: string, open: Array<object>): string | undefined => {
  const value = hasToJson(input) ? input.toJSON(key) : input
  if (value === null || typeof value !== "object" || isBoxed(value)) return JSON.stringify(value)
  if (open.includes(value)) throw new TypeError("CanonicalJson.encode: the value holds a cycle")
  open.push(value)
  try {
    if (Array.isArray(value)) {
      return `[${value.map((item, i) => write(item, String(i), open) ?? "null").join(",")}]`
    }
    const fields: Array<string> = []
    for (const name of Object.keys(value).sort()) {
      const text = write((value as Record<string, unknown>)[name], name, open)
      if (text !== undefined) fields.push(`${JSON.stringify(name)}:${text}`)
    }
    return `{${fields.join(",")}}`
  } finally {
    open.pop()
  }
}

/** new Number(1) and the like write as their primitive, as in JSON.stringify. */
const isBoxed = (value: object) => value instanceof Number || value instanceof String || value instanceof Boolean

const hasToJson = (value: unknown): value is { toJSON: (key: string) => unknown } =>
  typeof value === "object" && value !== null && typeof (value as { toJSON?: unknown }).toJSON === "function"
