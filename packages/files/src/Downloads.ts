/**
 * Signed, expiring links to presented files: `<base>/v1/files/<pin>?expires=
 * <unix seconds>&signature=<mac>`. The link is the credential (a browser can
 * open it), so it names a pinned content, never a path that could change
 * under it, and its MAC (HMAC-SHA256 under a key derived from the node's
 * sealing key) covers the pin and the expiry: any change to either is
 * refused, and so is a link past its time.
 */
import { ApiError } from "@agent-runtime/domain"
import { type PersistenceError, SealedSecret } from "@agent-runtime/store"
import { Clock, Context, Effect, Layer } from "effect"
import * as Volumes from "./Volumes.ts"

const purpose = "file-download"

export interface Link {
  readonly url: string
  readonly expiresAt: number
}

export class Downloads extends Context.Tag("@agent-runtime/files/Downloads")<Downloads, {
  /** The link to a pinned file, valid until the pin's expiry. */
  readonly link: (pin: Pick<Volumes.Pinned, "id" | "expiresAt">) => Effect.Effect<Link>
  /** The pinned file a link names: Forbidden when the signature does not hold, Gone once expired. */
  readonly open: (
    fileId: string,
    expires: string,
    signature: string
  ) => Effect.Effect<
    Volumes.Pinned & { readonly bytes: Uint8Array },
    ApiError.Forbidden | ApiError.Gone | PersistenceError.PersistenceError
  >
}>() {}

export const make = (baseUrl: Effect.Effect<string>) =>
  Effect.gen(function*() {
    const sealer = yield* SealedSecret.Sealer
    const volumes = yield* Volumes.Volumes
    const signed = (fileId: string, expires: string) => `${fileId}.${expires}`
    return Downloads.of({
      link: (pin) =>
        Effect.map(baseUrl, (base) => {
          const expires = String(pin.expiresAt)
          const signature = sealer.sign(purpose, signed(pin.id, expires))
          return {
            url: `${base}/v1/files/${encodeURIComponent(pin.id)}?expires=${expires}&signature=${signature}`,
            expiresAt: pin.expiresAt
          }
        }),
      open: (fileId, expires, signature) =>
        Effect.gen(function*() {
          if (!/^\d{1,12}$/.test(expires) || !sealer.verify(purpose, signed(fileId, expires), signature)) {
            return yield* new ApiError.Forbidden({ error: "this link is not valid" })
          }
          const now = yield* Clock.currentTimeMillis
          if (Number(expires) * 1000 <= now) return yield* new ApiError.Gone({ error: "this link has expired" })
          return yield* Effect.catchTag(
            volumes.readPinned(fileId),
            "NotFound",
            () => new ApiError.Gone({ error: "this file is no longer kept" })
          )
        })
    })
  })

/**
 * Links rooted at `baseUrl`: where clients reach the REST API (PUBLIC_URL, else the node's own address,
 * known once it listens).
 */
export const layer = (
  baseUrl: Effect.Effect<string>
): Layer.Layer<Downloads, never, SealedSecret.Sealer | Volumes.Volumes> => Layer.effect(Downloads, make(baseUrl))
