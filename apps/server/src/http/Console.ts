/**
 * The web console at `/console` (packages/console): every path under it
 * answers the app's page, which routes in the browser; `/console/assets/*`
 * answers the built files, whose names change with their content, so
 * browsers keep them for a year. The files are read on the first request, so
 * a node that serves no console pays nothing for it.
 *
 * The console uses the HTTP API with the session cookie, like any client; its
 * Content-Security-Policy is as strict as the agent page's: only its own
 * script, style and API, no framing.
 */
import { Assets } from "@agent-runtime/console"
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer, Option, Ref } from "effect"

const contentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join("; ")

const security = {
  "content-security-policy": contentSecurityPolicy,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "same-origin"
}

export const layer: Layer.Layer<never> = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    // Read once they are there: a node started before the build finished serves them when it has.
    const loaded = yield* Ref.make(Option.none<Assets.Assets>())
    const assets = Effect.flatMap(Ref.get(loaded), (known) =>
      Option.match(known, {
        onSome: Effect.succeed,
        onNone: () => Effect.tap(Assets.load, (read) => Ref.set(loaded, Option.some(read)))
      }))

    const page = assets.pipe(
      Effect.map(({ manifest }) =>
        HttpServerResponse.text(Assets.page(manifest), {
          contentType: "text/html; charset=utf-8",
          headers: { ...security, "cache-control": "no-cache" }
        })
      ),
      Effect.catchTag("AssetsMissing", (missing) =>
        Effect.succeed(HttpServerResponse.text(missing.message, { status: 503, headers: security })))
    )

    const asset = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const name = new URL(request.url, "http://x").pathname.slice(Assets.assetsPath.length + 1)
      const file = (yield* assets).files.get(name)
      if (file === undefined) {
        return HttpServerResponse.text("not found", { status: 404, headers: security })
      }
      const gzip = /\bgzip\b/.test(request.headers["accept-encoding"] ?? "")
      return HttpServerResponse.uint8Array(gzip ? file.gzipped : file.body, {
        contentType: file.contentType,
        headers: {
          ...security,
          "cache-control": "public, max-age=31536000, immutable",
          vary: "accept-encoding",
          ...(gzip ? { "content-encoding": "gzip" } : {})
        }
      })
    }).pipe(Effect.catchTag("AssetsMissing", () =>
      Effect.succeed(HttpServerResponse.empty({ status: 404 }))))

    yield* router.get(Assets.basePath, page)
    yield* router.get(`${Assets.assetsPath}/*`, asset)
    yield* router.get(`${Assets.basePath}/*`, page)
  })
)
