import { Effect, identity, Option } from "effect"
import type { Payments } from "../Payments.ts"
import type { Completed } from "./paymentTypes.ts"
import { ChargeResult, InvalidSignature } from "./paymentTypes.ts"

/**
 * Every payment settled at once, none for real: the page is the success URL itself. Sessions are kept in
 * memory only to answer a read right after; a node that restarted reads none, and its purchases were settled
 * when they were opened.
 */
export const make = () => {
  const sessions = new Map<string, Completed>()
  return identity<Payments["Type"]>({
    provider: "local",
    customer: (tenantId) => Effect.succeed(`local_${tenantId}`),
    open: (request) =>
      Effect.sync(() => {
        const id = `local_${request.purchaseId}`
        const completed: Completed = {
          sessionId: id,
          purchaseId: request.purchaseId,
          paid: true,
          total: request.kind === "card_check" ? 0 : request.credit + request.fee,
          paymentId: id,
          paymentMethod: `local_card_${request.tenantId}`,
          // One local card per tenant: each can unlock its starting credit once.
          card: { fingerprint: `local_${request.tenantId}`, funding: "credit" }
        }
        sessions.set(id, completed)
        return { id, url: request.successUrl, completed }
      }),
    session: (sessionId) => Effect.sync(() => Option.fromNullable(sessions.get(sessionId))),
    charge: (request) => Effect.succeed(ChargeResult.Succeeded({ paymentId: `local_${request.purchaseId}` })),
    notice: () => Effect.fail(new InvalidSignature({ message: "the local payment provider sends no notices" }))
  })
}
