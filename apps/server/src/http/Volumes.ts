/**
 * Volumes and their files, an agent's uploads, and the signed links of
 * presented files. File bodies are raw bytes both ways: a write keeps the
 * request's Content-Type (none, or application/octet-stream, lets the
 * service sniff it), a read answers the file's own.
 */
import { Agents } from "@agent-runtime/agent"
import { Api, ApiError, Auth, Session, Volume } from "@agent-runtime/domain"
import { Downloads, Volumes } from "@agent-runtime/files"
import type { HttpApiGroup, HttpServerRequest } from "@effect/platform"
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer, Stream } from "effect"
import * as Errors from "./Errors.ts"

const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)

/** The request's content type when it says something about the bytes; generic ones leave it to sniffing. */
const contentTypeOf = (request: HttpServerRequest.HttpServerRequest) => {
  const type = request.headers["content-type"]?.trim()
  return type === undefined || type === "" || type.startsWith("application/octet-stream") ? undefined : type
}

/**
 * The body as one buffer, joined once at the end (the platform's `arrayBuffer` joins the whole body again at
 * every chunk, which makes a large upload quadratic), refused past `limit` bytes whether or not the request
 * declared its length. An undeclared body over the limit is read on, and dropped, up to twice the limit, so
 * its sender gets the 413 rather than a connection cut while it still sends; beyond that it is cut.
 */
const bodyOf = (request: HttpServerRequest.HttpServerRequest, limit: number) => {
  const tooLarge = new ApiError.TooLarge({ error: `request body over ${limit} bytes` })
  return request.stream.pipe(
    Stream.runFoldEffect({ chunks: [] as Array<Uint8Array>, size: 0 }, (read, chunk) => {
      read.size += chunk.length
      if (read.size > 2 * limit) return Effect.fail(tooLarge)
      if (read.size > limit) read.chunks = []
      else read.chunks.push(chunk)
      return Effect.succeed(read)
    }),
    Effect.filterOrFail((read) => read.size <= limit, () => tooLarge),
    Effect.map((read) => new Uint8Array(Buffer.concat(read.chunks, read.size))),
    Effect.catchTag("RequestError", Effect.die)
  )
}

