/**
 * JSON Schema validation with a standard validator (Ajv): draft 2020-12 when
 * the schema says so in `$schema` (what zod and most current tools emit),
 * draft-07 otherwise. Compiled validators are kept by the schema's canonical
 * JSON, so a form or an output schema used again is not compiled again.
 */
import { CanonicalJson } from "@agent-runtime/domain"
import { Ajv, type ValidateFunction } from "ajv"
import { Ajv2020 } from "ajv/dist/2020.js"

const draft07 = new Ajv({ strict: false, allErrors: true })
const draft2020 = new Ajv2020({ strict: false, allErrors: true })
const compiled = new Map<string, ValidateFunction>()

const engineFor = (schema: Record<string, unknown>) =>
  typeof schema.$schema === "string" && schema.$schema.includes("2020-12") ? draft2020 : draft07

/** The schema as a validator; throws when it does not compile (see `problemOf`). */
export const validatorFor = (schema: Record<string, unknown>): ValidateFunction => {
  const key = CanonicalJson.encode(schema)
  let validate = compiled.get(key)
  if (validate === undefined) {
    validate = engineFor(schema).compile(schema)
    if (compiled.size >= 1024) compiled.delete(compiled.keys().next().value!)
    compiled.set(key, validate)
  }
  return validate
}

/** Why the schema cannot be used, if it cannot: what the validator said compiling it. */
export const problemOf = (schema: Record<string, unknown>): string | undefined => {
  try {
    validatorFor(schema)
    return undefined
  } catch (error) {
    return error instanceof Error ? error.message : String(error)
  }
}

/** Why `value` does not fit `validate`'s schema, naming it `name`; undefined when it fits. */
export const misfitOf = (validate: ValidateFunction, value: unknown, name: string): string | undefined =>
  validate(value) ? undefined : draft07.errorsText(validate.errors, { dataVar: name, separator: "; " })
