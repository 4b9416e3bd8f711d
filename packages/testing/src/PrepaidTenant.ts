/**
 * A fault suite's workload billed from prepaid credit: a catalog model
 * (`acme/m1`) served by the fake upstream, run on the operator's platform
 * key, for a tenant made prepaid; and, once the faults are over, what the
 * ledger charged beside what the usage records say was used, so a suite can
 * check that no response was charged twice and none was left uncharged.
 */
import { Effect, type Scope } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import type * as FakeUpstream from "./FakeUpstream.ts"
import * as Http from "./Http.ts"
import * as TestDatabase from "./TestDatabase.ts"

/** The model the billed workload runs on; the upstream sees it as `m1`. */
export const model = "acme/m1"

/** Credit enough for any suite: what it spends is read from the ledger, not run out of. */
export const startingCredit = 1_000_000_000_000

/** The nodes' environment naming a catalog file with `model` at the upstream, priced per million tokens. */
export const catalogEnv = (
  upstream: FakeUpstream.FakeUpstream
): Effect.Effect<Record<string, string>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "prepaid-catalog-"))),
      (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
    )
    const file = Path.join(dir, "catalog.json")
    yield* Effect.promise(() =>
      Fs.writeFile(
        file,
        JSON.stringify({
          models: {
            [model]: {
              name: "Acme m1",
              api: "openai-completions",
              baseUrl: `${upstream.url}/v1`,
              contextWindow: 1_000_000,
              maxTokens: 4096,
              cost: { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 0 }
            }
          }
        })
      )
    )
    // Credit is bought through the local payment provider: settled at once, no money moving.
    return { MODEL_CATALOG_FILE: file, BILLING_PAYMENTS: "local" }
  })

/**
 * Sets the platform key of `model`'s provider and makes the tenant of `token` prepaid, with the starting
 * credit and a first purchase (so free credit's limits are lifted, as for a paying customer); its tenant id.
 */
export const make = (rest: string, operatorToken: string, token: string) =>
  Effect.gen(function*() {
    const api = Http.client(rest)
    const tenantId = (yield* api.get("/v1/me", { token })).body.tenant as string
    const key = yield* api.put("/v1/admin/platform-keys/acme", {
      token: operatorToken,
      json: { apiKey: "sk-platform-acme", verify: false }
    })
    const prepaid = yield* api.put(`/v1/admin/tenants/${tenantId}/billing`, {
      token: operatorToken,
      json: { billing: "prepaid", startingCredit }
    })
    const bought = yield* api.post("/v1/billing/checkout", { token, json: { amount: 5_000_000 } })
    if (key.status !== 200 || prepaid.status !== 200 || bought.body.status !== "paid") {
      return yield* Effect.die(
        new Error(`billing the tenant answered ${key.status}, ${prepaid.status}, ${bought.status} ${bought.text}`)
      )
    }
    return tenantId
  })

export interface Charges {
  /** Responses on the platform key, and their costs rounded to the micro-USD, from the usage records. */
  readonly responses: number
  readonly recorded: number
  /** What the ledger's usage entries say they charged for model cost, and for how many responses. */
  readonly charged: number
  readonly chargedResponses: number
  /** The ledger's sum, and the balance the trigger kept. */
  readonly ledger: number
  readonly balance: number
  /** What disagrees: a response charged twice or not at all, a balance that is not the ledger's sum. */
  readonly problems: ReadonlyArray<string>
}

/**
 * What the tenant's ledger charged beside what its usage records say it used: each record's cost rounded to
 * the micro-USD as the charge rounds it (`Ledger.modelCharge`; no credit multiplier off OpenRouter).
 */
export const charges = (databaseUrl: string, tenantId: string) =>
  Effect.gen(function*() {
    const costs = yield* TestDatabase.query(
      databaseUrl,
      `SELECT cost_usd FROM usage_records WHERE tenant_id = '${tenantId}' AND key_source = 'platform'`
    )
    const [row] = yield* TestDatabase.query(
      databaseUrl,
      `SELECT
        (SELECT coalesce(sum((metadata -> 'funding' ->> 'model')::bigint), 0) FROM ledger_entries
          WHERE tenant_id = '${tenantId}' AND kind = 'usage')::float8 AS charged,
        (SELECT coalesce(sum((metadata ->> 'responses')::bigint), 0) FROM ledger_entries
          WHERE tenant_id = '${tenantId}' AND kind = 'usage')::float8 AS charged_responses,
        (SELECT coalesce(sum(amount), 0) FROM ledger_entries WHERE tenant_id = '${tenantId}')::float8 AS ledger,
        (SELECT balance FROM tenant_billing WHERE tenant_id = '${tenantId}')::float8 AS balance`
    )
    const recorded = costs.reduce((sum, { cost_usd }) => sum + Math.round(cost_usd * 1_000_000), 0)
    const problems = [
      ...(costs.length === 0 ? ["no response was on the platform key"] : []),
      ...(row.charged === recorded ? [] : [`charged ${row.charged} micro-USD for responses that cost ${recorded}`]),
      ...(row.charged_responses === costs.length
        ? []
        : [`charged ${row.charged_responses} responses of ${costs.length}`]),
      ...(row.balance === row.ledger ? [] : [`a balance of ${row.balance} beside a ledger of ${row.ledger}`])
    ]
    return {
      responses: costs.length,
      recorded,
      charged: row.charged,
      chargedResponses: row.charged_responses,
      ledger: row.ledger,
      balance: row.balance,
      problems
    } satisfies Charges
  })
