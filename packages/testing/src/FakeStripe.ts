/**
 * A fake Stripe for tests: one node:http server on 127.0.0.1 answering the
 * part of Stripe's API the billing package uses, in Stripe's shapes and
 * form-encoded requests: customers, Checkout Sessions (payment and setup
 * mode, read with `expand`), PaymentIntents (an off-session charge of a
 * saved card) and their reads. It checks the secret key, replays the answer
 * kept for a repeated `Idempotency-Key` as Stripe does, and records every
 * request.
 *
 * The test plays the buyer and the bank: `pay` completes a session as a
 * buyer paying on its page would and sends `checkout.session.completed`,
 * signed with the endpoint's secret by the `stripe` package's own signer,
 * to the URL given to `notifyTo`; `refund` sends `charge.refunded`; `card`
 * says how the next off-session charges end (succeed, decline, ask for the
 * buyer's confirmation, or charge and lose the answer on the way back).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Qs from "qs"
import Stripe from "stripe"

export const secretKey = "sk_test_fake_0123456789"
export const webhookSecret = "whsec_fake_0123456789"

type Json = Record<string, any>

/** How the next off-session charges of saved cards end. */
export type CardBehavior =
  | "succeed"
  | "decline"
  | "authentication_required"
  /**
   * The charge is made and its answer kept for the key, but the connection is cut before it is sent (each
   * request with the key counts one of `times`, the client's own retries too).
   */
  | "lose_answer"

export interface RecordedRequest {
  readonly method: string
  readonly path: string
  readonly idempotencyKey: string | undefined
  readonly body: Json
}

export interface FakeStripe {
  /** The API root, e.g. `http://127.0.0.1:1234`: STRIPE_API_URL. */
  readonly url: string
  readonly requests: () => ReadonlyArray<RecordedRequest>
  /** Where notices go: the service's webhook URL, or a function taking the body and signature, for in-process tests. */
  readonly notifyTo: (target: Target) => void
  readonly session: (id: string) => Json | undefined
  readonly paymentIntents: () => ReadonlyArray<Json>
  /** The buyer pays (or saves the card, in setup mode) with a card; the notice's answer status, or 0 if none. */
  readonly pay: (
    sessionId: string,
    card?: { readonly fingerprint?: string; readonly funding?: string }
  ) => Promise<number>
  /** The session expires unpaid; its notice is sent. */
  readonly expire: (sessionId: string) => Promise<number>
  /** Refunds `cents` more of the payment's charge; `charge.refunded` is sent with the cumulative total. */
  readonly refund: (paymentIntentId: string, cents: number) => Promise<number>
  /** The buyer confirms a charge the bank asked about; `payment_intent.succeeded` is sent. */
  readonly confirm: (paymentIntentId: string) => Promise<number>
  /** Sends again a notice sent before (Stripe sends at least once); its answer status. */
  readonly resend: (eventId: string) => Promise<number>
  readonly events: () => ReadonlyArray<Json>
  /** How the next off-session charges end; `times` of them, then `succeed` again (all when omitted). */
  readonly card: (behavior: CardBehavior, times?: number) => void
}

/** A webhook URL, or what takes a notice in process: its answer status. */
export type Target = string | ((payload: string, signature: string) => Promise<number>)

interface State {
  base: string
  notify: Target | undefined
  seq: number
  readonly recorded: Array<RecordedRequest>
  readonly customers: Map<string, Json>
  readonly sessions: Map<string, Json>
  readonly intents: Map<string, Json>
  readonly setupIntents: Map<string, Json>
  readonly methods: Map<string, Json>
  readonly charges: Map<string, Json>
  readonly events: Array<Json>
  readonly replies: Map<string, { readonly status: number; readonly body: Json }>
  behavior: CardBehavior
  behaviorTimes: number | undefined
}

const signer = new Stripe(secretKey)

const id = (state: State, prefix: string) => `${prefix}_fake${String(++state.seq).padStart(8, "0")}`

