/**
 * The credit ledger of prepaid tenants. Every change of a balance is an
 * entry: grants, purchases and refunds, and charges. A charge is written by
 * the statement that records what it charges for (a model response's usage,
 * a turn's end), as one of its parts (`charging`), so a crash, a drain, a
 * moved turn or a retried request never charges twice and never loses a
 * charge. The balance is kept by a trigger on the ledger, in the same
 * transaction as the entry that changes it.
 *
 * Charges go to one `usage` entry per tenant and UTC hour (added to until the
 * hour ends); daily storage to one `storage` entry per day. A tenant without
 * a `tenant_billing` row, or with mode `none`, is never charged.
 */
import { ApiError, Billing, Common } from "@agent-runtime/domain"
import { PersistenceError } from "@agent-runtime/store"
import { SqlClient, type Statement } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { Payments } from "./Payments.ts"
import { Rates } from "./Rates.ts"

/**
 * What one statement charges one tenant: the parts in micro-USD, and what they measured. `agentTime` and
 * `activeMs` may be fractions: the hour's entry adds them up exactly and charges the sum rounded.
 */
export interface Charge {
  readonly tenantId: string
  readonly model?: number | undefined
  readonly agentTime?: number | undefined
  readonly webSearch?: number | undefined
  readonly webRender?: number | undefined
  readonly tokens?: number | undefined
  readonly responses?: number | undefined
  readonly activeMs?: number | undefined
}

/** Why a prepaid tenant's work is refused or stopped. */
export type Exhausted = "insufficient_credit" | "monthly_cap" | "free_limit"

/** How many entries GET /v1/billing shows as `recent`. */
const recentEntries = 20

/** How long a node trusts what it read of a tenant's mode before reading it again. */
const modeCacheMillis = 2_000

const maxCachedModes = 50_000

/** Key sources the operator pays for: the platform's keys, and keys it set for a tenant. */
export const operatorKeySources: ReadonlyArray<string> = ["platform", "admin"]

/**
 * Model cost a prepaid tenant pays: what a response cost on a key the operator pays for (not the tenant's
 * own, nor one of its key scopes), times the credit multiplier on OpenRouter; rounded to the micro-USD.
 */
export const modelCharge = (
  rates: Billing.Rates,
  usage: { readonly keySource: string; readonly provider: string; readonly costUsd: number }
) =>
  !operatorKeySources.includes(usage.keySource) || !(usage.costUsd > 0)
    ? 0
    : Math.round(
      usage.costUsd * 1_000_000 * (usage.provider === "openrouter" ? rates.openrouterCreditMultiplier : 1)
    )

/** A web search a prepaid tenant pays: the provider's rate per search, when a key the operator pays for answered. */
export const webSearchCharge = (
  rates: Billing.Rates,
  search: { readonly keySource: string; readonly provider: string }
) =>
  operatorKeySources.includes(search.keySource)
    ? rates.webSearch[search.provider as keyof Billing.WebSearchRates] ?? 0
    : 0

/**
 * Agent time a prepaid tenant pays: `activeMs` of a turn at the hourly rate, in micro-USD and not rounded
 * (`charging` rounds the hour's sum).
 */
export const agentTimeCharge = (rates: Billing.Rates, activeMs: number) =>
  Math.max(0, activeMs) * rates.agentHour / 3_600_000

const total = (charge: Charge) =>
  (charge.model ?? 0) + (charge.agentTime ?? 0) + (charge.webSearch ?? 0) + (charge.webRender ?? 0)

type Summed = { readonly [K in keyof Charge]-?: Exclude<Charge[K], undefined> }

