/**
 * The guest side of a run, evaluated before the model's code: a function of
 * the two host functions, the tool bindings (JSON) and the code. It defines
 * `tools` and `console`, runs the code as the body of an async function and
 * resolves with the outcome as JSON text built by concatenation, so a guest
 * that patches `toJSON` or prototypes can garble its own result but never
 * make the envelope anything else than a string. Intrinsics it uses are
 * captured before the code runs. Only strings cross to the host.
 *
 * Envelope: `{"ok":true,"value":"<JSON of the value>"}` (no `value` when the
 * code returned nothing JSON can hold) or `{"ok":false,"name","message","stack"}`,
 * the stack holding the code's frames only, as `code:<line>:<column>`.
 */
export const source = String.raw`(function (hostCall, hostLog, bindings, code) {
  "use strict"
  const stringify = JSON.stringify
  const parse = JSON.parse
  const ErrorClass = Error
  const TypeErrorClass = TypeError
  const StringOf = String
  const defineProperty = Object.defineProperty
  const AsyncFunction = (async function () {}).constructor

  const show = (value) => {
    if (typeof value === "string") return value
    if (value instanceof ErrorClass) return StringOf(value.name) + ": " + StringOf(value.message)
    try {
      const text = stringify(value)
      if (typeof text === "string") return text
    } catch {}
    return StringOf(value)
  }
  const printer = (prefix) => (...values) => {
    let line = prefix
    for (let i = 0; i < values.length; i++) line += (i === 0 ? "" : " ") + show(values[i])
    hostLog(line)
  }
  globalThis.console = {
    log: printer(""),
    info: printer("[info] "),
    warn: printer("[warn] "),
    error: printer("[error] ")
  }

  const tools = Object.create(null)
  for (const binding of parse(bindings)) {
    defineProperty(tools, binding, {
      enumerable: true,
      value: async (args) => {
        const text = args === undefined ? "{}" : stringify(args)
        if (typeof text !== "string") throw new TypeErrorClass("tools." + binding + ": the arguments must be JSON")
        const output = await hostCall(binding, text)
        try {
          return parse(output)
        } catch {
          return output
        }
      }
    })
  }
  globalThis.tools = Object.freeze(tools)

  const quote = (value) => stringify(StringOf(value))
  // The code's frames only, numbered as the model wrote them: the Function constructor puts two lines above the body.
  const frames = (stack) =>
    stack.split("\n")
      .filter((line) => line.trim() !== "" && !line.includes("prelude.js") && !line.includes("AsyncFunction (native)"))
      .map((line) => line.replace(/<input>:(\d+)/, (_, n) => "code:" + (n - 2)))
      .join("\n")
  const failure = (error) => {
    let name = "Error"
    let message
    let stack
    try {
      if (error instanceof ErrorClass) {
        name = StringOf(error.name)
        message = StringOf(error.message)
        if (error.stack !== undefined) stack = frames(StringOf(error.stack))
        if (stack === "") stack = undefined
      } else {
        message = show(error)
      }
    } catch {
      message = "an exception that could not be described"
    }
    return '{"ok":false,"name":' + quote(name) + ',"message":' + quote(message) +
      (stack === undefined ? "" : ',"stack":' + quote(stack)) + "}"
  }

  return (async () => {
    let text
    try {
      text = stringify(await new AsyncFunction(code)())
    } catch (error) {
      return failure(error)
    }
    return text === undefined ? '{"ok":true}' : '{"ok":true,"value":' + quote(text) + "}"
  })()
})`
