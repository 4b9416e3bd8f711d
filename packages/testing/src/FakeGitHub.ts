/**
 * A fake GitHub for tests of signing in with GitHub: on 127.0.0.1, the part
 * of GitHub's OAuth apps and API the runtime uses, as an Enterprise Server
 * lays it out (`/login/oauth/authorize`, `/login/oauth/access_token`,
 * `/api/v3/user`). Its one user approves at once; it checks the client's
 * secret, the redirect URI and the PKCE verifier (S256), and a code works
 * once.
 */
import { Effect, type Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import * as Loopback from "./internal/loopback.ts"

export const clientId = "Iv1.fakegithubclient"
export const clientSecret = "fake-github-client-secret-0123456789"

export interface FakeGitHub {
  readonly url: string
  /** The user who approves: their login and name. */
  readonly user: { login: string; name: string }
}

const body = (request: Http.IncomingMessage) =>
  new Promise<string>((resolve) => {
    let text = ""
    request.on("data", (chunk: Buffer) => text += chunk.toString())
    request.on("end", () => resolve(text))
  })

export const start = (user: { readonly login: string; readonly name: string }): Effect.Effect<
  FakeGitHub,
  never,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const codes = new Map<string, { readonly redirectUri: string; readonly challenge: string }>()
    const tokens = new Set<string>()
    const current = { ...user }
    const server = Http.createServer(async (request, response) => {
      const url = new URL(request.url!, "http://x")
      const json = (status: number, value: unknown) =>
        response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value))
      if (request.method === "GET" && url.pathname === "/login/oauth/authorize") {
        const redirectUri = url.searchParams.get("redirect_uri")!
        if (
          url.searchParams.get("client_id") !== clientId || url.searchParams.get("code_challenge_method") !== "S256"
        ) {
          return json(400, { error: "bad_request" })
        }
        const code = Crypto.randomBytes(16).toString("hex")
        codes.set(code, { redirectUri, challenge: url.searchParams.get("code_challenge")! })
        const back = new URL(redirectUri)
        back.searchParams.set("code", code)
        back.searchParams.set("state", url.searchParams.get("state")!)
        return response.writeHead(302, { location: back.href }).end()
      }
      if (request.method === "POST" && url.pathname === "/login/oauth/access_token") {
        const form = new URLSearchParams(await body(request))
        const basic = request.headers.authorization?.startsWith("Basic ")
          ? Buffer.from(request.headers.authorization.slice(6), "base64").toString().split(":").map(decodeURIComponent)
          : [form.get("client_id"), form.get("client_secret")]
        const issued = codes.get(form.get("code") ?? "")
        codes.delete(form.get("code") ?? "")
        const verifier = form.get("code_verifier") ?? ""
        if (
          basic[0] !== clientId || basic[1] !== clientSecret || issued === undefined ||
          issued.redirectUri !== form.get("redirect_uri") ||
          Crypto.createHash("sha256").update(verifier).digest("base64url") !== issued.challenge
        ) return json(200, { error: "bad_verification_code" })
        const token = `gho_${Crypto.randomBytes(16).toString("hex")}`
        tokens.add(token)
        return json(200, { access_token: token, token_type: "bearer", scope: "read:user,user:email" })
      }
      if (request.method === "GET" && url.pathname === "/api/v3/user") {
        const token = /^Bearer (.+)$/i.exec(request.headers.authorization ?? "")?.[1]
        if (token === undefined || !tokens.has(token)) return json(401, { message: "Bad credentials" })
        return json(200, { login: current.login, name: current.name, id: 1 })
      }
      json(404, { message: "Not Found" })
    })
    return { url: yield* Loopback.listen(server), user: current }
  })