/** The charges of one statement, one per tenant (an upsert may change a row once per statement). */
const perTenant = (charges: ReadonlyArray<Charge>): ReadonlyArray<Summed> => {
  const byTenant = new Map<string, Summed>()
  for (const charge of charges) {
    const sum = byTenant.get(charge.tenantId) ?? {
      tenantId: charge.tenantId,
      model: 0,
      agentTime: 0,
      webSearch: 0,
      webRender: 0,
      tokens: 0,
      responses: 0,
      activeMs: 0
    }
    byTenant.set(charge.tenantId, {
      tenantId: charge.tenantId,
      model: sum.model + (charge.model ?? 0),
      agentTime: sum.agentTime + (charge.agentTime ?? 0),
      webSearch: sum.webSearch + (charge.webSearch ?? 0),
      webRender: sum.webRender + (charge.webRender ?? 0),
      tokens: sum.tokens + (charge.tokens ?? 0),
      responses: sum.responses + (charge.responses ?? 0),
      activeMs: sum.activeMs + (charge.activeMs ?? 0)
    })
  }
  return [...byTenant.values()]
}

const sumOf = (field: string) =>
  `'${field}', coalesce((ledger_entries.metadata ->> '${field}')::numeric, 0) + (excluded.metadata ->> '${field}')::numeric`

const fundingSumOf = (field: string) =>
  `'${field}', coalesce((ledger_entries.metadata -> 'funding' ->> '${field}')::bigint, 0) + ` +
  `(excluded.metadata -> 'funding' ->> '${field}')::bigint`

/**
 * What the exact agent time `excluded` adds to an entry's rounded charge: the rounded sum after it less the
 * rounded sum before, so the entry's charge is always its exact sum rounded once.
 */
const agentTimeAdded = `round(ledger_entries.agent_time + excluded.agent_time) - round(ledger_entries.agent_time)`

/**
 * The statement charging prepaid tenants, to run as part of the statement that records what it charges for
 * (a WITH entry, or a journal write under its fence): it adds to each tenant's `usage` entry of this UTC
 * hour. Tenants that are not prepaid are left out by the statement itself. `when` conditions it on what
 * the enclosing statement knows (the fact charged for is new). Nothing when there is nothing to charge.
 */
export const charging = (
  sql: SqlClient.SqlClient,
  charges: ReadonlyArray<Charge>,
  when?: Statement.Fragment
): Statement.Statement<never> | undefined => {
  const rows = perTenant(charges).filter((charge) => total(charge) > 0 || charge.activeMs > 0)
  if (rows.length === 0) return undefined
  const values = rows.map((charge) =>
    sql`(${charge.tenantId}, ${
      charge.model + charge.webSearch + charge.webRender
    }::bigint, ${charge.model}::bigint, ${charge.agentTime}::numeric, ${charge.webSearch}::bigint,
      ${charge.webRender}::bigint, ${charge.tokens}::bigint, ${charge.responses}::bigint, ${charge.activeMs}::numeric)`
  )
  // Agent time is kept exact in `agent_time`; `amount` and `funding.agentTime` carry it rounded.
  return sql`
    INSERT INTO ledger_entries (tenant_id, kind, period, amount, agent_time, metadata, created_at)
    SELECT v.tenant_id, 'usage', to_char(date_trunc('hour', now() AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"'),
      -(v.amount + round(v.agent_time)), v.agent_time, jsonb_build_object(
        'hour', floor(extract(epoch from date_trunc('hour', now()))),
        'tokens', v.tokens, 'responses', v.responses, 'activeMs', round(v.active_ms, 3),
        'funding', jsonb_build_object('model', v.model, 'agentTime', round(v.agent_time), 'webSearch', v.web_search,
          'webRender', v.web_render)),
      date_trunc('hour', now())
    FROM (VALUES ${sql.csv(values)}) AS v (tenant_id, amount, model, agent_time, web_search, web_render, tokens,
      responses, active_ms)
    JOIN tenant_billing b ON b.tenant_id = v.tenant_id AND b.mode = 'prepaid'
    ${when === undefined ? sql`` : sql`WHERE ${when}`}
    ON CONFLICT (tenant_id, kind, period) WHERE period IS NOT NULL DO UPDATE SET
      amount = ledger_entries.amount + excluded.amount + round(excluded.agent_time) - (${sql.unsafe(agentTimeAdded)}),
      agent_time = ledger_entries.agent_time + excluded.agent_time,
      metadata = jsonb_build_object('hour', ledger_entries.metadata -> 'hour',
        ${sql.unsafe([sumOf("tokens"), sumOf("responses"), sumOf("activeMs")].join(", "))},
        'funding', jsonb_build_object(${
    sql.unsafe(["model", "webSearch", "webRender"].map(fundingSumOf).join(", "))
  }, 'agentTime', coalesce((ledger_entries.metadata -> 'funding' ->> 'agentTime')::bigint, 0) + ${
    sql.unsafe(agentTimeAdded)
  })),
      updated_at = now()`
}

