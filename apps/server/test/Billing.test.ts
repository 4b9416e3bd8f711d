/**
 * Usage and prepaid billing against a real node: a catalog provider served
 * by the fake upstream, run on the operator's platform key, so a prepaid
 * tenant's responses are charged from its credit. What the ledger charges
 * equals what the usage.recorded webhooks reported; a spent balance refuses
 * prompts, runs and gateway calls with 402 and stops a running turn before
 * its next model request; a grant restores it; billing events fire once;
 * a tenant not billed is never charged; and every read is the tenant's own.
 */
import { FakeSearch, FakeStripe, Http, PrepaidTenant, TestWorld, WebhookReceiver } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer, Schedule } from "effect"

class Stripe extends Context.Tag("Stripe")<Stripe, FakeStripe.FakeStripe>() {}
class Search extends Context.Tag("Search")<Search, FakeSearch.FakeSearch>() {}

// acme/m1 at $3 per million input tokens and $15 per million output, on the operator's platform key; credit
// sold through the fake Stripe at a 5.5% fee; web searches answered by the fake search provider.
const WorldLive = TestWorld.layer((upstream) =>
  Effect.gen(function*() {
    const stripe = yield* Stripe
    const search = yield* Search
    return {
      ...(yield* PrepaidTenant.catalogEnv(upstream)),
      BILLING_PAYMENTS: "stripe",
      BILLING_PURCHASE_FEE_BPS: "550",
      STRIPE_SECRET_KEY: FakeStripe.secretKey,
      STRIPE_WEBHOOK_SECRET: FakeStripe.webhookSecret,
      STRIPE_API_URL: stripe.url,
      WEB_SEARCH_EXA_URL: search.url
    }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Layer.scoped(Stripe, FakeStripe.start), Layer.scoped(Search, FakeSearch.start())))
)

type Api = ReturnType<typeof Http.client>

const tenant = (api: Api, operatorToken: string, name: string) =>
  Effect.map(
    api.post("/v1/admin/tenants", { token: operatorToken, json: { name } }),
    (response) => response.body as { id: string; token: string }
  )

const settle = (api: Api, token: string, agentId: string, requestId: string) =>
  Effect.map(api.get(`/v1/agents/${agentId}/requests/${requestId}?wait=20`, { token }), (response) => response.body)

