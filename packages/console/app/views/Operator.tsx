/**
 * The operator's views: runners with their shards and load (and draining
 * one), tenants (making one, a one-time sign-in link for it), and the
 * platform's provider keys. The operator token is asked for here and kept in
 * this tab only; the operator's routes take no cookie, so no other site can
 * make a signed-in browser call them.
 */
import { useEffect, useState } from "preact/hooks"
import { api, ApiError, operatorToken, path, type RunnerList, type TenantCreated, type TenantInfo } from "../Api.ts"
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

const TokenForm = ({ onSet }: { readonly onSet: () => void }) => {
  const action = useAction()
  return (
    <form
      class="card form"
      aria-label="Operator sign-in"
      onSubmit={async (event) => {
        event.preventDefault()
        const token = formValue(event, "token")
        operatorToken.set(token)
        const checked = await action.run(() => api<RunnerList>("/v1/admin/runners", { operator: true }))
        if (checked === undefined) operatorToken.clear()
        else onSet()
      }}
    >
      <p>The operator's views need the operator token. It stays in this tab and is forgotten when the tab closes.</p>
      <Field label="Operator token">
        <input name="token" type="password" required autoComplete="off" />
      </Field>
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy}>Use token</button>
    </form>
  )
}

/** How often the runners' figures are read again while shown. */
const runnersEveryMs = 3000

const Runners = () => {
  const runners = useLoad(() => api<RunnerList>("/v1/admin/runners", { operator: true }), [])
  const action = useAction()
  useEffect(() => {
    const timer = setInterval(runners.reload, runnersEveryMs)
    return () => clearInterval(timer)
  }, [runners.reload])
  return (
    <section aria-labelledby="runners-title">
      <header class="section-header">
        <h2 id="runners-title">Runners</h2>
        <button type="button" class="secondary" onClick={runners.reload}>Refresh</button>
      </header>
      <ErrorNote error={action.error ?? runners.error} />
      {runners.data === undefined ? <Loading what="runners" /> : (
        <>
          <p class="muted">
            {runners.data.healthy} of {runners.data.data.length} runners in the ring, {runners.data.shards}{" "}
            shards; a silent runner keeps its shards {runners.data.leaseSeconds} s. Read every few seconds.
          </p>
          <Table
            label="Runners"
            rows={runners.data.data}
            rowKey={(runner) => runner.address}
            empty="No runners."
            columns={[
              { label: "Address", render: (runner) => <span class="mono small">{runner.address}</span> },
              {
                label: "State",
                render: (runner) => (
                  <span class={`badge badge-${runner.state}`} data-testid={`runner-state-${runner.address}`}>
                    {runner.state}
                  </span>
                )
              },
              { label: "Shards", class: "number", render: (runner) => runner.shards },
              { label: "Agents", class: "number", render: (runner) => runner.agents },
              { label: "Turns running", class: "number", render: (runner) => runner.turnsRunning },
              { label: "Queued", class: "number", render: (runner) => runner.mailboxDepth },
              { label: "Database", render: (runner) => runner.database },
              { label: "Heartbeat", render: (runner) => <Time at={runner.lastHeartbeat} /> },
              {
                label: "",
                class: "row-actions",
                render: (runner) =>
                  runner.state === "active"
                    ? (
                      <ConfirmButton
                        confirm={`Drain ${runner.address}`}
                        onConfirm={() =>
                          action.run(() =>
                            api(path`/v1/admin/runners/${runner.address}/drain`, { method: "POST", operator: true })
                          ).then(runners.reload)}
                      >
                        Drain
                      </ConfirmButton>
                    )
                    : null
              }
            ]}
          />
        </>
      )}
    </section>
  )
}