/**
 * The statement charging prepaid tenants a day of storage: `bytes` is a query of (tenant_id, bytes) rows
 * (the files package's usage). One `storage` entry per tenant and UTC day, the first statement of the day
 * writes it and any other finds it there: every node may run it, and a day is charged once.
 */
export const storageCharging = (sql: SqlClient.SqlClient, rates: Billing.Rates, bytes: Statement.Fragment) =>
  sql`
    INSERT INTO ledger_entries (tenant_id, kind, period, amount, metadata)
    SELECT u.tenant_id, 'storage', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
      -round(u.bytes::numeric * ${rates.storageGbMonth} / 1e9 / extract(day from
        date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month' - interval '1 day'))::bigint,
      jsonb_build_object('day', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD'), 'bytes', u.bytes)
    FROM (${bytes}) AS u (tenant_id, bytes)
    JOIN tenant_billing b ON b.tenant_id = u.tenant_id AND b.mode = 'prepaid'
    WHERE u.bytes > 0
    ON CONFLICT (tenant_id, kind, period) WHERE period IS NOT NULL DO NOTHING`

/** Unix seconds of the start of the current UTC month: where month sums and usage reads begin. */
export const monthStart = () => {
  const now = new Date()
  return Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) / 1000
}

/**
 * A condition for another package's statement: the tenant (`tenantId`, an SQL expression) is not prepaid,
 * so its work needs no credit check (the fast accept path takes it; a prepaid one takes the checked path).
 */
export const unbilled = (sql: SqlClient.SqlClient, tenantId: Statement.Fragment) =>
  sql`NOT EXISTS (SELECT 1 FROM tenant_billing WHERE tenant_id = ${tenantId} AND mode = 'prepaid')`

export class Ledger extends Context.Tag("@agent-runtime/billing/Ledger")<Ledger, {
  /** The rates charged. */
  readonly rates: Billing.Rates
  /** The tenant's billing as GET /v1/billing shows it (mode `none` when the operator set nothing). */
  readonly summary: (tenantId: string) => Effect.Effect<Billing.Billing, PersistenceError.PersistenceError>
  /** The tenant's ledger, newest first. */
  readonly entries: (
    tenantId: string,
    params: Common.PageParams
  ) => Effect.Effect<Common.Page<Billing.LedgerEntry>, PersistenceError.PersistenceError>
  /** What the tenant sets of its own billing: its monthly cap and its low-balance mark. */
  readonly configure: (
    tenantId: string,
    input: Billing.BillingSettingsInput
  ) => Effect.Effect<Billing.Billing, PersistenceError.PersistenceError>
  /** The operator sets the tenant's mode; a first switch to prepaid grants the starting credit once. */
  readonly setMode: (
    tenantId: string,
    input: Billing.TenantBillingInput
  ) => Effect.Effect<Billing.Billing, PersistenceError.PersistenceError>
  /** An operator's grant, adjustment or refund; the same key and body is the same entry. */
  readonly post: (
    tenantId: string,
    input: Billing.LedgerEntryInput,
    idempotencyKey: string | undefined
  ) => Effect.Effect<
    Billing.LedgerEntry,
    ApiError.IdempotencyConflict | ApiError.InvalidRequest | PersistenceError.PersistenceError
  >
  /**
   * Whether this node read lately that the tenant is not prepaid: a hot path (the gateway's) then needs no
   * check at all. False when it does not know.
   */
  readonly knownUnbilled: (tenantId: string) => boolean
  /** Whether the tenant's prepaid credit or monthly cap stops new work; none for a tenant not prepaid. */
  readonly exhausted: (tenantId: string) => Effect.Effect<Option.Option<Exhausted>, PersistenceError.PersistenceError>
  /** Refuses new work of a prepaid tenant whose credit is spent (402 INSUFFICIENT_CREDIT) or cap reached. */
  readonly admit: (
    tenantId: string
  ) => Effect.Effect<
    void,
    ApiError.InsufficientCredit | ApiError.SpendLimit | ApiError.PaymentRequired | PersistenceError.PersistenceError
  >
}>() {}

