/**
 * People signing in with GitHub (here a GitHub Enterprise Server faked on
 * loopback, as `SIGN_IN_ISSUER` names one): the sign-in page's button, the
 * provider's approval, the session that acts as the tenant whose login is
 * the person's; a person no tenant belongs to is told so and gets no
 * session; a callback not begun here is refused.
 */
import { FakeGitHub, Http, TestBrowser, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

let github: FakeGitHub.FakeGitHub

const world = TestWorld.layer(() =>
  Effect.map(FakeGitHub.start({ login: "octocat", name: "The Octocat" }), (fake) => {
    github = fake
    return {
      SIGN_IN_PROVIDER: "github",
      SIGN_IN_ISSUER: fake.url,
      SIGN_IN_CLIENT_ID: FakeGitHub.clientId,
      SIGN_IN_CLIENT_SECRET: FakeGitHub.clientSecret
    }
  })
)

const unescapeHtml = (text: string) => text.replace(/&amp;/g, "&")

layer(world, { timeout: 120_000, excludeTestServices: true })("signing in with GitHub", (it) => {
  it.scoped("a person signs in with GitHub and acts as the tenant of their login", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const rest = world.node.rest
      yield* TestWorld.tenantWithModel(world, "octo's", { login: "OctoCat" })
      const browser = TestBrowser.make()
      const page = yield* Effect.promise(() => browser.open(`${rest}/sign-in`))
      expect(page.headers.get("content-security-policy")).toContain("default-src 'none'")
      const start = unescapeHtml(/href="([^"]*\/sign-in\/start[^"]*)"/.exec(page.body)![1]!)
      expect(page.body).toContain("Sign in with GitHub")
      const signedIn = yield* Effect.promise(() => browser.open(new URL(start, rest).href))
      expect(signedIn.body).toContain("You are signed in as octocat to octo&#39;s")
      const cookie = `ar_session=${browser.cookies("127.0.0.1", "/v1/me").get("ar_session")}`
      const me = yield* Http.client(rest).get("/v1/me", { headers: { cookie } })
      expect(me.body).toMatchObject({ via: "console", login: "octocat", name: "The Octocat" })

      // Someone no tenant belongs to: told so, no session.
      github.user.login = "stranger"
      const other = TestBrowser.make()
      const refused = yield* Effect.promise(() => other.open(new URL(start, rest).href))
      expect(refused.body).toContain("no account belongs to stranger")
      expect(other.cookies("127.0.0.1").has("ar_session")).toBe(false)

      // A callback this node did not start (no sealed attempt): refused.
      const forged = yield* Effect.promise(() => TestBrowser.make().open(`${rest}/sign-in/callback?code=x&state=y`))
      expect(forged.body).toContain("the sign-in was not started here")
    }))
})