const now = () => Math.floor(Date.now() / 1000)

/** Stripe's `expand` on a read: the named ids replaced by their objects, one level of dots deep. */
const expanded = (state: State, session: Json, expand: ReadonlyArray<string>): Json => {
  const out = { ...session }
  if (expand.includes("payment_intent") && typeof out.payment_intent === "string") {
    out.payment_intent = state.intents.get(out.payment_intent) ?? out.payment_intent
  }
  const setup = expand.find((path) => path.startsWith("setup_intent"))
  if (setup !== undefined && typeof out.setup_intent === "string") {
    const intent = state.setupIntents.get(out.setup_intent)
    if (intent !== undefined) {
      out.setup_intent = setup === "setup_intent.payment_method"
        ? { ...intent, payment_method: state.methods.get(intent.payment_method) ?? intent.payment_method }
        : intent
    }
  }
  return out
}

const stripeError = (status: number, error: Json) => ({ status, body: { error } })

const route = (
  state: State,
  method: string,
  path: string,
  body: Json,
  query: Json,
  behavior: CardBehavior
): { status: number; body: Json } => {
  if (method === "POST" && path === "/v1/customers") {
    const customer = {
      id: id(state, "cus"),
      object: "customer",
      created: now(),
      metadata: body.metadata ?? {},
      invoice_settings: { default_payment_method: null }
    }
    state.customers.set(customer.id, customer)
    return { status: 200, body: customer }
  }
  if (method === "POST" && path === "/v1/checkout/sessions") {
    if (typeof body.customer !== "string" || !state.customers.has(body.customer)) {
      return stripeError(400, { type: "invalid_request_error", message: `No such customer: '${body.customer}'` })
    }
    const items: Array<Json> = body.line_items ?? []
    const total = items.reduce((sum, item) => sum + Number(item.price_data.unit_amount) * Number(item.quantity), 0)
    const session = {
      id: id(state, "cs_test"),
      object: "checkout.session",
      mode: body.mode,
      status: "open",
      payment_status: body.mode === "setup" ? "no_payment_required" : "unpaid",
      amount_total: body.mode === "setup" ? null : total,
      currency: "usd",
      customer: body.customer,
      client_reference_id: body.client_reference_id ?? null,
      metadata: body.metadata ?? {},
      payment_intent_data: body.payment_intent_data ?? {},
      success_url: body.success_url,
      cancel_url: body.cancel_url,
      url: "",
      payment_intent: null,
      setup_intent: null,
      created: now()
    }
    session.url = `${state.base}/pay/${session.id}`
    state.sessions.set(session.id, session)
    const { payment_intent_data: _, ...answered } = session
    return { status: 200, body: answered }
  }
  const sessionRead = /^\/v1\/checkout\/sessions\/([^/]+)$/.exec(path)
  if (method === "GET" && sessionRead !== null) {
    const session = state.sessions.get(sessionRead[1]!)
    if (session === undefined) {
      return stripeError(404, {
        type: "invalid_request_error",
        message: `No such checkout.session: '${sessionRead[1]}'`
      })
    }
    const { payment_intent_data: _, ...answered } = session
    return { status: 200, body: expanded(state, answered, [query.expand ?? []].flat()) }
  }
  const intentRead = /^\/v1\/payment_intents\/([^/]+)$/.exec(path)
  if (method === "GET" && intentRead !== null) {
    const intent = state.intents.get(intentRead[1]!)
    return intent === undefined
      ? stripeError(404, { type: "invalid_request_error", message: `No such payment_intent: '${intentRead[1]}'` })
      : { status: 200, body: intent }
  }
  if (method === "POST" && path === "/v1/payment_intents") {
    const method = state.methods.get(body.payment_method)
    if (method === undefined || method.customer !== body.customer) {
      return stripeError(400, {
        type: "invalid_request_error",
        message: `No such PaymentMethod: '${body.payment_method}'`
      })
    }
    const intent: Json = {
      id: id(state, "pi"),
      object: "payment_intent",
      amount: Number(body.amount),
      amount_received: 0,
      currency: body.currency,
      customer: body.customer,
      payment_method: body.payment_method,
      metadata: body.metadata ?? {},
      status: "requires_payment_method",
      created: now()
    }
    state.intents.set(intent.id, intent)
    if (behavior === "decline") {
      return stripeError(402, {
        type: "card_error",
        code: "card_declined",
        decline_code: "insufficient_funds",
        message: "Your card has insufficient funds.",
        payment_intent: intent
      })
    }
    if (behavior === "authentication_required") {
      intent.status = "requires_action"
      return stripeError(402, {
        type: "card_error",
        code: "authentication_required",
        message: "This payment requires authentication.",
        payment_intent: intent
      })
    }
    succeed(state, intent)
    return { status: 200, body: intent }
  }
  return stripeError(404, { type: "invalid_request_error", message: `Unrecognized request URL (${method}: ${path})` })
}