interface StandingRow {
  readonly mode: Billing.BillingMode
  readonly balance: number
  readonly purchased: number
  readonly freeCredit: boolean
  readonly startingCredit: number | null
  readonly monthlyCap: number | null
  readonly lowBalance: number
  readonly cardCheck: "granted" | "not_eligible" | null
}

interface EntryRow {
  readonly id: number
  readonly kind: Billing.LedgerKind
  readonly amount: number
  readonly metadata: Record<string, unknown>
  readonly createdAt: number
}

const entryColumns = `id::float8 AS id, kind, amount::float8 AS amount, metadata,
  floor(extract(epoch from created_at))::float8 AS created_at`

const toEntry = (row: EntryRow) => new Billing.LedgerEntry(row, { disableValidation: true })

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rates = yield* Rates
  const payments = yield* Payments
  /** Starting credit a card check would unlock: offered while the tenant's starting credit is undecided. */
  const cardCheckOffer = payments.provider !== "none" && rates.cardCheckCredit > 0
    ? { amount: rates.cardCheckCredit }
    : undefined

  const standing = (tenantId: string) =>
    sql<StandingRow>`
      SELECT mode, balance::float8 AS balance, purchased::float8 AS purchased, free_credit,
        starting_credit::float8 AS starting_credit, monthly_cap::float8 AS monthly_cap,
        low_balance::float8 AS low_balance, card_check
      FROM tenant_billing WHERE tenant_id = ${tenantId}`.pipe(Effect.map((rows) => Option.fromNullable(rows[0])))

  /** What the entries since `since` (the month's start) add up to, per kind. */
  const month = (tenantId: string, since: number) =>
    sql<{ kind: Billing.LedgerKind; amount: number }>`
      SELECT kind, sum(amount)::float8 AS amount FROM ledger_entries
      WHERE tenant_id = ${tenantId} AND created_at >= to_timestamp(${since})
      GROUP BY kind`

  const summary = (tenantId: string) =>
    Effect.gen(function*() {
      const found = yield* standing(tenantId)
      const since = monthStart()
      const sums = yield* month(tenantId, since)
      const recent = yield* sql<EntryRow>`
        SELECT ${sql.unsafe(entryColumns)} FROM ledger_entries WHERE tenant_id = ${tenantId}
        ORDER BY id DESC LIMIT ${recentEntries}`
      const of = (kind: Billing.LedgerKind) => sums.find((row) => row.kind === kind)?.amount ?? 0
      const row = Option.getOrUndefined(found)
      const mode = row?.mode ?? "none"
      const startingCredit = mode !== "prepaid"
        ? new Billing.StartingCredit({ status: "not_applicable", amount: 0 })
        : (row?.startingCredit ?? 0) > 0
        ? new Billing.StartingCredit({ status: "granted", amount: row!.startingCredit! })
        : row?.cardCheck === "not_eligible"
        ? new Billing.StartingCredit({ status: "not_eligible", amount: 0 })
        : new Billing.StartingCredit({
          status: "not_granted",
          amount: 0,
          ...(cardCheckOffer === undefined ? {} : { cardCheck: cardCheckOffer })
        })
      return new Billing.Billing({
        billing: mode,
        balance: row?.balance ?? 0,
        purchased: row?.purchased ?? 0,
        freeCredit: row?.freeCredit ?? false,
        checkout: mode === "prepaid" && payments.provider !== "none",
        startingCredit,
        month: new Billing.BillingMonth({
          since,
          grant: of("grant"),
          purchase: of("purchase"),
          usage: of("usage"),
          storage: of("storage"),
          adjustment: of("adjustment"),
          refund: of("refund")
        }),
        recent: recent.map(toEntry),
        rates,
        monthlyCap: row?.monthlyCap ?? null,
        lowBalance: row?.lowBalance ?? 1_000_000
      })
    }).pipe(PersistenceError.PersistenceError.refail)

  const entries = (tenantId: string, params: Common.PageParams) =>
    Effect.gen(function*() {
      const after = params.after === undefined ? undefined : Number(params.after)
      const rows = yield* sql<EntryRow>`
        SELECT ${sql.unsafe(entryColumns)} FROM ledger_entries WHERE tenant_id = ${tenantId}
          ${after === undefined || !Number.isSafeInteger(after) ? sql`` : sql`AND id < ${after}`}
        ORDER BY id DESC LIMIT ${Common.pageQueryLimit(params)}`
      const size = params.limit ?? Common.maxPageSize
      const data = rows.slice(0, size).map(toEntry)
      return { data, next: rows.length > size ? String(data[data.length - 1]!.id) : null }
    }).pipe(PersistenceError.PersistenceError.refail)

  /** Modes read lately, so a tenant that is not prepaid costs no statement per request. */
  const modes = new Map<string, { readonly prepaid: boolean; readonly at: number }>()

  const knownUnbilled = (tenantId: string) => {
    const cached = modes.get(tenantId)
    return cached !== undefined && !cached.prepaid && Date.now() - cached.at < modeCacheMillis
  }

  const exhausted = (tenantId: string) =>
    Effect.gen(function*() {
      if (knownUnbilled(tenantId)) return Option.none<Exhausted>()
      const rows = yield* sql<
        { mode: string; balance: number; monthlyCap: number | null; monthSpent: number; hourSpent: number }
      >`
        SELECT b.mode, b.balance::float8 AS balance, b.monthly_cap::float8 AS monthly_cap,
          CASE WHEN b.monthly_cap IS NULL THEN 0 ELSE (SELECT coalesce(-sum(amount), 0)::float8 FROM ledger_entries
            WHERE tenant_id = b.tenant_id AND kind IN ('usage', 'storage')
              AND created_at >= to_timestamp(${monthStart()})) END AS month_spent,
          CASE WHEN NOT b.free_credit OR ${rates.freeHourlySpend} = 0 THEN 0 ELSE (SELECT coalesce(-sum(amount), 0)::float8
            FROM ledger_entries WHERE tenant_id = b.tenant_id AND kind = 'usage'
              AND period = to_char(date_trunc('hour', now() AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"')) END
            AS hour_spent
        FROM tenant_billing b WHERE b.tenant_id = ${tenantId}`
      const row = rows[0]
      const prepaid = row?.mode === "prepaid"
      // Bounded against a flood of tenants: dropped whole when full, as the gateway's key cache is.
      if (modes.size >= maxCachedModes) modes.clear()
      modes.set(tenantId, { prepaid, at: Date.now() })
      if (row === undefined || !prepaid) return Option.none<Exhausted>()
      if (row.balance <= 0) return Option.some<Exhausted>("insufficient_credit")
      if (row.monthlyCap !== null && row.monthSpent >= row.monthlyCap) return Option.some<Exhausted>("monthly_cap")
      if (rates.freeHourlySpend > 0 && row.hourSpent >= rates.freeHourlySpend) {
        return Option.some<Exhausted>("free_limit")
      }
      return Option.none<Exhausted>()
    }).pipe(PersistenceError.PersistenceError.refail)

  const admit = (tenantId: string) =>
    Effect.flatMap(
      exhausted(tenantId),
      Option.match({
        onNone: (): Effect.Effect<
          void,
          ApiError.InsufficientCredit | ApiError.SpendLimit | ApiError.PaymentRequired
        > => Effect.void,
        onSome: (why) =>
          why === "insufficient_credit"
            ? Effect.fail(
              new ApiError.InsufficientCredit({ error: "the tenant's prepaid credit is spent; buy credit to go on" })
            )
            : why === "monthly_cap"
            ? Effect.fail(new ApiError.SpendLimit({ error: "the tenant's monthly spending cap is reached" }))
            : Effect.fail(
              new ApiError.PaymentRequired({
                error: "the tenant reached this hour's limit for free credit; buying credit lifts it"
              })
            )
      })
    )

  const configure = (tenantId: string, input: Billing.BillingSettingsInput) =>
    Effect.zipRight(
      sql`
        INSERT INTO tenant_billing (tenant_id, mode, monthly_cap, low_balance)
        VALUES (${tenantId}, 'none', ${input.monthlyCap ?? null}, ${input.lowBalance ?? 1_000_000})
        ON CONFLICT (tenant_id) DO UPDATE SET
          monthly_cap = ${input.monthlyCap === undefined ? sql`tenant_billing.monthly_cap` : input.monthlyCap},
          low_balance = ${input.lowBalance === undefined ? sql`tenant_billing.low_balance` : input.lowBalance},
          updated_at = now()`.pipe(PersistenceError.PersistenceError.refail),
      summary(tenantId)
    )

  const setMode = (tenantId: string, input: Billing.TenantBillingInput) =>
    Effect.zipRight(
      sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* sql<{ startingCredit: number | null }>`
          INSERT INTO tenant_billing (tenant_id, mode) VALUES (${tenantId}, ${input.billing})
          ON CONFLICT (tenant_id) DO UPDATE SET mode = excluded.mode, updated_at = now()
          RETURNING starting_credit::float8 AS starting_credit`
        const grant = input.startingCredit ?? 0
        // The starting credit is granted once: the first time the tenant is made prepaid with one.
        if (input.billing === "prepaid" && grant > 0 && (row?.startingCredit ?? null) === null) {
          yield* sql`UPDATE tenant_billing SET starting_credit = ${grant} WHERE tenant_id = ${tenantId}`
          yield* sql`INSERT INTO ledger_entries (tenant_id, kind, amount, metadata, idempotency_key)
            VALUES (${tenantId}, 'grant', ${grant}, ${JSON.stringify({ note: "starting credit" })}::jsonb,
              'starting-credit') ON CONFLICT DO NOTHING`
        }
      })).pipe(PersistenceError.PersistenceError.refail),
      Effect.suspend(() => {
        modes.delete(tenantId)
        return summary(tenantId)
      })
    )

  const post = (tenantId: string, input: Billing.LedgerEntryInput, idempotencyKey: string | undefined) =>
    Effect.gen(function*() {
      if (input.kind !== "adjustment" && input.amount <= 0) {
        return yield* new ApiError.InvalidRequest({
          error: `invalid request: amount: a ${input.kind} is a positive amount of micro-USD`
        })
      }
      if (input.amount === 0) {
        return yield* new ApiError.InvalidRequest({
          error: "invalid request: amount: an adjustment of 0 changes nothing"
        })
      }
      const amount = input.kind === "refund" ? -input.amount : input.amount
      const metadata = { note: input.note, ...(input.kind === "refund" ? { refunded: input.amount } : {}) }
      const rows = yield* sql<EntryRow & { sameBody: boolean }>`
        WITH inserted AS (
          INSERT INTO ledger_entries (tenant_id, kind, amount, metadata, idempotency_key)
          VALUES (${tenantId}, ${input.kind}, ${amount}, ${JSON.stringify(metadata)}::jsonb, ${idempotencyKey ?? null})
          ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
          RETURNING ${sql.unsafe(entryColumns)}, true AS same_body)
        SELECT * FROM inserted
        UNION ALL
        SELECT ${sql.unsafe(entryColumns)}, kind = ${input.kind} AND amount = ${amount}
          AND metadata = ${JSON.stringify(metadata)}::jsonb AS same_body
        FROM ledger_entries WHERE tenant_id = ${tenantId} AND idempotency_key = ${idempotencyKey ?? null}
          AND NOT EXISTS (SELECT 1 FROM inserted)`.pipe(PersistenceError.PersistenceError.refail)
      const row = rows[0]!
      if (!row.sameBody) {
        return yield* new ApiError.IdempotencyConflict({
          error: `Idempotency-Key ${idempotencyKey} was used for another ledger entry`
        })
      }
      const { sameBody: _, ...entry } = row
      return toEntry(entry)
    })

  return Ledger.of({ rates, summary, entries, configure, setMode, post, knownUnbilled, exhausted, admit })
})

export const layer: Layer.Layer<Ledger, never, SqlClient.SqlClient | Rates | Payments> = Layer.effect(Ledger, make)
