/**
 * Volumes and their files, an agent's uploads and files over its own token,
 * and signed links (of presented files, and of a file by path). File bodies
 * are raw bytes both ways: a write keeps the request's Content-Type (none, or
 * application/octet-stream, lets the service sniff it), a read answers the
 * file's own. A file is named either by `?path=` (`.../file`) or by the rest
 * of the URL (`.../files/<path>`, as the camelRun client names it); both are
 * served by the same handlers.
 */
import { AgentFiles, Agents } from "@agent-runtime/agent"
import { Api, ApiError, Auth, Session, Volume } from "@agent-runtime/domain"
import { Downloads, FilePath, Volumes } from "@agent-runtime/files"
import type { HttpApiGroup, HttpServerRequest } from "@effect/platform"
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Clock, Effect, Either, type Layer, Stream } from "effect"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

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

/**
 * `If-Match: "3"` (or 3) as a version, beside the `ifVersion` parameter; `If-None-Match: *` as version 0 (only
 * if the file does not exist). A write refused by either is 409 CONFLICT, like `ifVersion`, not 412.
 */
const ifMatch = (request: HttpServerRequest.HttpServerRequest, ifVersion: number | undefined) => {
  const header = request.headers["if-match"]?.replace(/^W\//, "").replace(/"/g, "").trim()
  if (request.headers["if-none-match"]?.trim() === "*" && (header === undefined || header === "")) {
    return Effect.succeed(0)
  }
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

/** The file's bytes, or the one range the request asks, 206 with its Content-Range. */
const serveFile = (
  volumes: Volumes.Volumes["Type"],
  request: HttpServerRequest.HttpServerRequest,
  tenantId: string,
  volumeId: string,
  path: string
) =>
  Effect.gen(function*() {
    const header = request.headers["range"]
    // Only a range needs the size first.
    const range = header === undefined
      ? undefined
      : rangeOf(header, (yield* volumes.stat(tenantId, volumeId, path)).size)
    const read = yield* volumes.read(tenantId, volumeId, path, range)
    return HttpServerResponse.uint8Array(read.bytes, {
      status: range === undefined ? 200 : 206,
      contentType: read.file.contentType,
      headers: {
        ...fileHeaders(read.file),
        ...(range === undefined
          ? {}
          : { "content-range": `bytes ${range.offset}-${range.offset + read.bytes.length - 1}/${read.file.size}` })
      }
    })
  })

/** The file written, as JSON with its version in the headers; `path` as the caller names it. */
const written = (file: Volume.VolumeFile, path = file.path) =>
  HttpServerResponse.schemaJson(Volume.VolumeFile)(new Volume.VolumeFile({ ...file, path }), {
    headers: fileHeaders(file)
  }).pipe(Effect.orDie)

/** A page of files as the camelRun wire has it: `next` only when more follow. */
const fileList = (page: { readonly data: ReadonlyArray<Volume.VolumeFile>; readonly next: string | null }) =>
  new Volume.FileList({ files: page.data, ...(page.next === null ? {} : { next: page.next }) })

/** The grant a link input asks, for the file at `path` of the volume. */
const linkGrant = (tenantId: string, volumeId: string, path: string, input: Volume.FileLinkInput) =>
  Effect.map(Clock.currentTimeMillis, (now) => ({
    method: input.method ?? "GET" as const,
    tenantId,
    volumeId,
    path,
    expiresAt: Math.floor(now / 1000) + (input.expiresIn ?? Volume.defaultLinkSeconds),
    // What bounds an upload and what it is typed as mean nothing to a download.
    ...(input.method === "PUT" ? { maxBytes: input.maxBytes, contentType: input.contentType } : {})
  }))

const fileLink = (downloads: Downloads.Downloads["Type"], grant: Downloads.FileGrant, path: string) =>
  Effect.map(downloads.fileLink(grant), (link) =>
    new Volume.FileLink({
      url: link.url,
      method: grant.method,
      path,
      expiresAt: link.expiresAt,
      ...(grant.maxBytes === undefined ? {} : { maxBytes: grant.maxBytes }),
      ...(grant.contentType === undefined ? {} : { contentType: grant.contentType })
    }))

/** A prompt's attachment put in the agent's workspace, by either route: its record, with the path to attach. */
const upload = (
  agents: Agents.Agents["Type"],
  request: HttpServerRequest.HttpServerRequest,
  maxFileBytes: number,
  tenantId: string,
  agentId: string,
  path: { readonly requestId: string; readonly name: string }
) =>
  Effect.flatMap(
    bodyOf(request, maxFileBytes),
    (bytes) => agents.upload(tenantId, agentId, path.requestId, path.name, bytes, contentTypeOf(request))
  ).pipe(Effect.flatMap((saved) => Effect.orDie(HttpServerResponse.schemaJson(Session.Upload)(saved))))

const maxFileBytesOf = Effect.map(
  Effect.orDie(Volumes.config),
  (config) => config.maxFileBytes ?? Volume.defaultMaxFileBytes
)

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "volumes">,
  never,
  Auth.Authentication | Volumes.Volumes | Agents.Agents | Downloads.Downloads
> = HttpApiBuilder.group(Api.Api, "volumes", (handlers) =>
  Effect.gen(function*() {
    const volumes = yield* Volumes.Volumes
    const agents = yield* Agents.Agents
    const downloads = yield* Downloads.Downloads
    const maxFileBytes = yield* maxFileBytesOf
    const write = (request: HttpServerRequest.HttpServerRequest, volumeId: string, path: string, ifVersion?: number) =>
      Effect.gen(function*() {
        const file = yield* volumes.write(
          yield* tenant,
          volumeId,
          path,
          yield* bodyOf(request, maxFileBytes),
          { contentType: contentTypeOf(request), ifVersion: yield* ifMatch(request, ifVersion), by: "api" }
        )
        return yield* written(file)
      })
    const removeFile = (
      request: HttpServerRequest.HttpServerRequest,
      volumeId: string,
      path: string,
      ifVersion?: number
    ) =>
      Effect.gen(function*() {
        const version = yield* ifMatch(request, ifVersion)
        return yield* volumes.removeFile(yield* tenant, volumeId, path, { ifVersion: version, by: "api" })
      })
    return Errors.handlers(handlers)
      .handle("create", ({ payload }) => Effect.flatMap(tenant, (tenantId) => volumes.create(tenantId, payload)))
      .handle("list", ({ urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.flatMap(volumes.list(tenantId, urlParams), (page) =>
            Paging.answer(page, urlParams))))
      .handle("get", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) => volumes.get(tenantId, path.volumeId)))
      .handle("remove", ({ path }) => Effect.flatMap(tenant, (tenantId) => volumes.remove(tenantId, path.volumeId)))
      .handle("fork", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          volumes.fork(tenantId, path.volumeId, payload)))
      .handle("snapshot", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          volumes.snapshot(tenantId, path.volumeId, payload)))
      .handle("snapshots", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          volumes.snapshots(tenantId, path.volumeId)))
      .handle("removeSnapshot", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          volumes.removeSnapshot(tenantId, path.volumeId, path.snapshotId)))
      .handle("changes", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          volumes.history(tenantId, path.volumeId, urlParams.since ?? 0)))
      .handle("files", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.map(
            volumes.files(tenantId, path.volumeId, {
              prefix: urlParams.prefix ?? "",
              after: urlParams.after,
              limit: urlParams.limit ?? 50,
              glob: urlParams.glob === undefined
                ? undefined
                : { pattern: FilePath.globPattern(urlParams.glob), strip: "", root: "" }
            }),
            fileList
          )))
      .handle("readPath", ({ path, request }) =>
        Effect.flatMap(tenant, (tenantId) =>
          serveFile(volumes, request, tenantId, path.volumeId, path["*"])))
      .handleRaw("writePath", ({ path, request }) =>
        write(request, path.volumeId, path["*"]))
      .handle("removePath", ({ path, request }) =>
        removeFile(request, path.volumeId, path["*"]))
      .handle("link", ({ path, payload }) =>
        Effect.gen(function*() {
          const tenantId = yield* tenant
          // Refused now rather than when used: a volume of another tenant, or a path no file could have.
          yield* volumes.get(tenantId, path.volumeId)
          const relative = yield* Either.match(FilePath.parse(payload.path), {
            onLeft: (error) =>
              Effect.fail(new ApiError.InvalidRequest({ error: `invalid request: path: ${error}` })),
            onRight: Effect.succeed
          })
          return yield* fileLink(downloads, yield* linkGrant(tenantId, path.volumeId, relative, payload), relative)
        }))
      .handle("read", ({ path, request, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          serveFile(volumes, request, tenantId, path.volumeId, urlParams.path)))
      .handleRaw("write", ({ path, request, urlParams }) =>
        write(request, path.volumeId, urlParams.path, urlParams.ifVersion))
      .handle("removeFile", ({ path, request, urlParams }) =>
        removeFile(request, path.volumeId, urlParams.path, urlParams.ifVersion))
      .handleRaw("upload", ({ path, request }) =>
        Effect.flatMap(tenant, (tenantId) =>
          upload(agents, request, maxFileBytes, tenantId, path.id, path)))
  }))

