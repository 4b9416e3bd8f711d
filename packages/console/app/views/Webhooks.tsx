/**
 * Webhook endpoints: add one (its signing secret shown once), and for each
 * its deliveries with every attempt (status, latency, error, next try), a
 * re-send button, a new secret, and removal.
 */
import type { Webhook } from "@agent-runtime/domain"
import { useLocation, useRoute } from "preact-iso"
import { useState } from "preact/hooks"
import {
  api,
  path,
  type WebhookAttempt,
  type WebhookDelivery,
  type WebhookEndpoint,
  type WebhookEndpointCreated
} from "../Api.ts"
import {
  ConfirmButton,
  ErrorNote,
  Field,
  formValue,
  Loading,
  Page,
  ShownOnce,
  Table,
  Time,
  useAction,
  useLoad
} from "../ui.tsx"

const eventTypes: ReadonlyArray<Webhook.WebhookEventType> = [
  "run.started",
  "run.completed",
  "run.failed",
  "input.requested",
  "input.resolved",
  "usage.recorded",
  "billing.balance.low",
  "billing.balance.depleted",
  "billing.topup.receipt",
  "billing.topup.declined",
  "billing.topup.action_required",
  "billing.topup.no_card",
  "billing.topup.limit",
  "billing.topup.reconcile"
]

export const Webhooks = () => {
  const endpoints = useLoad(() => api<Array<WebhookEndpoint>>("/v1/webhooks"), [])
  const action = useAction()
  const [created, setCreated] = useState<WebhookEndpointCreated | undefined>(undefined)
  return (
    <Page title="Webhooks">
      <form
        class="card form"
        aria-label="New webhook"
        onSubmit={async (event) => {
          event.preventDefault()
          const form = event.currentTarget
          const url = formValue(event, "url")
          const description = formValue(event, "description")
          const events = new FormData(form).getAll("events").map(String)
          const made = await action.run(() =>
            api<WebhookEndpointCreated>("/v1/webhooks", {
              method: "POST",
              body: { url, events, ...(description === "" ? {} : { description }) }
            })
          )
          if (made !== undefined) {
            setCreated(made)
            form.reset()
            endpoints.reload()
          }
        }}
      >
        <h2>Add an endpoint</h2>
        <Field label="URL" hint="https, reachable from the service.">
          <input name="url" type="url" required autoComplete="off" />
        </Field>
        <Field label="Description">
          <input name="description" maxLength={200} autoComplete="off" />
        </Field>
        <fieldset class="checks">
          <legend>Events</legend>
          {eventTypes.map((type) => (
            <label class="check">
              <input type="checkbox" name="events" value={type} checked={type.startsWith("run.")} />
              <span class="mono small">{type}</span>
            </label>
          ))}
        </fieldset>
        <button type="submit" disabled={action.busy}>Add endpoint</button>
      </form>
      {created === undefined ?
        null :
        <ShownOnce label={`The signing secret of ${created.url}.`} secret={created.secret} />}
      <ErrorNote error={action.error ?? endpoints.error} />
      {endpoints.data === undefined ? <Loading what="endpoints" /> : (
        <Table
          label="Endpoints"
          rows={endpoints.data}
          rowKey={(endpoint) => endpoint.id}
          empty="No endpoints."
          columns={[
            {
              label: "URL",
              render: (endpoint) => (
                <a href={`/console/webhooks/${encodeURIComponent(endpoint.id)}`}>
                  {endpoint.url}
                  {endpoint.description === undefined ? null : <span class="muted small">{endpoint.description}</span>}
                </a>
              )
            },
            { label: "Events", render: (endpoint) => <span class="small">{endpoint.events.join(", ")}</span> },
            { label: "Added", render: (endpoint) => <Time at={endpoint.createdAt} /> }
          ]}
        />
      )}
    </Page>
  )
}

