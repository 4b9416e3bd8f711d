/**
 * A `pg` client that prepares its statements: each statement with
 * parameters is named by its text, so PostgreSQL parses it once per
 * connection and may keep a generic plan for it. Measured under a turn's
 * load, planning cost PostgreSQL more than running the statements did
 * (docs/benchmarks.md).
 */
import * as Crypto from "node:crypto"
import Pg from "pg"

/**
 * Statements kept prepared on one connection, at most: a text seen only past
 * it is planned each time again, so a statement whose text varies (a list of
 * n values) cannot fill a connection's memory.
 */
const maxPerConnection = 500

/** What PostgreSQL can prepare: no DDL, no LISTEN or transaction control. */
const preparable = /^\s*(?:SELECT|INSERT|UPDATE|DELETE|WITH)\b/i

/** Names by text, for all sessions: most statements run again and again, and a lookup costs less than a hash. */
const names = new Map<string, string>()
const maxNames = 2_000

const nameOf = (text: string) => {
  let name = names.get(text)
  if (name === undefined) {
    if (names.size >= maxNames) names.clear()
    name = `s_${Crypto.createHash("sha1").update(text).digest("base64url")}`
    names.set(text, name)
  }
  return name
}

export class PreparingClient extends Pg.Client {
  readonly #prepared = new Set<string>()

  constructor(config?: string | Pg.ClientConfig) {
    super(config)
    // A connection that breaks (the database restarting, a network cut) emits 'error'; with no listener at that
    // moment Node ends the process. Between the pool's and a transaction's own listeners there are such moments
    // (a client just released with its error, a checked-out client between statements), and a node crashed in
    // the database-fault suite. The error reaches whoever uses the client next, through its query; here it is
    // only kept from being fatal.
    this.on("error", () => {})
  }

  // pg's own overloads (text or config, values, callback): only (text, values, callback) is changed.
  override query(config: any, values?: any, callback?: any): any {
    if (
      typeof config === "string" && Array.isArray(values) && values.length > 0 && typeof callback === "function" &&
      preparable.test(config)
    ) {
      const name = nameOf(config)
      if (this.#prepared.has(name) || this.#prepared.size < maxPerConnection) {
        this.#prepared.add(name)
        // Made from the text, then named: a config object pg would first copy by its property descriptors, on
        // every statement (0.7% of a runner's busy samples under load).
        return super.query(Object.assign(new Pg.Query(config, values, callback), { name }))
      }
    }
    return super.query(config, values, callback)
  }
}
