/**
 * The webhooks package's tables: endpoints (and each tenant's usage
 * webhook), the outbox of events, each event's delivery to each endpoint,
 * and the attempts made. Needs the accounts package's `tenants`.
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The PostgreSQL channel told of new deliveries (payload: the tenant, as an empty one is not heard), so an
 * idle node sends at once instead of at its next poll.
 */
export const deliveriesChannel = "agent_runtime_webhooks"

const tables = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // kind: an `endpoint` of /v1/webhooks, or the tenant's one `usage` webhook. Secrets are sealed, bound to the
  // endpoint's id; the previous one signs beside the new until previous_until. lease_*: which node sends now.
  yield* sql`
    CREATE TABLE webhook_endpoints (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      kind text NOT NULL,
      url text NOT NULL,
      events text[] NOT NULL,
      description text,
      sealed_secret text NOT NULL,
      sealed_previous_secret text,
      previous_until timestamptz,
      created_at timestamptz NOT NULL DEFAULT now(),
      lease_owner text,
      lease_until timestamptz
    )`
  yield* sql`CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at)`
  yield* sql`CREATE UNIQUE INDEX webhook_endpoints_usage ON webhook_endpoints (tenant_id) WHERE kind = 'usage'`
  // The outbox: written in the transaction of the change it reports. kinds: which kinds of endpoint take it.
  yield* sql`
    CREATE TABLE webhook_events (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      type text NOT NULL,
      created double precision NOT NULL,
      data jsonb NOT NULL,
      kinds text[] NOT NULL
    )`
  yield* sql`
    CREATE TABLE webhook_deliveries (
      endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
      event_id text NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
      state text NOT NULL DEFAULT 'pending',
      attempts integer NOT NULL DEFAULT 0,
      first_at timestamptz NOT NULL DEFAULT now(),
      next_at timestamptz NOT NULL DEFAULT now(),
      last_status integer,
      last_error text,
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (endpoint_id, event_id)
    )`
  yield* sql`CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending'`
  yield* sql`CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id)`
  yield* sql`CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (endpoint_id, updated_at)`
  yield* sql`
    CREATE TABLE webhook_attempts (
      id bigserial PRIMARY KEY,
      endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
      event_id text NOT NULL,
      attempt integer NOT NULL,
      at timestamptz NOT NULL DEFAULT now(),
      status integer,
      latency_ms integer NOT NULL,
      error text,
      outcome text NOT NULL,
      next_at timestamptz
    )`
  yield* sql`CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, id)`
  // An event fans out to the endpoints subscribed when it is written, inside the writer's statement, so the
  // change, its event and its deliveries commit together; the notification goes out at commit.
  yield* sql.unsafe(`
    CREATE FUNCTION webhook_fan_out() RETURNS trigger LANGUAGE plpgsql AS $fan$
    BEGIN
      INSERT INTO webhook_deliveries (endpoint_id, event_id)
      SELECT w.id, NEW.id FROM webhook_endpoints w
      WHERE w.tenant_id = NEW.tenant_id AND NEW.type = ANY (w.events) AND w.kind = ANY (NEW.kinds);
      PERFORM pg_notify('${deliveriesChannel}', NEW.tenant_id);
      RETURN NULL;
    END
    $fan$`)
  yield* sql`
    CREATE TRIGGER webhook_events_fan_out AFTER INSERT ON webhook_events
    FOR EACH ROW EXECUTE FUNCTION webhook_fan_out()`
})

export const migrations = Migrations.make("webhooks_migrations", {
  "1_webhooks": tables
})
