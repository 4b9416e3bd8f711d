/**
 * Usage: spend and tokens by day and by model (a uPlot chart, drawn on a
 * canvas, with the same figures in a table for screen readers), and, where
 * billing is on, the balance and the ledger.
 */
import { useEffect, useRef, useState } from "preact/hooks"
import uPlot from "uplot"
import { api, ApiError, type BillingInfo, type LedgerEntry, type Usage } from "../Api.ts"
import { ErrorNote, Loading, micros, Page, Table, Time, usd, useLoad } from "../ui.tsx"

const palette = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"]

const dayStart = (day: string) => Date.parse(`${day}T00:00:00Z`) / 1000

interface ByDay {
  readonly days: Array<number>
  readonly models: Array<string>
  /** cost[model][day] */
  readonly cost: Array<Array<number>>
}

/** Every day of the range, even those without use, and the models seen. */
const byDay = (usage: Usage): ByDay => {
  const days: Array<number> = []
  for (let day = Math.floor(usage.since / 86400) * 86400; day < usage.until; day += 86400) days.push(day)
  const models = [...new Set(usage.days.map((row) => row.model))].sort()
  const cost = models.map(() => days.map(() => 0))
  for (const row of usage.days) {
    const m = models.indexOf(row.model)
    const d = days.indexOf(dayStart(row.day))
    if (m >= 0 && d >= 0) cost[m]![d]! += row.cost
  }
  return { days, models, cost }
}

const Chart = ({ data }: { readonly data: ByDay }) => {
  const box = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const element = box.current
    if (element === null) return
    const width = () => Math.max(280, element.clientWidth)
    // Stacked bars: each model's series is the sum of those drawn below it.
    const stacked = data.cost.map((_, m) =>
      data.days.map((_, d) => data.cost.slice(0, m + 1).reduce((sum, series) => sum + series[d]!, 0))
    )
    const plot = new uPlot(
      {
        width: width(),
        height: 260,
        scales: { x: { time: true } },
        axes: [{}, { values: (_, ticks) => ticks.map((tick) => usd(tick)), size: 70 }],
        // The x series first; the models last to first, so the tallest (all of them) is drawn behind.
        series: [
          { label: "Day" },
          ...data.models.map((model, m) => ({
            label: model,
            stroke: palette[m % palette.length]!,
            fill: `${palette[m % palette.length]!}88`,
            paths: uPlot.paths.bars!({ size: [0.7, 40] }),
            // The legend shows the model's own spend that day, not the stacked height.
            value: (_: uPlot, _stacked: number | null, _series: number, day: number | null) =>
              day === null ? "" : usd(data.cost[m]![day] ?? 0)
          })).reverse()
        ]
      },
      [data.days, ...[...stacked].reverse()],
      element
    )
    const resize = new ResizeObserver(() => plot.setSize({ width: width(), height: 260 }))
    resize.observe(element)
    return () => {
      resize.disconnect()
      plot.destroy()
    }
  }, [data])
  return <div ref={box} class="chart" role="img" aria-label="Spend per day, by model" data-testid="usage-chart" />
}

const ranges = [7, 30, 90] as const