const Tenants = () => {
  const tenants = useLoad(() => api<Array<TenantInfo>>("/v1/admin/tenants", { operator: true }), [])
  const action = useAction()
  const [shown, setShown] = useState<{ label: string; secret: string } | undefined>(undefined)
  return (
    <section aria-labelledby="tenants-title">
      <h2 id="tenants-title">Tenants</h2>
      <form
        class="card form inline"
        aria-label="New tenant"
        onSubmit={async (event) => {
          event.preventDefault()
          const form = event.currentTarget
          const name = formValue(event, "name")
          const login = formValue(event, "login")
          const made = await action.run(() =>
            api<TenantCreated>("/v1/admin/tenants", {
              method: "POST",
              operator: true,
              body: { name, ...(login === "" ? {} : { login }) }
            })
          )
          if (made !== undefined) {
            setShown({ label: `The first API key of ${made.name}.`, secret: made.token })
            form.reset()
            tenants.reload()
          }
        }}
      >
        <Field label="Name">
          <input name="name" required maxLength={200} autoComplete="off" />
        </Field>
        <Field label="Login" hint="The email or GitHub login its person signs in with.">
          <input name="login" maxLength={320} autoComplete="off" />
        </Field>
        <button type="submit" disabled={action.busy}>Create tenant</button>
      </form>
      {shown === undefined ? null : <ShownOnce label={shown.label} secret={shown.secret} />}
      <ErrorNote error={action.error ?? tenants.error} />
      {tenants.data === undefined ? <Loading what="tenants" /> : (
        <Table
          label="Tenants"
          rows={tenants.data}
          rowKey={(tenant) => tenant.id}
          empty="No tenants."
          columns={[
            { label: "Name", render: (tenant) => tenant.name },
            { label: "Id", render: (tenant) => <span class="mono small">{tenant.id}</span> },
            { label: "Login", render: (tenant) => tenant.login ?? <span class="muted">none</span> },
            { label: "Created", render: (tenant) => <Time at={tenant.createdAt} /> },
            {
              label: "",
              class: "row-actions",
              render: (tenant) => (
                <button
                  type="button"
                  class="secondary"
                  onClick={async () => {
                    const link = await action.run(() =>
                      api<{ url: string }>("/v1/admin/sign-in-links", {
                        method: "POST",
                        operator: true,
                        body: { tenant: tenant.id }
                      })
                    )
                    if (link !== undefined) {
                      setShown({ label: `A sign-in link for ${tenant.name}, good for 15 minutes.`, secret: link.url })
                    }
                  }}
                >
                  Sign-in link
                </button>
              )
            }
          ]}
        />
      )}
    </section>
  )
}

const PlatformKeys = () => {
  const action = useAction()
  const [done, setDone] = useState<string | undefined>(undefined)
  return (
    <section aria-labelledby="platform-keys-title">
      <h2 id="platform-keys-title">Platform keys</h2>
      <p class="muted">
        Provider keys the service pays for, used for tenants with no key of their own. Keys are never shown again.
      </p>
      <form
        class="card form inline"
        aria-label="Platform key"
        onSubmit={async (event) => {
          event.preventDefault()
          const form = event.currentTarget
          const provider = formValue(event, "provider")
          const apiKey = formValue(event, "apiKey")
          const remove = (event.submitter as HTMLButtonElement | null)?.value === "remove"
          const sent = await action.run(() =>
            api(path`/v1/admin/platform-keys/${provider}`, {
              method: remove ? "DELETE" : "PUT",
              operator: true,
              ...(remove ? {} : { body: { apiKey } })
            })
          )
          if (sent !== undefined) {
            setDone(remove ? `The ${provider} key is removed.` : `The ${provider} key is set.`)
            form.reset()
          }
        }}
      >
        <Field label="Provider">
          <input name="provider" required autoComplete="off" placeholder="anthropic" />
        </Field>
        <Field label="API key">
          <input name="apiKey" type="password" autoComplete="off" />
        </Field>
        <button type="submit" value="set" disabled={action.busy}>Set key</button>
        <button type="submit" value="remove" class="secondary" disabled={action.busy}>Remove key</button>
      </form>
      {done === undefined ? null : <p role="status">{done}</p>}
      <ErrorNote error={action.error} />
    </section>
  )
}

export const Operator = ({ onChange }: { readonly onChange: (signedIn: boolean) => void }) => {
  const [token, setToken] = useState(operatorToken.get() !== null)
  const check = useLoad(
    () =>
      token
        ? api<RunnerList>("/v1/admin/runners", { operator: true }).then(() => true).catch((error) => {
          if (error instanceof ApiError && error.status === 401) {
            operatorToken.clear()
            setToken(false)
            onChange(false)
            return false
          }
          throw error
        })
        : Promise.resolve(false),
    [token]
  )
  if (!token) {
    return (
      <Page title="Operator">
        <TokenForm
          onSet={() => {
            setToken(true)
            onChange(true)
          }}
        />
      </Page>
    )
  }
  return (
    <Page
      title="Operator"
      actions={
        <button
          type="button"
          class="secondary"
          onClick={() => {
            operatorToken.clear()
            setToken(false)
            onChange(false)
          }}
        >
          Forget the token
        </button>
      }
    >
      <ErrorNote error={check.error} />
      <Runners />
      <Tenants />
      <PlatformKeys />
    </Page>
  )
}
