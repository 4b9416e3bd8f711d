/**
 * `JSON.parse` for text the guest wrote. `JSON.parse` itself never sets a
 * prototype, but the objects it returns reach host code that may merge them
 * into others (`Object.assign`, deep merges), where an own `__proto__` key, or
 * `constructor.prototype`, writes to `Object.prototype`. Those keys are dropped.
 */
export const parse = (text: string): unknown =>
  JSON.parse(text, (key, value: unknown) => {
    if (key === "__proto__") return undefined
    if (key === "constructor" && typeof value === "object" && value !== null && Object.hasOwn(value, "prototype")) {
      return undefined
    }
    return value
  })