const Billing = () => {
  const billing = useLoad(() => api<BillingInfo>("/v1/billing"), [])
  const ledger = useLoad(() => api<Array<LedgerEntry>>("/v1/billing/ledger?limit=50"), [])
  if (billing.error instanceof ApiError && billing.error.status === 404) return null
  if (billing.data === undefined) {
    return billing.error === undefined
      ? <Loading what="billing" />
      : <ErrorNote error={billing.error} />
  }
  if (billing.data.billing === "none") {
    return <p class="muted">Billing is off for this account: usage is not charged here.</p>
  }
  return (
    <section aria-labelledby="billing-title">
      <h2 id="billing-title">Credit</h2>
      <dl class="facts wide">
        <dt>Balance</dt>
        <dd data-testid="balance">{micros(billing.data.balance)}</dd>
        <dt>Bought</dt>
        <dd>{micros(billing.data.purchased)}</dd>
        <dt>Monthly cap</dt>
        <dd>{billing.data.monthlyCap === null ? "none" : micros(billing.data.monthlyCap)}</dd>
      </dl>
      <h3>Ledger</h3>
      <ErrorNote error={ledger.error} />
      <Table
        label="Ledger"
        rows={ledger.data ?? billing.data.recent}
        rowKey={(entry) => String(entry.id)}
        empty="No entries yet."
        columns={[
          { label: "At", render: (entry) => <Time at={entry.createdAt} /> },
          { label: "Kind", render: (entry) => entry.kind },
          { label: "Amount", class: "number", render: (entry) => micros(entry.amount) },
          {
            label: "For",
            render: (entry) =>
              typeof entry.metadata.note === "string"
                ? entry.metadata.note
                : typeof entry.metadata.hour === "string"
                ? `usage in the hour of ${entry.metadata.hour}`
                : ""
          }
        ]}
      />
    </section>
  )
}

export const UsageView = () => {
  const [range, setRange] = useState<number>(30)
  const usage = useLoad(() => {
    const since = (Math.floor(Date.now() / 86_400_000) - range + 1) * 86400
    return api<Usage>(`/v1/usage?since=${since}`)
  }, [range])
  const data = usage.data === undefined ? undefined : byDay(usage.data)
  const totals = usage.data?.totals
  const perModel = data?.models.map((model) => ({
    model,
    rows: usage.data!.days.filter((row) => row.model === model)
  })).map(({ model, rows }) => ({
    model,
    responses: rows.reduce((sum, row) => sum + row.responses, 0),
    input: rows.reduce((sum, row) => sum + row.input, 0),
    output: rows.reduce((sum, row) => sum + row.output, 0),
    cost: rows.reduce((sum, row) => sum + row.cost, 0)
  })) ?? []
  return (
    <Page
      title="Usage"
      actions={
        <div class="segmented" role="group" aria-label="Range">
          {ranges.map((days) => (
            <button
              type="button"
              class={days === range ? "" : "secondary"}
              aria-pressed={days === range}
              onClick={() => setRange(days)}
            >
              {days} days
            </button>
          ))}
        </div>
      }
    >
      <ErrorNote error={usage.error} />
      {totals === undefined ? <Loading what="usage" /> : (
        <>
          <div class="stats">
            <div class="stat">
              <span class="stat-label">Spend</span>
              <span class="stat-value" data-testid="usage-cost">{usd(totals.cost)}</span>
            </div>
            <div class="stat">
              <span class="stat-label">Responses</span>
              <span class="stat-value">{totals.responses.toLocaleString()}</span>
            </div>
            <div class="stat">
              <span class="stat-label">Tokens in</span>
              <span class="stat-value">{totals.input.toLocaleString()}</span>
            </div>
            <div class="stat">
              <span class="stat-label">Tokens out</span>
              <span class="stat-value">{totals.output.toLocaleString()}</span>
            </div>
          </div>
          <section class="card" aria-labelledby="chart-title">
            <h2 id="chart-title">Spend per day, by model</h2>
            {data!.models.length === 0 ? <p class="muted">No use in this range.</p> : <Chart data={data!} />}
          </section>
          <Table
            label="By model"
            rows={perModel}
            rowKey={(row) => row.model}
            empty="No model was used in this range."
            columns={[
              { label: "Model", render: (row) => <span class="mono small">{row.model}</span> },
              { label: "Responses", class: "number", render: (row) => row.responses.toLocaleString() },
              { label: "Tokens in", class: "number", render: (row) => row.input.toLocaleString() },
              { label: "Tokens out", class: "number", render: (row) => row.output.toLocaleString() },
              { label: "Spend", class: "number", render: (row) => usd(row.cost) }
            ]}
          />
        </>
      )}
      <Billing />
    </Page>
  )
}
