/**
 * The billing package's tables: each billed tenant's standing (mode,
 * balance, its own cap and low-balance mark) and the ledger. Needs the
 * accounts package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

const ledger = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // A tenant with no row is not billed (`none`), as every tenant was before billing existed.
  yield* sql`
    CREATE TABLE tenant_billing (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      mode text NOT NULL CHECK (mode IN ('prepaid', 'none')),
      balance bigint NOT NULL DEFAULT 0,
      purchased bigint NOT NULL DEFAULT 0,
      free_credit boolean NOT NULL DEFAULT true,
      starting_credit bigint,
      monthly_cap bigint,
      low_balance bigint NOT NULL DEFAULT 1000000,
      low_notified boolean NOT NULL DEFAULT false,
      depleted_notified boolean NOT NULL DEFAULT false,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  // period: the UTC hour of a usage entry, the day of a storage entry; one entry per tenant and period, so a
  // charge repeated under the same period adds to it and a daily charge taken twice is refused by the key.
  // idempotency_key: an operator's or payment provider's key, so a retried grant or purchase is one entry.
  yield* sql`
    CREATE TABLE ledger_entries (
      id bigserial PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      kind text NOT NULL CHECK (kind IN ('grant', 'purchase', 'usage', 'storage', 'adjustment', 'refund')),
      amount bigint NOT NULL,
      metadata jsonb NOT NULL DEFAULT '{}',
      period text,
      idempotency_key text,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE UNIQUE INDEX ledger_entries_period ON ledger_entries (tenant_id, kind, period)
    WHERE period IS NOT NULL`
  yield* sql`CREATE UNIQUE INDEX ledger_entries_key ON ledger_entries (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL`
  yield* sql`CREATE INDEX ledger_entries_tenant ON ledger_entries (tenant_id, id DESC)`
  // The balance moves with the ledger, in the transaction that writes the entry, whoever writes it. Credit
  // coming back above a mark lets its billing event fire again when the balance next falls to it.
  yield* sql`
    CREATE FUNCTION ledger_balance() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      delta bigint := NEW.amount - CASE WHEN TG_OP = 'UPDATE' THEN OLD.amount ELSE 0 END;
    BEGIN
      INSERT INTO tenant_billing AS b (tenant_id, mode, balance, purchased, free_credit)
      VALUES (NEW.tenant_id, 'none', delta, CASE WHEN NEW.kind IN ('purchase', 'refund') THEN delta ELSE 0 END,
        NEW.kind <> 'purchase')
      ON CONFLICT (tenant_id) DO UPDATE SET
        balance = b.balance + excluded.balance,
        purchased = b.purchased + excluded.purchased,
        free_credit = b.free_credit AND excluded.free_credit,
        low_notified = b.low_notified AND b.balance + excluded.balance <= b.low_balance,
        depleted_notified = b.depleted_notified AND b.balance + excluded.balance <= 0;
      RETURN NULL;
    END $$`
  yield* sql`
    CREATE TRIGGER ledger_balance AFTER INSERT OR UPDATE OF amount ON ledger_entries
      FOR EACH ROW EXECUTE FUNCTION ledger_balance()`
})

/**
 * Buying credit: each purchase (a checkout, a card check, an automatic top-up) is a row before the provider
 * is called, so a retry finds it and the provider is asked with the same key; it is paid once, by the
 * statement that posts its credit. A card unlocks starting credit once across tenants (card_checks).
 */
const purchases = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE tenant_billing
      ADD COLUMN payment_customer text,
      ADD COLUMN payment_method text,
      ADD COLUMN card_check text CHECK (card_check IN ('granted', 'not_eligible')),
      ADD COLUMN topup_enabled boolean NOT NULL DEFAULT false,
      ADD COLUMN topup_threshold bigint,
      ADD COLUMN topup_amount bigint,
      ADD COLUMN topup_monthly_limit bigint,
      ADD COLUMN topup_paused text CHECK (topup_paused IN ('declined', 'action_required', 'no_card', 'reconcile')),
      ADD COLUMN topup_limit_told text`
  // status: open until the provider says; paid when its credit is posted; a top-up may end declined or
  // action_required (the buyer may still confirm it: then paid), or uncertain when the provider never said.
  yield* sql`
    CREATE TABLE purchases (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      kind text NOT NULL CHECK (kind IN ('purchase', 'card_check', 'topup')),
      request_id text,
      credit bigint NOT NULL,
      fee bigint NOT NULL,
      status text NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'paid', 'expired', 'declined', 'action_required', 'uncertain')),
      session_id text UNIQUE,
      session_url text,
      payment_id text,
      refunded bigint NOT NULL DEFAULT 0,
      attempts integer NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE UNIQUE INDEX purchases_request ON purchases (tenant_id, request_id) WHERE request_id IS NOT NULL`
  yield* sql`CREATE INDEX purchases_payment ON purchases (payment_id) WHERE payment_id IS NOT NULL`
  // One top-up at a time per tenant: another is not started while one may still charge the card.
  yield* sql`CREATE UNIQUE INDEX purchases_one_topup ON purchases (tenant_id)
    WHERE kind = 'topup' AND status IN ('open', 'uncertain')`
  yield* sql`
    CREATE TABLE card_checks (
      fingerprint text PRIMARY KEY,
      tenant_id text NOT NULL,
      granted boolean NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
})

/**
 * A usage entry's agent time in micro-USD before rounding. The hour is charged its sum rounded once, not a
 * sum of charges each rounded: a turn shorter than a micro-USD's worth (72 ms at 50,000 an hour) is charged.
 */
const exactAgentTime = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE ledger_entries ADD COLUMN agent_time numeric NOT NULL DEFAULT 0`
})

export const migrations = Migrations.make("billing_migrations", {
  "1_ledger": ledger,
  "2_purchases": purchases,
  "3_exact_agent_time": exactAgentTime
})
