/**
 * Small pieces every view uses: loading a resource, showing an error, a table,
 * a button that asks twice before it destroys, a secret shown once.
 */
import type { ComponentChildren, JSX } from "preact"
import { useCallback, useEffect, useRef, useState } from "preact/hooks"
import { ApiError } from "./Api.ts"

export interface Loaded<A> {
  readonly data: A | undefined
  readonly error: unknown
  readonly loading: boolean
  readonly reload: () => void
}

/** Loads `load()` when a dependency changes; a slower earlier load never overwrites a later one. */
export function useLoad<A>(load: () => Promise<A>, deps: ReadonlyArray<unknown>): Loaded<A> {
  const [state, setState] = useState<{ data: A | undefined; error: unknown; loading: boolean }>({
    data: undefined,
    error: undefined,
    loading: true
  })
  const generation = useRef(0)
  const run = useCallback(() => {
    const mine = ++generation.current
    setState((previous) => ({ ...previous, loading: true }))
    load().then(
      (data) => mine === generation.current && setState({ data, error: undefined, loading: false }),
      (error) => mine === generation.current && setState((previous) => ({ ...previous, error, loading: false }))
    )
  }, deps)
  useEffect(run, [run])
  return { ...state, reload: run }
}

/** Runs an action, keeping its error and whether it is under way. */
export const useAction = () => {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(undefined)
  async function run<A>(action: () => Promise<A>): Promise<A | undefined> {
    setBusy(true)
    setError(undefined)
    try {
      return await action()
    } catch (failure) {
      setError(failure)
      return undefined
    } finally {
      setBusy(false)
    }
  }
  return { busy, error, run }
}

export const messageOf = (error: unknown) =>
  error instanceof ApiError
    ? `${error.message}${error.code === undefined ? "" : ` (${error.code})`}`
    : error instanceof Error
    ? error.message
    : String(error)

export const ErrorNote = ({ error }: { readonly error: unknown }) =>
  error === undefined ? null : <p class="error" role="alert">{messageOf(error)}</p>

export const Loading = ({ what }: { readonly what: string }) => <p class="muted" aria-busy="true">Loading {what}…</p>

/** Unix seconds as the reader's local time. */
export const Time = ({ at }: { readonly at: number | null | undefined }) =>
  at === null || at === undefined
    ? <span class="muted">—</span>
    : <time dateTime={new Date(at * 1000).toISOString()}>{new Date(at * 1000).toLocaleString()}</time>

export const usd = (amount: number) =>
  amount.toLocaleString(undefined, { style: "currency", currency: "USD", maximumFractionDigits: amount < 1 ? 4 : 2 })

export const micros = (amount: number) => usd(amount / 1_000_000)

export const Page = (
  { actions, children, title }: {
    readonly title: string
    readonly actions?: ComponentChildren
    readonly children: ComponentChildren
  }
) => {
  useEffect(() => {
    document.title = `${title} · Agent Runtime`
  }, [title])
  return (
    <section class="page" aria-labelledby="page-title">
      <header class="page-header">
        <h1 id="page-title">{title}</h1>
        {actions}
      </header>
      {children}
    </section>
  )
}

export interface Column<A> {
  readonly label: string
  readonly render: (row: A) => ComponentChildren
  readonly class?: string
}

export function Table<A>(
  { columns, empty, label, rowKey, rows }: {
    readonly label: string
    readonly columns: ReadonlyArray<Column<A>>
    readonly rows: ReadonlyArray<A>
    readonly rowKey: (row: A) => string
    readonly empty: string
  }
) {
  return rows.length === 0 ? <p class="muted">{empty}</p> : (
    <div class="table-scroll">
      <table aria-label={label}>
        <thead>
          <tr>
            {columns.map((column) => <th scope="col" class={column.class}>{column.label}</th>)}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={rowKey(row)}>
              {columns.map((column) => <td class={column.class} data-label={column.label}>{column.render(row)}</td>)}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  )
}

/** A destructive button: the first press asks, the second does it. */
export const ConfirmButton = (
  { children, confirm, onConfirm }: {
    readonly children: ComponentChildren
    readonly confirm: string
    readonly onConfirm: () => void
  }
) => {
  const [asking, setAsking] = useState(false)
  useEffect(() => {
    if (!asking) return
    const timer = setTimeout(() => setAsking(false), 5000)
    return () => clearTimeout(timer)
  }, [asking])
  return asking
    ? (
      <button
        type="button"
        class="danger"
        onClick={() => {
          setAsking(false)
          onConfirm()
        }}
      >
        {confirm}
      </button>
    )
    : <button type="button" class="secondary" onClick={() => setAsking(true)}>{children}</button>
}

/** A secret the service shows once: with a copy button and a reminder. */
export const ShownOnce = ({ label, secret }: { readonly label: string; readonly secret: string }) => {
  const [copied, setCopied] = useState(false)
  return (
    <div class="shown-once" role="status">
      <p>
        <strong>{label}</strong> It is shown only now: copy it somewhere safe.
      </p>
      <div class="secret-row">
        <code class="secret" data-testid="secret">{secret}</code>
        <button
          type="button"
          class="secondary"
          onClick={() => navigator.clipboard?.writeText(secret).then(() => setCopied(true), () => setCopied(false))}
        >
          {copied ? "Copied" : "Copy"}
        </button>
      </div>
    </div>
  )
}

/** A labelled field. */
export const Field = (
  { children, hint, label }: { readonly label: string; readonly hint?: string; readonly children: JSX.Element }
) => (
  <label class="field">
    <span class="field-label">{label}</span>
    {children}
    {hint === undefined ? null : <span class="hint">{hint}</span>}
  </label>
)

/** The value of a named control of a submitted form. */
export const formValue = (event: JSX.TargetedSubmitEvent<HTMLFormElement>, name: string) => {
  const value = new FormData(event.currentTarget).get(name)
  return typeof value === "string" ? value.trim() : ""
}

export const pretty = (value: unknown) => {
  if (typeof value === "string") return value
  try {
    return JSON.stringify(value, null, 2) ?? ""
  } catch {
    return String(value)
  }
}