/** An agent's files over its own token, by the paths the agent sees. */
export const layerClientFiles: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "clientFiles">,
  never,
  Auth.AgentAuthentication | Volumes.Volumes | Agents.Agents | AgentFiles.AgentFiles | Downloads.Downloads
> = HttpApiBuilder.group(Api.Api, "clientFiles", (handlers) =>
  Effect.gen(function*() {
    const volumes = yield* Volumes.Volumes
    const agents = yield* Agents.Agents
    const files = yield* AgentFiles.AgentFiles
    const downloads = yield* Downloads.Downloads
    const maxFileBytes = yield* maxFileBytesOf
    return Errors.handlers(handlers)
      .handle("files", ({ urlParams }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          files.list(tenantId, agentId, {
            path: urlParams.path,
            glob: urlParams.glob,
            after: urlParams.after,
            limit: urlParams.limit ?? 50
          })))
      .handle("read", ({ path, request }) =>
        Effect.gen(function*() {
          const { agentId, tenantId } = yield* Auth.CurrentAgent
          const found = yield* files.locate(tenantId, agentId, `/${path["*"]}`, "read")
          return yield* serveFile(volumes, request, tenantId, found.volumeId, found.path)
        }))
      .handleRaw("write", ({ path, request }) =>
        Effect.gen(function*() {
          const { agentId, tenantId } = yield* Auth.CurrentAgent
          const found = yield* files.locate(tenantId, agentId, `/${path["*"]}`, "write")
          const file = yield* volumes.write(
            tenantId,
            found.volumeId,
            found.path,
            yield* bodyOf(request, maxFileBytes),
            {
              contentType: contentTypeOf(request),
              ifVersion: yield* ifMatch(request, undefined),
              by: "api"
            }
          )
          return yield* written(file, found.shown)
        }))
      .handle("link", ({ payload }) =>
        Effect.gen(function*() {
          const { agentId, tenantId } = yield* Auth.CurrentAgent
          const found = yield* files.locate(
            tenantId,
            agentId,
            payload.path,
            payload.method === "PUT" ? "write" : "read"
          )
          return yield* fileLink(
            downloads,
            yield* linkGrant(tenantId, found.volumeId, found.path, payload),
            found.shown
          )
        }))
      .handleRaw("upload", ({ path, request }) =>
        Effect.flatMap(
          Auth.CurrentAgent,
          ({ agentId, tenantId }) =>
            upload(agents, request, maxFileBytes, tenantId, agentId, path)
        ))
  }))

