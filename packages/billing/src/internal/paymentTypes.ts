/** What the payment provider interface (`Payments`) speaks: its errors and what its calls answer. */
import { Data, Schema } from "effect"

/** The provider did not answer, or answered with an error that is not the buyer's: the call may be tried again. */
export class PaymentProviderError extends Schema.TaggedError<PaymentProviderError>()("PaymentProviderError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/** A notice that does not carry the provider's valid signature. */
export class InvalidSignature extends Schema.TaggedError<InvalidSignature>()("InvalidSignature", {
  message: Schema.String
}) {}

export type SessionKind = "purchase" | "card_check"

/** A payment page opened for a purchase or a card check. */
export interface Session {
  readonly id: string
  readonly url: string
  /** Known settled already (the local provider settles at once). */
  readonly completed?: Completed | undefined
}

/** What the provider says a session (or an automatic top-up's payment) came to. */
export interface Completed {
  /** The provider's session id (a top-up: its payment's id). */
  readonly sessionId: string
  /** Our purchase id, as we gave it to the provider. */
  readonly purchaseId: string
  /** Paid (a purchase) or the card saved (a card check). */
  readonly paid: boolean
  /** What the buyer paid, micro-USD. */
  readonly total: number
  readonly paymentId?: string | undefined
  /** The card saved for later payments (automatic top-ups). */
  readonly paymentMethod?: string | undefined
  /** The card checked, for a card check: one card unlocks starting credit once, a prepaid card never. */
  readonly card?: { readonly fingerprint: string; readonly funding: string } | undefined
}

/** What a verified notice from the provider says. */
export type Notice = Data.TaggedEnum<{
  Completed: { readonly completed: Completed }
  Expired: { readonly sessionId: string }
  /**
   * Money given back on a payment: `refunded` of `amount` in all so far (cumulative), micro-USD. `ours`: the
   * payment was made for this service (a refund of another product's payment is acknowledged and dropped).
   */
  Refunded: { readonly paymentId: string; readonly refunded: number; readonly amount: number; readonly ours: boolean }
  Ignored: { readonly type: string }
}>
export const Notice = Data.taggedEnum<Notice>()

/** How an automatic top-up's charge of a saved card ended. */
export type ChargeResult = Data.TaggedEnum<{
  Succeeded: { readonly paymentId: string }
  Declined: { readonly reason: string }
  /** The bank asks the buyer to confirm the payment; it may still succeed later (a Completed notice). */
  ActionRequired: { readonly paymentId: string }
}>
export const ChargeResult = Data.taggedEnum<ChargeResult>()
