/**
 * Signed, expiring links. To presented files: `<base>/v1/files/<pin>?expires=
 * <unix seconds>&signature=<mac>`, naming a pinned content, never a path that
 * could change under it. To a volume's file by path (`POST .../links`):
 * `<base>/v1/links/<volume>?tenant=&path=&expires=[&maxBytes=][&contentType=]
 * &signature=`, for one method, GET (download) or PUT (upload). The link is
 * the credential (a browser can open it, no Authorization header), so its MAC
 * (HMAC-SHA256 under a key derived from the node's sealing key) covers all it
 * says: any change is refused, and so is a link past its time.
 */
import { ApiError } from "@agent-runtime/domain"
import { type PersistenceError, SealedSecret } from "@agent-runtime/store"
import { Clock, Context, Effect, Layer } from "effect"
import * as Volumes from "./Volumes.ts"

const purpose = "file-download"
const filePurpose = "file-link"

export interface Link {
  readonly url: string
  readonly expiresAt: number
}

/** What a link to a volume's file lets its holder do. */
export interface FileGrant {
  readonly method: "GET" | "PUT"
  readonly tenantId: string
  readonly volumeId: string
  /** The path in the volume. */
  readonly path: string
  /** Unix seconds. */
  readonly expiresAt: number
  /** PUT: the most bytes the upload may hold. */
  readonly maxBytes?: number | undefined
  /** PUT: the content type the file gets. */
  readonly contentType?: string | undefined
}

/** The query of a file link as it arrives (`Volume.FileLinkParams`). */
export interface FileLinkQuery {
  readonly tenant: string
  readonly path: string
  readonly expires: string
  readonly maxBytes?: string | undefined
  readonly contentType?: string | undefined
  readonly signature: string
}

/**
 * Every field of a file link as its query spells it, unambiguously (a path may hold any character, which the
 * JSON escapes): what is verified is the very text that is then read.
 */
const fileSigned = (method: string, volumeId: string, query: Omit<FileLinkQuery, "signature">) =>
  JSON.stringify([
    method,
    query.tenant,
    volumeId,
    query.path,
    query.expires,
    query.maxBytes ?? null,
    query.contentType ?? null
  ])

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
  /** The link granting `grant`; whether its volume and file exist is for its use to find. */
  readonly fileLink: (grant: FileGrant) => Effect.Effect<Link>
  /** What a file link used with `method` grants: Forbidden when the signature does not hold, Gone once expired. */
  readonly openFileLink: (
    method: "GET" | "PUT",
    volumeId: string,
    query: FileLinkQuery
  ) => Effect.Effect<FileGrant, ApiError.Forbidden | ApiError.Gone>
}>() {}

export const make = (baseUrl: Effect.Effect<string>) =>
  Effect.gen(function*() {
    const sealer = yield* SealedSecret.Sealer
    const volumes = yield* Volumes.Volumes
    const signed = (fileId: string, expires: string) => `${fileId}.${expires}`
    /** The one check of every link: its signature over `payload`, then its expiry. */
    const verified = (linkPurpose: string, payload: string, expires: string, signature: string) =>
      Effect.gen(function*() {
        if (!/^\d{1,12}$/.test(expires) || !sealer.verify(linkPurpose, payload, signature)) {
          return yield* new ApiError.Forbidden({ error: "this link is not valid" })
        }
        const now = yield* Clock.currentTimeMillis
        if (Number(expires) * 1000 <= now) return yield* new ApiError.Gone({ error: "this link has expired" })
      })
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
          yield* verified(purpose, signed(fileId, expires), expires, signature)
          return yield* Effect.catchTag(
            volumes.readPinned(fileId),
            "NotFound",
            () => new ApiError.Gone({ error: "this file is no longer kept" })
          )
        }),
      fileLink: (grant) =>
        Effect.map(baseUrl, (base) => {
          const fields = {
            tenant: grant.tenantId,
            path: grant.path,
            expires: String(grant.expiresAt),
            ...(grant.maxBytes === undefined ? {} : { maxBytes: String(grant.maxBytes) }),
            ...(grant.contentType === undefined ? {} : { contentType: grant.contentType })
          }
          const query = new URLSearchParams(fields)
          query.set("signature", sealer.sign(filePurpose, fileSigned(grant.method, grant.volumeId, fields)))
          return { url: `${base}/v1/links/${encodeURIComponent(grant.volumeId)}?${query}`, expiresAt: grant.expiresAt }
        }),
      openFileLink: (method, volumeId, query) =>
        Effect.gen(function*() {
          // The method is signed too: a download link cannot be used to upload.
          yield* verified(filePurpose, fileSigned(method, volumeId, query), query.expires, query.signature)
          return {
            method,
            tenantId: query.tenant,
            volumeId,
            path: query.path,
            expiresAt: Number(query.expires),
            maxBytes: query.maxBytes === undefined ? undefined : Number(query.maxBytes),
            contentType: query.contentType
          }
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