/** The intent is paid: its charge is made. */
const succeed = (state: State, intent: Json) => {
  intent.status = "succeeded"
  intent.amount_received = intent.amount
  const charge = {
    id: id(state, "ch"),
    object: "charge",
    amount: intent.amount,
    amount_refunded: 0,
    payment_intent: intent.id,
    metadata: {},
    refunded: false
  }
  state.charges.set(charge.id, charge)
  intent.latest_charge = charge.id
}

const respond = (state: State, req: Http.IncomingMessage, res: Http.ServerResponse, raw: string) => {
  const url = new URL(req.url ?? "/", state.base)
  const body = Qs.parse(raw) as Json
  const query = Qs.parse(url.search.slice(1)) as Json
  const key = req.headers["idempotency-key"] as string | undefined
  state.recorded.push({ method: req.method ?? "GET", path: url.pathname, idempotencyKey: key, body })
  const send = (status: number, answer: Json) => {
    res.writeHead(status, { "content-type": "application/json", "request-id": `req_${state.seq}` })
    res.end(JSON.stringify(answer))
  }
  if (req.headers.authorization !== `Bearer ${secretKey}`) {
    return send(401, { error: { type: "invalid_request_error", message: "Invalid API Key provided" } })
  }
  const behavior = req.method === "POST" && url.pathname === "/v1/payment_intents" ? takeBehavior(state) : "succeed"
  const replayKey = key === undefined ? undefined : `${req.method} ${url.pathname} ${key}`
  const kept = replayKey === undefined ? undefined : state.replies.get(replayKey)
  const answer = kept ?? route(state, req.method ?? "GET", url.pathname, body, query, behavior)
  if (kept === undefined && replayKey !== undefined && req.method === "POST") state.replies.set(replayKey, answer)
  if (behavior === "lose_answer") return res.destroy()
  if (kept !== undefined) res.setHeader("idempotent-replayed", "true")
  send(answer.status, answer.body)
}

/** The behavior of this charge, counting it against the behavior's `times`. */
const takeBehavior = (state: State): CardBehavior => {
  const behavior = state.behavior
  if (state.behaviorTimes !== undefined && --state.behaviorTimes <= 0) {
    state.behavior = "succeed"
    state.behaviorTimes = undefined
  }
  return behavior
}

const deliver = async (state: State, event: Json): Promise<number> => {
  if (state.notify === undefined) return 0
  const payload = JSON.stringify(event)
  const signature = signer.webhooks.generateTestHeaderString({ payload, secret: webhookSecret })
  if (typeof state.notify === "function") return state.notify(payload, signature)
  const response = await fetch(state.notify, {
    method: "POST",
    headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": signature },
    body: payload
  })
  await response.arrayBuffer()
  return response.status
}