const Attempts = ({ attempts }: { readonly attempts: ReadonlyArray<WebhookAttempt> }) => (
  <Table
    label="Attempts"
    rows={attempts}
    rowKey={(attempt) => `${attempt.eventId}:${attempt.attempt}:${attempt.at}`}
    empty="No attempts yet."
    columns={[
      { label: "At", render: (attempt) => <Time at={attempt.at} /> },
      { label: "Event", render: (attempt) => <span class="mono small">{attempt.type}</span> },
      { label: "Try", render: (attempt) => attempt.attempt },
      {
        label: "Outcome",
        render: (attempt) => <span class={`badge badge-${attempt.outcome}`}>{attempt.outcome}</span>
      },
      { label: "Status", render: (attempt) => attempt.status ?? <span class="muted">none</span> },
      { label: "Latency", render: (attempt) => `${attempt.latencyMs} ms` },
      { label: "Error", render: (attempt) => attempt.error ?? "" },
      { label: "Next try", render: (attempt) => <Time at={attempt.nextAt} /> }
    ]}
  />
)

export const WebhookView = () => {
  const { params } = useRoute()
  const id = params.id!
  const { route } = useLocation()
  const endpoint = useLoad(() => api<WebhookEndpoint>(path`/v1/webhooks/${id}`), [id])
  const deliveries = useLoad(() => api<Array<WebhookDelivery>>(path`/v1/webhooks/${id}/deliveries?limit=100`), [id])
  const attempts = useLoad(() => api<Array<WebhookAttempt>>(path`/v1/webhooks/${id}/attempts?limit=100`), [id])
  const action = useAction()
  const [secret, setSecret] = useState<string | undefined>(undefined)
  const refresh = () => {
    deliveries.reload()
    attempts.reload()
  }
  return (
    <Page
      title={endpoint.data?.url ?? "Webhook"}
      actions={
        <div class="actions">
          <button type="button" class="secondary" onClick={refresh}>Refresh</button>
          <ConfirmButton
            confirm="Replace the secret now"
            onConfirm={async () => {
              const made = await action.run(() =>
                api<{ secret: string }>(path`/v1/webhooks/${id}/secret`, { method: "POST", body: {} })
              )
              if (made !== undefined) setSecret(made.secret)
            }}
          >
            New secret
          </ConfirmButton>
          <ConfirmButton
            confirm="Remove for good"
            onConfirm={async () => {
              const removed = await action.run(() => api(path`/v1/webhooks/${id}`, { method: "DELETE" }))
              if (removed !== undefined) route("/console/webhooks")
            }}
          >
            Remove
          </ConfirmButton>
        </div>
      }
    >
      {secret === undefined ? null : <ShownOnce label="The new signing secret." secret={secret} />}
      <ErrorNote error={action.error ?? endpoint.error} />
      <section aria-labelledby="deliveries-title">
        <h2 id="deliveries-title">Deliveries</h2>
        {deliveries.data === undefined ? <Loading what="deliveries" /> : (
          <Table
            label="Deliveries"
            rows={deliveries.data}
            rowKey={(delivery) => delivery.eventId}
            empty="No events sent to this endpoint yet."
            columns={[
              { label: "Event", render: (delivery) => <span class="mono small">{delivery.type}</span> },
              { label: "Created", render: (delivery) => <Time at={delivery.created} /> },
              {
                label: "State",
                render: (delivery) => <span class={`badge badge-${delivery.state}`}>{delivery.state}</span>
              },
              { label: "Attempts", render: (delivery) => delivery.attempts },
              {
                label: "Last answer",
                render: (delivery) => delivery.lastError ?? delivery.lastStatus ?? <span class="muted">none</span>
              },
              { label: "Next try", render: (delivery) => <Time at={delivery.nextAt} /> },
              {
                label: "",
                class: "row-actions",
                render: (delivery) => (
                  <button
                    type="button"
                    class="secondary"
                    disabled={action.busy}
                    onClick={() =>
                      action.run(() =>
                        api(path`/v1/webhooks/${id}/deliveries/${delivery.eventId}/resend`, {
                          method: "POST",
                          body: {}
                        })
                      ).then(refresh)}
                  >
                    Resend
                  </button>
                )
              }
            ]}
          />
        )}
      </section>
      <section aria-labelledby="attempts-title">
        <h2 id="attempts-title">Attempts</h2>
        {attempts.data === undefined ? <Loading what="attempts" /> : <Attempts attempts={attempts.data} />}
      </section>
    </Page>
  )
}
