/**
 * The agent page: a small static page (`apps/server/static/agent.*`, plain
 * HTML, one ES module and a style sheet, no build step) that shows one
 * agent's events live and lets a person answer its pending inputs. Served at
 * `GET /agent` beside the API, outside the OpenAPI document (like `/docs`).
 *
 * The page holds no credential until it is given one: a browser token and
 * where to send answers arrive by `postMessage` from the page embedding it,
 * or are pasted into its form; never in its URL. It reads the agent with the
 * browser token and posts answers to the application, whose server forwards
 * them with its API key (docs/browser-page.md).
 *
 * Its Content-Security-Policy lets it run only its own script and style and
 * connect anywhere (the runtime and the application are named at run time);
 * any origin may frame it.
 */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, type Layer } from "effect"
import * as Fs from "node:fs/promises"

/** Where the page is served. */
export const path = "/agent"

const contentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src *",
  "base-uri 'none'",
  "form-action 'none'"
].join("; ")

const headers = {
  "content-security-policy": contentSecurityPolicy,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache"
}

const files = [
  { route: path, file: "agent.html", contentType: "text/html; charset=utf-8" },
  { route: `${path}.js`, file: "agent.js", contentType: "text/javascript; charset=utf-8" },
  { route: `${path}.css`, file: "agent.css", contentType: "text/css; charset=utf-8" }
] as const

const read = (file: string) =>
  Effect.promise(() => Fs.readFile(new URL(`../../static/${file}`, import.meta.url), "utf8"))

/** The page's three routes, read once when the node starts. */
export const layer: Layer.Layer<never> = HttpApiBuilder.Router.use((router) =>
  Effect.forEach(
    files,
    ({ contentType, file, route }) =>
      Effect.flatMap(read(file), (body) =>
        router.get(route, Effect.succeed(HttpServerResponse.text(body, { contentType, headers })))),
    { discard: true }
  )
)