const notify = (state: State, type: string, object: Json) => {
  const event = {
    id: id(state, "evt"),
    object: "event",
    type,
    api_version: Stripe.API_VERSION,
    created: now(),
    livemode: false,
    data: { object: structuredClone(object) }
  }
  state.events.push(event)
  return deliver(state, event)
}

/** Starts the server on 127.0.0.1; it closes with the scope. */
export const start: Effect.Effect<FakeStripe, never, Scope.Scope> = Effect.map(
  Effect.acquireRelease(
    Effect.async<{ readonly server: Http.Server; readonly state: State }>((resume) => {
      const state: State = {
        base: "",
        notify: undefined,
        seq: 0,
        recorded: [],
        customers: new Map(),
        sessions: new Map(),
        intents: new Map(),
        setupIntents: new Map(),
        methods: new Map(),
        charges: new Map(),
        events: [],
        replies: new Map(),
        behavior: "succeed",
        behaviorTimes: undefined
      }
      const server = Http.createServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (chunk: Buffer) => chunks.push(chunk))
        req.on("end", () => respond(state, req, res, Buffer.concat(chunks).toString("utf8")))
      })
      server.once("error", (error) => resume(Effect.die(error)))
      server.listen(0, "127.0.0.1", () => {
        state.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
        resume(Effect.succeed({ server, state }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  ),
  ({ state }): FakeStripe => ({
    url: state.base,
    requests: () => [...state.recorded],
    notifyTo: (target) => {
      state.notify = target
    },
    session: (sessionId) => state.sessions.get(sessionId),
    paymentIntents: () => [...state.intents.values()],
    pay: (sessionId, card = {}) => {
      const session = state.sessions.get(sessionId)
      if (session === undefined || session.status !== "open") throw new Error(`no open session ${sessionId}`)
      const method = {
        id: id(state, "pm"),
        object: "payment_method",
        customer: session.customer,
        card: {
          brand: "visa",
          last4: "4242",
          fingerprint: card.fingerprint ?? `fp_${session.customer}`,
          funding: card.funding ?? "credit"
        }
      }
      state.methods.set(method.id, method)
      session.status = "complete"
      if (session.mode === "setup") {
        const setup = {
          id: id(state, "seti"),
          object: "setup_intent",
          status: "succeeded",
          customer: session.customer,
          payment_method: method.id,
          metadata: session.metadata
        }
        state.setupIntents.set(setup.id, setup)
        session.setup_intent = setup.id
      } else {
        const intent: Json = {
          id: id(state, "pi"),
          object: "payment_intent",
          amount: session.amount_total,
          amount_received: 0,
          currency: "usd",
          customer: session.customer,
          payment_method: method.id,
          metadata: session.payment_intent_data.metadata ?? {},
          status: "processing",
          created: now()
        }
        state.intents.set(intent.id, intent)
        succeed(state, intent)
        session.payment_intent = intent.id
        session.payment_status = "paid"
      }
      const { payment_intent_data: _, ...told } = session
      return notify(state, "checkout.session.completed", told)
    },
    expire: (sessionId) => {
      const session = state.sessions.get(sessionId)!
      session.status = "expired"
      const { payment_intent_data: _, ...told } = session
      return notify(state, "checkout.session.expired", told)
    },
    refund: (paymentIntentId, cents) => {
      const intent = state.intents.get(paymentIntentId)!
      const charge = state.charges.get(intent.latest_charge)!
      charge.amount_refunded = Math.min(charge.amount, charge.amount_refunded + cents)
      charge.refunded = charge.amount_refunded === charge.amount
      return notify(state, "charge.refunded", charge)
    },
    confirm: (paymentIntentId) => {
      const intent = state.intents.get(paymentIntentId)!
      succeed(state, intent)
      return notify(state, "payment_intent.succeeded", intent)
    },
    resend: (eventId) => deliver(state, state.events.find((event) => event.id === eventId)!),
    events: () => [...state.events],
    card: (behavior, times) => {
      state.behavior = behavior
      state.behaviorTimes = times
    }
  })
)