layer(WorldLive, { timeout: 120_000, excludeTestServices: true })("usage and prepaid billing", (it) => {
  it.scoped("a prepaid tenant pays from credit exactly what its usage cost, is refused at zero and restored", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const operator = { token: node.operatorToken }
      const put = yield* api.put("/v1/admin/platform-keys/acme", {
        ...operator,
        json: { apiKey: "sk-platform-acme", verify: false }
      })
      expect(put.status, put.text).toBe(200)
      const paying = yield* tenant(api, node.operatorToken, "prepaid")
      const free = yield* tenant(api, node.operatorToken, "not-billed")

      // Before the operator says otherwise a tenant is not billed.
      expect((yield* api.get("/v1/billing", { token: paying.token })).body).toMatchObject({
        billing: "none",
        balance: 0,
        startingCredit: { status: "not_applicable" }
      })
      // Subscribed before the tenant is billed: its starting credit is already at the low mark, so the first
      // billing event comes at once.
      const receiver = yield* WebhookReceiver.start
      const hook = yield* api.post("/v1/webhooks", {
        token: paying.token,
        json: {
          url: `${receiver.url}/billing`,
          events: ["usage.recorded", "billing.balance.low", "billing.balance.depleted", "billing.topup.receipt"]
        }
      })
      expect(hook.status, hook.text).toBe(201)
      receiver.trust("/billing", [hook.body.secret])

      const made = yield* api.put(`/v1/admin/tenants/${paying.id}/billing`, {
        ...operator,
        json: { billing: "prepaid", startingCredit: 1_000_000 }
      })
      expect(made.status, made.text).toBe(200)
      expect(made.body).toMatchObject({
        billing: "prepaid",
        balance: 1_000_000,
        freeCredit: true,
        startingCredit: { status: "granted", amount: 1_000_000 },
        month: { grant: 1_000_000 }
      })
      // Granted once: made prepaid again, it is not granted twice.
      yield* api.put(`/v1/admin/tenants/${paying.id}/billing`, {
        ...operator,
        json: { billing: "prepaid", startingCredit: 1_000_000 }
      })
      expect((yield* api.get("/v1/billing", { token: paying.token })).body.balance).toBe(1_000_000)

      // A gateway call on the platform key is charged too: 10000 input tokens, $0.03.
      upstream.script({ text: "gateway", usage: { input: 10_000, output: 0 } }, { model: "m1" })
      const viaGateway = yield* Http.client(node.gateway).post("/v1/chat/completions", {
        token: paying.token,
        json: { model: PrepaidTenant.model, messages: [{ role: "user", content: "hi" }] }
      })
      expect(viaGateway.status, viaGateway.text).toBe(200)
      yield* Effect.repeat(Effect.map(api.get("/v1/billing", { token: paying.token }), (got) => got.body.balance), {
        until: (balance) => balance === 970_000,
        schedule: Schedule.spaced("200 millis")
      }).pipe(Effect.timeout("10 seconds"))

      // Two turns of 50000 input tokens ($0.15 each), then one whose first response costs $0.90: the balance
      // is spent by it, and that turn stops before asking the model again.
      upstream.script({ text: "one", usage: { input: 50_000, output: 10 } }, { model: "m1" })
      upstream.script({ text: "two", usage: { input: 50_000, output: 10 } }, { model: "m1" })
      upstream.script(
        { toolCalls: [{ id: "call_1", name: "no_such_tool", arguments: {} }], usage: { input: 300_000, output: 10 } },
        { model: "m1" }
      )
      upstream.script({ text: "never asked" }, { model: "m1" })
      const agent = (yield* api.post("/v1/agents", { token: paying.token, json: { model: PrepaidTenant.model } })).body
      for (const text of ["first", "second"]) {
        const accepted = yield* api.post(`/v1/agents/${agent.id}/prompt`, { token: paying.token, json: { text } })
        expect(accepted.status, accepted.text).toBe(202)
        expect((yield* settle(api, paying.token, agent.id, accepted.body.id)).state).toBe("completed")
      }
      const costly = yield* api.post(`/v1/agents/${agent.id}/prompt`, { token: paying.token, json: { text: "go" } })
      expect(costly.status, costly.text).toBe(202)
      const stopped = yield* settle(api, paying.token, agent.id, costly.body.id)
      expect(stopped).toMatchObject({ state: "completed", stopped: "spend_limit" })
      // The gateway's call and the three turns' responses: the stopped turn did not ask again.
      expect(upstream.requests().filter((request) => (request.body as any)?.model === "m1")).toHaveLength(4)

      // Spent: the next prompt, a run and a gateway call are refused, and nothing of them is recorded.
      const refused = yield* api.post(`/v1/agents/${agent.id}/prompt`, {
        token: paying.token,
        json: { text: "more", requestId: "req_refused" }
      })
      expect(refused).toMatchObject({ status: 402, body: { code: "INSUFFICIENT_CREDIT" } })
      expect((yield* api.get(`/v1/agents/${agent.id}/requests/req_refused`, { token: paying.token })).status).toBe(404)
      const run = yield* api.post("/v1/runs", {
        token: paying.token,
        json: { model: PrepaidTenant.model, input: "hi" }
      })
      expect(run).toMatchObject({ status: 402, body: { code: "INSUFFICIENT_CREDIT" } })
      const gateway = yield* Http.client(node.gateway).post("/v1/chat/completions", {
        token: paying.token,
        json: { model: PrepaidTenant.model, messages: [{ role: "user", content: "hi" }] }
      })
      expect(gateway.status, gateway.text).toBe(402)
      expect(gateway.text).toContain("INSUFFICIENT_CREDIT")

      // The ledger's usage entry of this hour charges what the usage.recorded events cost, to the micro-USD,
      // with the gateway's call (its usage goes to the usage webhook only), plus the agent time of the turns.
      const usageEvents = yield* receiver.waitFor(
        "/billing",
        (deliveries) => deliveries.filter((d) => d.event.type === "usage.recorded").length >= 3
      )
      const recorded = usageEvents.filter((d) => d.event.type === "usage.recorded")
      expect(recorded).toHaveLength(3)
      const reported = recorded.reduce((sum, d) => sum + Math.round(d.event.data.cost.usd * 1_000_000), 0)
      expect(reported).toBe(150_150 * 2 + 900_150)
      const billing = (yield* api.get("/v1/billing", { token: paying.token })).body
      const usageEntries = billing.recent.filter((entry: any) => entry.kind === "usage")
      expect(usageEntries).toHaveLength(1)
      const [entry] = usageEntries
      expect(entry.metadata.funding.model).toBe(reported + 30_000)
      expect(entry.metadata.responses).toBe(4)
      expect(entry.metadata.tokens).toBe(410_030)
      expect(entry.metadata.activeMs).toBeGreaterThan(0)
      expect(entry.amount).toBe(-(entry.metadata.funding.model + entry.metadata.funding.agentTime))
      expect(billing.balance).toBe(1_000_000 + entry.amount)
      expect(billing.balance).toBeLessThan(0)
      expect(billing.month).toMatchObject({ grant: 1_000_000, usage: entry.amount })

      const usage = (yield* api.get("/v1/usage", { token: paying.token })).body
      // What the usage read says: the same numbers as the events, and the gateway's call.
      expect(usage.totals).toMatchObject({ responses: 4, input: 410_000, output: 30, platformResponses: 4 })
      expect(Math.round(usage.totals.platformCost * 1_000_000)).toBe(reported + 30_000)
      expect(usage.days).toHaveLength(1)
      expect(usage.days[0]).toMatchObject({ model: PrepaidTenant.model, kind: "turn", responses: 4 })
      expect((yield* api.get(`/v1/usage?agentId=${agent.id}`, { token: paying.token })).body.totals.responses).toBe(3)
      expect((yield* api.get("/v1/usage?agentId=other", { token: paying.token })).body.totals.responses).toBe(0)

      // Each fall is told once: low (the starting credit is at the default mark of 1 USD) and depleted.
      const falls = yield* receiver.waitFor(
        "/billing",
        (deliveries) => deliveries.some((d) => d.event.type === "billing.balance.depleted")
      )
      yield* Effect.sleep("2 seconds")
      const told = receiver.deliveries("/billing").filter((d) => d.event.type.startsWith("billing."))
      expect(told.map((d) => d.event.type).sort()).toEqual(["billing.balance.depleted", "billing.balance.low"])
      // The event tells the balance when the fall was seen: the costly response's charge took it below zero, and
      // the last turn's agent time, charged when the turn ends, may come after the sweep that saw it.
      const depleted = falls.find((d) => d.event.type === "billing.balance.depleted")!.event.data
      expect(depleted).toMatchObject({ threshold: 0 })
      expect(depleted.balance).toBeLessThanOrEqual(0)
      expect(depleted.balance).toBeGreaterThanOrEqual(billing.balance)
      expect(depleted.balance).toBeLessThanOrEqual(billing.balance + entry.metadata.funding.agentTime)

      // A purchase through Stripe restores it: nothing is credited until Stripe says it is paid, then the credit
      // (not the fee) once, however often Stripe tells it; the buyer's free credit ends with it.
      const stripe = yield* Stripe
      stripe.notifyTo(`${node.rest}/v1/billing/payments/webhook`)
      const checkout = yield* api.post("/v1/billing/checkout", {
        token: paying.token,
        json: { amount: 5_000_000, requestId: "buy-1" }
      })
      expect(checkout.status, checkout.text).toBe(201)
      expect(checkout.body).toMatchObject({ status: "open", amount: 5_000_000, fee: 280_000, total: 5_280_000 })
      const retried = yield* api.post("/v1/billing/checkout", {
        token: paying.token,
        json: { amount: 5_000_000, requestId: "buy-1" }
      })
      expect(retried.body.id).toBe(checkout.body.id)
      const sessionId = checkout.body.url.split("/pay/")[1]
      expect(stripe.session(sessionId)).toMatchObject({ amount_total: 528, customer: expect.any(String) })
      expect((yield* api.post(`/v1/agents/${agent.id}/prompt`, { token: paying.token, json: { text: "x" } })).status)
        .toBe(402)
      expect(yield* Effect.promise(() => stripe.pay(sessionId))).toBe(200)
      expect(yield* Effect.promise(() => stripe.resend(stripe.events().at(-1)!.id))).toBe(200)
      const forged = yield* api.post("/v1/billing/payments/webhook", {
        headers: { "stripe-signature": "t=1,v1=00" },
        json: stripe.events().at(-1)
      })
      expect(forged).toMatchObject({ status: 400, body: { code: "INVALID_REQUEST" } })
      expect((yield* api.get(`/v1/billing/checkouts/${checkout.body.id}`, { token: paying.token })).body.status)
        .toBe("paid")
      const bought = (yield* api.get("/v1/billing", { token: paying.token })).body
      expect(bought).toMatchObject({ balance: billing.balance + 5_000_000, purchased: 5_000_000, freeCredit: false })
      expect(bought.month.purchase).toBe(5_000_000)

      // A grant under an Idempotency-Key, retried, is one entry; the same key with another body is 409.
      const grant = { kind: "grant", amount: 1_000_000, note: "support credit" }
      const granted = yield* api.post(`/v1/admin/tenants/${paying.id}/ledger`, {
        ...operator,
        headers: { "idempotency-key": "grant-1" },
        json: grant
      })
      expect(granted.status, granted.text).toBe(201)
      const again = yield* api.post(`/v1/admin/tenants/${paying.id}/ledger`, {
        ...operator,
        headers: { "idempotency-key": "grant-1" },
        json: grant
      })
      expect(again.body.id).toBe(granted.body.id)
      const conflict = yield* api.post(`/v1/admin/tenants/${paying.id}/ledger`, {
        ...operator,
        headers: { "idempotency-key": "grant-1" },
        json: { ...grant, amount: 2_000_000 }
      })
      expect(conflict).toMatchObject({ status: 409, body: { code: "IDEMPOTENCY_CONFLICT" } })
      expect((yield* api.get("/v1/billing", { token: paying.token })).body.balance).toBe(
        billing.balance + 6_000_000
      )
      const ledger = yield* api.get("/v1/billing/ledger?limit=2", { token: paying.token })
      expect(ledger.body.map((entry: any) => entry.kind)).toEqual(["grant", "purchase"])
      expect(ledger.headers.get("link")).toContain("after=")

      // Restored: prompts run again. The tenant's own monthly cap then refuses with SPEND_LIMIT.
      upstream.script({ text: "back", usage: { input: 10, output: 1 } }, { model: "m1" })
      const back = yield* api.post(`/v1/agents/${agent.id}/prompt`, { token: paying.token, json: { text: "again" } })
      expect(back.status, back.text).toBe(202)
      expect((yield* settle(api, paying.token, agent.id, back.body.id)).state).toBe("completed")
      // The purchase was told once, with its receipt.
      yield* receiver.waitFor("/billing", (ds) => ds.some((d) => d.event.type === "billing.topup.receipt"))
      yield* Effect.sleep("1 second")
      const receipts = receiver.deliveries("/billing").filter((d) => d.event.type === "billing.topup.receipt")
      expect(receipts).toHaveLength(1)
      expect(receipts[0]!.event.data).toMatchObject({ purchase: checkout.body.id, amount: 5_000_000, fee: 280_000 })
      const capped = yield* api.patch("/v1/billing", { token: paying.token, json: { monthlyCap: 1 } })
      expect(capped.body.monthlyCap).toBe(1)
      yield* Effect.sleep("2100 millis")
      const overCap = yield* api.post(`/v1/agents/${agent.id}/prompt`, { token: paying.token, json: { text: "x" } })
      expect(overCap).toMatchObject({ status: 402, body: { code: "SPEND_LIMIT" } })

      // The tenant not billed ran on the same platform key and was charged nothing; it sees only its own.
      upstream.script({ text: "free", usage: { input: 50_000, output: 10 } }, { model: "m1" })
      const freeAgent =
        (yield* api.post("/v1/agents", { token: free.token, json: { model: PrepaidTenant.model } })).body
      const freePrompt = yield* api.post(`/v1/agents/${freeAgent.id}/prompt`, {
        token: free.token,
        json: { text: "hi" }
      })
      expect((yield* settle(api, free.token, freeAgent.id, freePrompt.body.id)).state).toBe("completed")
      expect((yield* api.get("/v1/billing", { token: free.token })).body).toMatchObject({
        billing: "none",
        balance: 0,
        recent: []
      })
      expect((yield* api.get("/v1/billing/ledger", { token: free.token })).body).toEqual([])
      expect((yield* api.get("/v1/usage", { token: free.token })).body.totals).toMatchObject({
        responses: 1,
        platformResponses: 1
      })
      // A tenant's token reaches no operator route.
      expect(
        (yield* api.post(`/v1/admin/tenants/${free.id}/ledger`, { token: free.token, json: grant })).status
      ).toBe(403)
    }))

  it.scoped("a web search on the platform's key is charged per search, once, with the call's result", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const operator = { token: node.operatorToken }
      for (const [provider, apiKey] of [["acme", "sk-platform-acme"], ["exa", FakeSearch.defaultApiKey]]) {
        const put = yield* api.put(`/v1/admin/platform-keys/${provider}`, {
          ...operator,
          json: { apiKey, verify: false }
        })
        expect(put.status, put.text).toBe(200)
      }
      const searcher = yield* tenant(api, node.operatorToken, "searcher")
      yield* api.put(`/v1/admin/tenants/${searcher.id}/billing`, {
        ...operator,
        json: { billing: "prepaid", startingCredit: 1_000_000 }
      })
      // The first test leaves a reply scripted that its stopped turn never asked for.
      upstream.reset()
      upstream.script({
        toolCalls: [
          { id: "call_s1", name: "web_search", arguments: { query: "effect ts" } },
          { id: "call_s2", name: "web_search", arguments: { query: "postgres" } }
        ],
        usage: { input: 10, output: 1 }
      }, { model: "m1" })
      upstream.script({ text: "found", usage: { input: 10, output: 1 } }, { model: "m1" })
      const agent = (yield* api.post("/v1/agents", {
        token: searcher.token,
        json: { model: PrepaidTenant.model, builtins: ["web_search"] }
      })).body
      const prompt = yield* api.post(`/v1/agents/${agent.id}/prompt`, { token: searcher.token, json: { text: "go" } })
      expect((yield* settle(api, searcher.token, agent.id, prompt.body.id)).outcome.result).toMatchObject({
        reply: "found",
        toolCalls: [{ tool: "web_search", ok: true }, { tool: "web_search", ok: true }]
      })
      const billing = (yield* api.get("/v1/billing", { token: searcher.token })).body
      const [entry] = billing.recent.filter((entry: any) => entry.kind === "usage")
      // Exa's rate is 5000 micro-USD a search.
      expect(entry.metadata.funding.webSearch).toBe(10_000)
      expect(entry.amount).toBe(
        -(entry.metadata.funding.model + entry.metadata.funding.agentTime + entry.metadata.funding.webSearch)
      )
      expect(billing.balance).toBe(1_000_000 + entry.amount)
    }))

  it.effect("bad billing input is refused with its error and changes nothing", () =>
    Effect.gen(function*() {
      const { node } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const operator = { token: node.operatorToken }
      const someone = yield* tenant(api, node.operatorToken, "bad-input")
      const cases = [
        api.put(`/v1/admin/tenants/${someone.id}/billing`, { ...operator, json: { billing: "postpaid" } }),
        api.put(`/v1/admin/tenants/${someone.id}/billing`, { ...operator, json: { billing: "prepaid", extra: 1 } }),
        api.post(`/v1/admin/tenants/${someone.id}/ledger`, {
          ...operator,
          json: { kind: "grant", amount: -5, note: "negative" }
        }),
        api.post(`/v1/admin/tenants/${someone.id}/ledger`, {
          ...operator,
          json: { kind: "usage", amount: 5, note: "not an operator's kind" }
        }),
        api.post(`/v1/admin/tenants/${someone.id}/ledger`, {
          ...operator,
          json: { kind: "grant", amount: 1.5, note: "fraction" }
        }),
        api.patch("/v1/billing", { token: someone.token, json: { monthlyCap: -1 } }),
        api.post("/v1/billing/checkout", { token: someone.token, json: { amount: 5_000_001 } }),
        api.post("/v1/billing/checkout", { token: someone.token, json: { amount: 10_000, requestId: "r" } }),
        api.post("/v1/billing/checkout", { token: someone.token, json: { amount: "5" } }),
        api.put("/v1/billing/auto-topup", {
          token: someone.token,
          json: { enabled: true, threshold: 1_000_000, amount: 5_000_000, monthlyLimit: 1 }
        }),
        api.get("/v1/usage?since=yesterday", { token: someone.token })
      ]
      for (const request of cases) {
        expect(yield* request).toMatchObject({ status: 400, body: { code: "INVALID_REQUEST" } })
      }
      expect(
        (yield* api.put("/v1/admin/tenants/tn_missing/billing", { ...operator, json: { billing: "prepaid" } })).status
      ).toBe(404)
      expect((yield* api.get("/v1/billing", { token: someone.token })).body).toMatchObject({
        billing: "none",
        balance: 0,
        recent: []
      })
      expect((yield* api.get(`/v1/admin/tenants/${someone.id}/billing`, operator)).body.billing).toBe("none")
      // Valid, but the tenant is not prepaid: nothing to buy, and nothing was written.
      expect(yield* api.post("/v1/billing/checkout", { token: someone.token, json: { amount: 5_000_000 } }))
        .toMatchObject({ status: 409, body: { code: "CONFLICT" } })
      expect(yield* api.post("/v1/billing/card-check", { token: someone.token })).toMatchObject({ status: 409 })
      expect((yield* api.get("/v1/billing/checkouts/pur_missing", { token: someone.token })).status).toBe(404)
      expect((yield* api.get("/v1/billing/auto-topup", { token: someone.token })).body).toMatchObject({
        enabled: false,
        state: "off"
      })
    }))
})
