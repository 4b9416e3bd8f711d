/**
 * Tool names as model providers take them, and the include/exclude filters
 * of a source.
 */
import type { Filter } from "../ToolSources.ts"

const maxLength = 64

/**
 * Gives each of `raws` a name without characters `disallowed` (a global
 * pattern) matches, at most 64 long: a name that has none stays as it is,
 * otherwise each run of them becomes one `_`; a name already taken gets a
 * numbered suffix. Answers the names in order.
 */
export const unique = (raws: ReadonlyArray<string>, disallowed: RegExp): Array<string> => {
  const taken = new Set<string>()
  return raws.map((raw) => {
    const replaced = raw.replace(disallowed, "_")
    const base = ((replaced === raw ? raw : replaced.replace(/^_+|_+$/g, "")) || "tool").slice(0, maxLength)
    let name = base
    for (let n = 2; taken.has(name); n++) name = `${base.slice(0, maxLength - `_${n}`.length)}_${n}`
    taken.add(name)
    return name
  })
}

/** Whether a tool known by any of `names` passes `filter`. */
export const admits = (filter: Filter | undefined, ...names: ReadonlyArray<string>): boolean =>
  (filter?.include === undefined || names.some((name) => filter.include!.includes(name))) &&
  (filter?.exclude === undefined || !names.some((name) => filter.exclude!.includes(name)))
