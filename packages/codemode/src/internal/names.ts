/**
 * The name each tool has as a property of the guest's `tools` object: what
 * the model writes after `tools.`. A character other than a letter, digit, `_`
 * or `$` becomes `_`, a leading digit gets a `_` in front, an empty name is
 * `_`, and a name already taken gets `_2`, `_3`, ... in the order given.
 * Reserved words stay: `tools.delete(...)` is valid JavaScript.
 */
export const bindings = (names: ReadonlyArray<string>): ReadonlyArray<string> => {
  const taken = new Set<string>()
  return names.map((name) => {
    const replaced = name.replace(/[^A-Za-z0-9_$]/g, "_")
    const base = replaced === "" ? "_" : /^[0-9]/.test(replaced) ? `_${replaced}` : replaced
    let binding = base
    for (let n = 2; taken.has(binding); n++) binding = `${base}_${n}`
    taken.add(binding)
    return binding
  })
}