/** `If-Match: "3"` (or 3) as a version, beside the `ifVersion` parameter. */
const ifMatch = (request: HttpServerRequest.HttpServerRequest, ifVersion: number | undefined) => {
  const header = request.headers["if-match"]?.replace(/^W\//, "").replace(/"/g, "").trim()
  if (header === undefined || header === "") return Effect.succeed(ifVersion)
  const version = Number(header)
  return Number.isInteger(version) && version >= 0
    ? Effect.succeed(version)
    : Effect.fail(new ApiError.InvalidRequest({ error: "invalid request: If-Match must be a file version" }))
}

/** One `bytes=a-b`, `bytes=a-` or `bytes=-n` range of a file of `size` bytes, if the header asks one. */
const rangeOf = (header: string | undefined, size: number) => {
  const match = header === undefined ? null : /^bytes=(\d*)-(\d*)$/.exec(header.trim())
  if (match === null || (match[1] === "" && match[2] === "")) return undefined
  const start = match[1] === "" ? Math.max(0, size - Number(match[2])) : Number(match[1])
  const end = match[1] === "" || match[2] === "" ? size - 1 : Math.min(size - 1, Number(match[2]))
  return start <= end ? { offset: start, length: end - start + 1 } : undefined
}

const fileHeaders = (file: Volume.VolumeFile) => ({
  etag: `"${file.version}"`,
  "x-file-version": String(file.version),
  "accept-ranges": "bytes"
})

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "volumes">,
  never,
  Auth.Authentication | Volumes.Volumes | Agents.Agents
> = HttpApiBuilder.group(Api.Api, "volumes", (handlers) =>
  Effect.gen(function*() {
    const volumes = yield* Volumes.Volumes
    const agents = yield* Agents.Agents
    const maxFileBytes = (yield* Effect.orDie(Volumes.config)).maxFileBytes ?? Volume.defaultMaxFileBytes
    return Errors.handlers(handlers)
      .handle("create", ({ payload }) => Effect.flatMap(tenant, (tenantId) => volumes.create(tenantId, payload)))
      .handle("list", ({ urlParams }) => Effect.flatMap(tenant, (tenantId) => volumes.list(tenantId, urlParams)))
      .handle("get", ({ path }) => Effect.flatMap(tenant, (tenantId) => volumes.get(tenantId, path.volumeId)))
      .handle("remove", ({ path }) => Effect.flatMap(tenant, (tenantId) => volumes.remove(tenantId, path.volumeId)))
      .handle("fork", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) => volumes.fork(tenantId, path.volumeId, payload)))
      .handle("files", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          volumes.files(tenantId, path.volumeId, {
            prefix: urlParams.prefix ?? "",
            after: urlParams.after,
            limit: urlParams.limit ?? 50
          })))
      .handle("read", ({ path, request, urlParams }) =>
        Effect.gen(function*() {
          const tenantId = yield* tenant
          const header = request.headers["range"]
          // Only a range needs the size first.
          const range = header === undefined
            ? undefined
            : rangeOf(header, (yield* volumes.stat(tenantId, path.volumeId, urlParams.path)).size)
          const read = yield* volumes.read(tenantId, path.volumeId, urlParams.path, range)
          return HttpServerResponse.uint8Array(read.bytes, {
            status: range === undefined ? 200 : 206,
            contentType: read.file.contentType,
            headers: {
              ...fileHeaders(read.file),
              ...(range === undefined
                ? {}
                : {
                  "content-range": `bytes ${range.offset}-${range.offset + read.bytes.length - 1}/${read.file.size}`
                })
            }
          })
        }))
      .handleRaw("write", ({ path, request, urlParams }) =>
        Effect.gen(function*() {
          const tenantId = yield* tenant
          const ifVersion = yield* ifMatch(request, urlParams.ifVersion)
          const file = yield* volumes.write(
            tenantId,
            path.volumeId,
            urlParams.path,
            yield* bodyOf(request, maxFileBytes),
            {
              contentType: contentTypeOf(request),
              ifVersion,
              by: "api"
            }
          )
          return yield* HttpServerResponse.schemaJson(Volume.VolumeFile)(file, { headers: fileHeaders(file) }).pipe(
            Effect.orDie
          )
        }))
      .handle("removeFile", ({ path, request, urlParams }) =>
        Effect.gen(function*() {
          const ifVersion = yield* ifMatch(request, urlParams.ifVersion)
          return yield* volumes.removeFile(yield* tenant, path.volumeId, urlParams.path, { ifVersion, by: "api" })
        }))
      .handleRaw("upload", ({ path, request }) =>
        Effect.gen(function*() {
          const tenantId = yield* tenant
          const upload = yield* agents.upload(
            tenantId,
            path.id,
            path.requestId,
            path.name,
            yield* bodyOf(request, maxFileBytes),
            contentTypeOf(request)
          )
          return yield* HttpServerResponse.schemaJson(Session.Upload)(upload).pipe(Effect.orDie)
        }))
  }))

/** The link of a presented file: no bearer token, the signature is what lets it in. */
export const layerDownloads: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "downloads">,
  never,
  Downloads.Downloads
> = HttpApiBuilder.group(Api.Api, "downloads", (handlers) =>
  Effect.gen(function*() {
    const downloads = yield* Downloads.Downloads
    return Errors.handlers(handlers).handle("download", ({ path, urlParams }) =>
      Effect.map(downloads.open(path.fileId, urlParams.expires, urlParams.signature), (file) =>
        HttpServerResponse.uint8Array(file.bytes, {
          contentType: file.contentType,
          headers: {
            "content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(file.name)}`,
            "cache-control": "private, no-store",
            "x-content-type-options": "nosniff"
          }
        })))
  }))
