/**
 * Debian's Chromium, headless, driven by playwright-core, for the tests of
 * the pages the node serves (the agent page, the console): a fresh, empty
 * profile per browser, closed with the scope, with every URL asked for and
 * every error the pages threw or logged kept for the test to check.
 *
 * Without Chromium at /usr/bin/chromium the browser fails to start, saying
 * how to install it (.ci/run does so on a fresh machine).
 */
import { Effect, type Scope } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { type BrowserContext, chromium, type Locator, type Page } from "playwright-core"

export const executablePath = "/usr/bin/chromium"

/** As the machine notes start it: headless, no sandbox (root), nothing reaching out to the closed network. */
const flags = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

export interface Browser {
  readonly context: BrowserContext
  /** Every URL the browser asked for. */
  readonly urls: Array<string>
  /** Errors the pages threw or logged. */
  readonly errors: Array<string>
}

export const launch = (
  options: { readonly viewport?: { readonly width: number; readonly height: number } } = {}
): Effect.Effect<Browser, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const found = await Fs.access(executablePath).then(() => true, () => false)
      if (!found) {
        throw new Error(
          `Debian's Chromium is missing at ${executablePath}: install it with \`apt-get install -y chromium\` ` +
            "(.ci/run does so on a fresh machine)"
        )
      }
      const userDataDir = await Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-runtime-chromium-"))
      // playwright-core passes the profile as --user-data-dir itself.
      const context = await chromium.launchPersistentContext(userDataDir, {
        executablePath,
        headless: true,
        args: flags,
        viewport: { width: 900, height: 1100, ...options.viewport }
      })
      const urls: Array<string> = []
      const errors: Array<string> = []
      context.on("request", (request) => urls.push(request.url()))
      context.on("weberror", (error) => errors.push(error.error().message))
      context.on("console", (message) => {
        if (message.type() === "error") errors.push(`${message.text()} (${message.location().url})`)
      })
      return { context, urls, errors, userDataDir }
    }),
    ({ context, userDataDir }) =>
      Effect.promise(async () => {
        await context.close()
        await Fs.rm(userDataDir, { recursive: true, force: true })
      })
  )

/** A full-page screenshot saved as `name` in `directory`; its path. */
export const screenshot = (page: Page, directory: URL, name: string) =>
  Effect.promise(async () => {
    await Fs.mkdir(directory, { recursive: true })
    const path = new URL(name, directory).pathname
    await page.screenshot({ path, fullPage: true })
    return path
  })

/**
 * Every text `locator` showed, polled every 20 ms until it shows `final` (or 20 s pass): a reply that streams
 * in shows some of itself before all of it.
 */
export const textsSeen = (locator: Locator, final: string) =>
  Effect.gen(function*() {
    const seen = new Set<string>()
    const started = Date.now()
    while (Date.now() - started < 20_000) {
      const text = yield* Effect.promise(() => locator.textContent({ timeout: 1_000 }).catch(() => null))
      if (text !== null && text !== "") seen.add(text)
      if (text === final) break
      yield* Effect.sleep("20 millis")
    }
    return [...seen]
  })