/** Signed links, of a presented file and of a file by path: no bearer token, the signature is what lets it in. */
export const layerDownloads: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "downloads">,
  never,
  Downloads.Downloads | Volumes.Volumes
> = HttpApiBuilder.group(Api.Api, "downloads", (handlers) =>
  Effect.gen(function*() {
    const downloads = yield* Downloads.Downloads
    const volumes = yield* Volumes.Volumes
    const maxFileBytes = yield* maxFileBytesOf
    return Errors.handlers(handlers)
      .handle("linkRead", ({ path, request, urlParams }) =>
        Effect.flatMap(
          downloads.openFileLink("GET", path.volumeId, urlParams),
          (grant) => serveFile(volumes, request, grant.tenantId, grant.volumeId, grant.path)
        ))
      .handleRaw("linkWrite", ({ path, request, urlParams }) =>
        Effect.gen(function*() {
          const grant = yield* downloads.openFileLink("PUT", path.volumeId, urlParams)
          const bytes = yield* bodyOf(request, Math.min(grant.maxBytes ?? maxFileBytes, maxFileBytes))
          const file = yield* volumes.write(grant.tenantId, grant.volumeId, grant.path, bytes, {
            contentType: grant.contentType ?? contentTypeOf(request),
            ifVersion: yield* ifMatch(request, undefined),
            by: "link"
          })
          return yield* written(file)
        }))
      .handle("download", ({ path, urlParams }) =>
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
