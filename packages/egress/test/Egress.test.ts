import { Egress, EgressError, Resolver } from "@agent-runtime/egress"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger, LogLevel } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Tls from "node:tls"
import * as Undici from "undici"

// Tests have no network, and no test may send traffic beyond loopback: every name resolves through the
// test resolver, public-looking answers are only ever checked, never connected to.
const publicAddress = "93.184.216.34"

const answers: Record<string, Resolver.Answer> = {
  "public.example": [publicAddress],
  "public-looking.example": ["127.0.0.1"],
  "mixed.example": [publicAddress, "10.0.0.5"],
  "mixed6.example": ["2606:2800:220:1:248:1893:25c8:1946", "fd00::1"],
  "metadata.example": ["169.254.169.254"],
  "mapped.example": ["::ffff:127.0.0.1"],
  "nat64.example": ["64:ff9b::a9fe:a9fe"]
}

const egressLayer = (allowPrivate: boolean, names: Record<string, Resolver.Answer> = answers) =>
  Egress.layer({ allowPrivate }).pipe(Layer.provide(Resolver.layerTest(names)))

const withEgress = <A, E>(
  allowPrivate: boolean,
  names: Record<string, Resolver.Answer>,
  f: (egress: Egress.Service) => Effect.Effect<A, E>
) => Effect.flatMap(Egress.Egress, f).pipe(Effect.provide(egressLayer(allowPrivate, names)))

/** What a promise rejected with; fails the test when it resolves. */
const rejection = (promise: () => Promise<unknown>) =>
  Effect.promise(() => promise().then(() => expect.fail("expected a rejection"), (error: unknown) => error))

interface Refused {
  readonly url: string
  readonly reason: EgressError.Reason
}

const refused: ReadonlyArray<Refused> = [
  // scheme, credentials, syntax
  { url: "http://public.example/", reason: "not_https" },
  { url: "ftp://public.example/", reason: "not_https" },
  { url: "file:///etc/passwd", reason: "not_https" },
  { url: "https://user:pass@example.com/", reason: "credentials_in_url" },
  { url: "https://token@public.example/", reason: "credentials_in_url" },
  { url: "not a url", reason: "invalid_url" },
  { url: "/v1/relative", reason: "invalid_url" },
  // IPv4 loopback in every notation (WHATWG URL parsing normalizes them to 127.0.0.1)
  { url: "https://127.0.0.1/", reason: "private_address" },
  { url: "https://127.1/", reason: "private_address" },
  { url: "https://2130706433/", reason: "private_address" },
  { url: "https://0x7f000001/", reason: "private_address" },
  { url: "https://0x7f.1/", reason: "private_address" },
  { url: "https://0177.0.0.1/", reason: "private_address" },
  { url: "https://017700000001/", reason: "private_address" },
  { url: "https://%31%32%37.0.0.1/", reason: "private_address" },
  { url: "https://１２７.０.０.１/", reason: "private_address" },
  { url: "https://127.0.0.1./", reason: "private_address" },
  { url: "https://127.0.0.1:8443/", reason: "private_address" },
  // other IPv4 special ranges
  { url: "https://0.0.0.0/", reason: "private_address" },
  { url: "https://0/", reason: "private_address" },
  { url: "https://10.0.0.1/", reason: "private_address" },
  { url: "https://172.16.0.1/", reason: "private_address" },
  { url: "https://172.31.255.254/", reason: "private_address" },
  { url: "https://192.168.1.1/", reason: "private_address" },
  { url: "https://100.64.0.1/", reason: "private_address" },
  { url: "https://169.254.169.254/latest/meta-data/", reason: "private_address" },
  { url: "https://224.0.0.1/", reason: "private_address" },
  { url: "https://255.255.255.255/", reason: "private_address" },
  { url: "https://192.0.2.1/", reason: "private_address" },
  { url: "https://198.18.0.1/", reason: "private_address" },
  { url: "https://240.0.0.1/", reason: "private_address" },
  // IPv6 special ranges
  { url: "https://[::1]/", reason: "private_address" },
  { url: "https://[::]/", reason: "private_address" },
  { url: "https://[fe80::1]/", reason: "private_address" },
  { url: "https://[fc00::1]/", reason: "private_address" },
  { url: "https://[fd12::1]/", reason: "private_address" },
  { url: "https://[fec0::1]/", reason: "private_address" },
  { url: "https://[ff02::1]/", reason: "private_address" },
  { url: "https://[2001:db8::1]/", reason: "private_address" },
  { url: "https://[100::1]/", reason: "private_address" },
  { url: "https://[4000::1]/", reason: "private_address" },
  // IPv4 inside IPv6: mapped, compatible, NAT64, 6to4, Teredo
  { url: "https://[::ffff:127.0.0.1]/", reason: "private_address" },
  { url: "https://[::ffff:7f00:1]/", reason: "private_address" },
  { url: "https://[::ffff:10.0.0.1]/", reason: "private_address" },
  { url: "https://[::ffff:169.254.169.254]/", reason: "private_address" },
  { url: "https://[::ffff:0:7f00:1]/", reason: "private_address" },
  { url: "https://[::7f00:1]/", reason: "private_address" },
  { url: "https://[64:ff9b::7f00:1]/", reason: "private_address" },
  { url: "https://[64:ff9b::a00:1]/", reason: "private_address" },
  { url: "https://[64:ff9b:1::5db8:d822]/", reason: "private_address" },
  { url: "https://[2002:7f00:1::]/", reason: "private_address" },
  { url: "https://[2002:a9fe:a9fe::1]/", reason: "private_address" },
  { url: "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", reason: "private_address" },
  // names
  { url: "https://localhost/", reason: "private_address" },
  { url: "https://LOCALHOST./", reason: "private_address" },
  { url: "https://api.localhost/", reason: "private_address" },
  { url: "https://public-looking.example/", reason: "private_address" },
  { url: "https://mixed.example/", reason: "private_address" },
  { url: "https://mixed6.example/", reason: "private_address" },
  { url: "https://metadata.example/", reason: "private_address" },
  { url: "https://mapped.example/", reason: "private_address" },
  { url: "https://nat64.example/", reason: "private_address" },
  { url: "https://unknown.example/", reason: "resolution_failed" }
]

describe("refused URLs", () => {
  it("lists at least 30 distinct cases", () => {
    expect(new Set(refused.map((entry) => entry.url)).size).toBe(refused.length)
    expect(refused.length).toBeGreaterThanOrEqual(30)
  })

  for (const { reason, url } of refused) {
    it.effect(`check refuses ${url} (${reason})`, () =>
      withEgress(false, answers, (egress) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(egress.check(url))
          expect(error).toBeInstanceOf(EgressError.EgressError)
          expect(error.reason).toBe(reason)
          expect(error.message).toContain(`(${reason})`)
        })))

    it.live(`fetch, fetchFunction, requestFunction and the bare dispatcher refuse ${url} (${reason})`, () =>
      withEgress(false, answers, (egress) =>
        Effect.gen(function*() {
          expect((yield* Effect.flip(egress.fetch(url))).reason).toBe(reason)
          const thrown = yield* rejection(() => egress.fetchFunction(url))
          expect(thrown).toBeInstanceOf(EgressError.EgressError)
          expect((thrown as EgressError.EgressError).reason).toBe(reason)
          const sent = yield* rejection(() => egress.requestFunction(url, { method: "POST", headers: {}, body: "{}" }))
          expect(sent).toBeInstanceOf(EgressError.EgressError)
          expect((sent as EgressError.EgressError).reason).toBe(reason)
          // Without the URL check in front, the connect hook alone still refuses before any socket opens.
          if (/^https?:/.test(url) && reason !== "credentials_in_url") {
            const fromHook = yield* rejection(() => Undici.request(url, { dispatcher: egress.dispatcher }))
            expect(fromHook).toBeInstanceOf(EgressError.EgressError)
            expect((fromHook as EgressError.EgressError).reason).toBe(reason)
          }
        })))
  }
})

describe("check", () => {
  it.effect("passes public names and addresses, returning the parsed URL", () =>
    withEgress(false, answers, (egress) =>
      Effect.gen(function*() {
        const url = yield* egress.check("https://public.example/v1/chat?model=x")
        expect(url.hostname).toBe("public.example")
        expect(url.search).toBe("?model=x")
        expect((yield* egress.check("https://8.8.8.8/")).hostname).toBe("8.8.8.8")
        expect((yield* egress.check("https://[2606:4700:4700::1111]/")).hostname).toBe("[2606:4700:4700::1111]")
        // NAT64 and 6to4 forms of a public IPv4 address are public.
        expect((yield* egress.check("https://[64:ff9b::5db8:d822]/")).protocol).toBe("https:")
        expect((yield* egress.check("https://[2002:5db8:d822::1]/")).protocol).toBe("https:")
        expect(egress.allowPrivate).toBe(false)
      })))

  it.effect("never puts the query string or credentials in the message", () =>
    withEgress(false, answers, (egress) =>
      Effect.gen(function*() {
        const withCredentials = yield* Effect.flip(egress.check("https://alice:s3cret@public.example/?key=sk-live-1"))
        expect(withCredentials.message).toContain("public.example")
        expect(withCredentials.message).not.toMatch(/alice|s3cret|sk-live-1/)
        const privateOne = yield* Effect.flip(egress.check("https://169.254.169.254/?token=sk-live-2#frag"))
        expect(privateOne.message).toBe(
          "outbound request to 169.254.169.254 refused: 169.254.169.254 is not a public address: linkLocal (private_address)"
        )
        const invalid = yield* Effect.flip(egress.check("https//sk-live-3"))
        expect(invalid.message).not.toContain("sk-live-3")
      })))

  it.effect("with allowPrivate, http and private addresses pass, credentials and other schemes do not", () =>
    withEgress(true, { ...answers, localhost: ["127.0.0.1"] }, (egress) =>
      Effect.gen(function*() {
        expect(egress.allowPrivate).toBe(true)
        expect((yield* egress.check("http://127.0.0.1:11434/v1")).port).toBe("11434")
        expect((yield* egress.check("http://[::1]:8080/")).hostname).toBe("[::1]")
        expect((yield* egress.check("http://localhost:8080/")).hostname).toBe("localhost")
        expect((yield* egress.check("https://public-looking.example/")).hostname).toBe("public-looking.example")
        expect((yield* Effect.flip(egress.check("http://user:pass@127.0.0.1/"))).reason).toBe("credentials_in_url")
        expect((yield* Effect.flip(egress.check("ftp://127.0.0.1/"))).reason).toBe("not_https")
      })))
})

describe("DNS rebinding", () => {
  it.live("a name that resolves public at save time and private at call time is refused at call time", () => {
    let lookups = 0
    const rebinding = { "rebind.example": () => lookups++ === 0 ? [publicAddress] : ["10.0.0.1"] }
    return withEgress(false, rebinding, (egress) =>
      Effect.gen(function*() {
        expect((yield* egress.check("https://rebind.example/")).hostname).toBe("rebind.example")
        const error = yield* Effect.flip(egress.fetch("https://rebind.example/"))
        expect(error.reason).toBe("private_address")
        expect(error.message).toContain("10.0.0.1")
      }))
  })

  it.live("the connect hook checks its own answer: a change after the call's check is refused too", () => {
    // Public for the save-time check and for fetch's own check, private when the hook resolves to connect.
    let lookups = 0
    const late = { "late.example": () => lookups++ < 2 ? [publicAddress] : ["127.0.0.1"] }
    return withEgress(false, late, (egress) =>
      Effect.gen(function*() {
        yield* egress.check("https://late.example/")
        const error = yield* Effect.flip(egress.fetch("https://late.example/"))
        expect(error.reason).toBe("private_address")
        expect(error.message).toContain("127.0.0.1")
        expect(lookups).toBe(3)
      }))
  })
})

interface Seen {
  readonly method: string
  readonly url: string
  readonly host: string | undefined
  readonly body: string
}

/** A node:http server on loopback recording what reaches it. `/redirect` answers 302 to `/`. */
const localServer = Effect.acquireRelease(
  Effect.async<{ readonly server: Http.Server; readonly port: number; readonly seen: Array<Seen> }>((resume) => {
    const seen: Array<Seen> = []
    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        seen.push({
          method: request.method ?? "",
          url: request.url ?? "",
          host: request.headers.host,
          body: Buffer.concat(chunks).toString()
        })
        if (request.url === "/redirect") {
          response.writeHead(302, { location: "/" }).end()
        } else {
          response.writeHead(200, { "content-type": "text/plain" }).end("hello from loopback")
        }
      })
    })
    server.listen(
      0,
      "127.0.0.1",
      () => resume(Effect.succeed({ server, port: (server.address() as AddressInfo).port, seen }))
    )
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
)

describe("calls with allowPrivate (loopback only)", () => {
  it.scopedLive("fetch reaches a local server", () =>
    Effect.gen(function*() {
      const { port, seen } = yield* localServer
      yield* withEgress(true, {}, (egress) =>
        Effect.gen(function*() {
          const url = yield* egress.check(`http://127.0.0.1:${port}/v1/models`)
          const response = yield* egress.fetch(url)
          expect(response.status).toBe(200)
          expect(yield* Effect.promise(() => response.text())).toBe("hello from loopback")
        }))
      expect(seen).toEqual([{ method: "GET", url: "/v1/models", host: `127.0.0.1:${port}`, body: "" }])
    }))

  it.scopedLive("a 302 is returned as is, never followed", () =>
    Effect.gen(function*() {
      const { port, seen } = yield* localServer
      yield* withEgress(true, {}, (egress) =>
        Effect.gen(function*() {
          const response = yield* egress.fetch(`http://127.0.0.1:${port}/redirect`)
          expect(response.status).toBe(302)
          expect(response.headers.get("location")).toBe("/")
          // Even when the caller asks to follow.
          const asked = yield* Effect.promise(() =>
            egress.fetchFunction(`http://127.0.0.1:${port}/redirect`, { redirect: "follow" })
          )
          expect(asked.status).toBe(302)
          const sent = yield* Effect.promise(() =>
            egress.requestFunction(`http://127.0.0.1:${port}/redirect`, { method: "GET", headers: {} })
          )
          expect(sent.statusCode).toBe(302)
          yield* Effect.promise(() => sent.body.dump())
        }))
      expect(seen.map((request) => request.url)).toEqual(["/redirect", "/redirect", "/redirect"])
    }))

  it.scopedLive("the connect hook connects to the address it checked; the Host header keeps the name", () =>
    Effect.gen(function*() {
      const { port, seen } = yield* localServer
      // `.test` names never resolve through the operating system: reaching the server proves the socket went
      // to the test resolver's answer, with no second lookup anywhere else.
      let lookups = 0
      const pinned = { "pinned.test": () => (lookups++, ["127.0.0.1"]) }
      yield* withEgress(true, pinned, (egress) =>
        Effect.gen(function*() {
          const response = yield* egress.fetch(`http://pinned.test:${port}/pinned?x=1`)
          expect(response.status).toBe(200)
          yield* Effect.promise(() => response.text())
          expect(lookups).toBe(2) // the check, then the connect hook
        }))
      // requestFunction the same way, with a dispatcher of its own (no connection kept from the fetch).
      lookups = 0
      yield* withEgress(true, pinned, (egress) =>
        Effect.gen(function*() {
          const answer = yield* Effect.promise(() =>
            egress.requestFunction(`http://pinned.test:${port}/v1/chat/completions`, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ model: "m" })
            })
          )
          expect(answer.statusCode).toBe(200)
          expect(yield* Effect.promise(() => answer.body.text())).toBe("hello from loopback")
          expect(lookups).toBe(2)
        }))
      expect(seen).toEqual([
        { method: "GET", url: "/pinned?x=1", host: `pinned.test:${port}`, body: "" },
        { method: "POST", url: "/v1/chat/completions", host: `pinned.test:${port}`, body: '{"model":"m"}' }
      ])
    }))

  it.scopedLive("fetchFunction serves SDK clients: global Request and Headers, bodies, the same pinning", () =>
    Effect.gen(function*() {
      const { port, seen } = yield* localServer
      const pinned = { "pinned.test": ["127.0.0.1"] }
      yield* withEgress(true, pinned, (egress) =>
        Effect.gen(function*() {
          const fetch: typeof globalThis.fetch = egress.fetchFunction
          const posted = yield* Effect.promise(() =>
            fetch(`http://pinned.test:${port}/v1/chat`, {
              method: "POST",
              headers: new Headers({ "content-type": "application/json" }),
              body: JSON.stringify({ model: "m" })
            })
          )
          expect(posted.status).toBe(200)
          expect(yield* Effect.promise(() => posted.text())).toBe("hello from loopback")
          const request = new Request(`http://pinned.test:${port}/v1/request`, {
            method: "PUT",
            body: "from a Request"
          })
          const put = yield* Effect.promise(() => fetch(request))
          expect(put.status).toBe(200)
          yield* Effect.promise(() => put.text())
        }))
      expect(seen).toEqual([
        { method: "POST", url: "/v1/chat", host: `pinned.test:${port}`, body: '{"model":"m"}' },
        { method: "PUT", url: "/v1/request", host: `pinned.test:${port}`, body: "from a Request" }
      ])
    }))

  it.scopedLive("TLS keeps the name for SNI while the socket goes to the checked address", () =>
    Effect.gen(function*() {
      // A TLS listener without a certificate: it records the ClientHello's server name, then ends the handshake.
      const servernames: Array<string> = []
      const listener = yield* Effect.acquireRelease(
        Effect.async<Tls.Server>((resume) => {
          const server = Tls.createServer({
            SNICallback: (servername, callback) => {
              servernames.push(servername)
              callback(new Error("no certificate here"), undefined)
            }
          })
          server.on("tlsClientError", () => {})
          server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
        }),
        (server) =>
          Effect.async<void>((resume) => {
            server.close(() => resume(Effect.void))
          })
      )
      const port = (listener.address() as AddressInfo).port
      const error = yield* withEgress(
        true,
        { "sni.test": ["127.0.0.1"] },
        (egress) => Effect.flip(egress.fetch(`https://sni.test:${port}/`))
      )
      expect(error.reason).toBe("connect_failed")
      expect(servernames).toEqual(["sni.test"])
    }))

  it.live("a refused connection is connect_failed, naming only the host and the code", () =>
    Effect.gen(function*() {
      const server = Http.createServer()
      const port = yield* Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      })
      yield* Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
      })
      const error = yield* withEgress(true, {}, (egress) =>
        Effect.flip(egress.fetch(`http://127.0.0.1:${port}/?key=sk-live-4`)))
      expect(error.reason).toBe("connect_failed")
      expect(error.message).toBe(`outbound request to 127.0.0.1:${port} failed: ECONNREFUSED (connect_failed)`)
    }))
})

describe("layerConfig", () => {
  const build = (env: ReadonlyArray<[string, string]>) =>
    Effect.gen(function*() {
      const warnings: Array<unknown> = []
      const logger = Logger.make(({ logLevel, message }) => {
        if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) warnings.push(message)
      })
      const allowPrivate = yield* Effect.map(Egress.Egress, (egress) => egress.allowPrivate).pipe(
        Effect.provide(Egress.layerConfig.pipe(Layer.provide(Resolver.layerTest({})))),
        Effect.provide(Logger.add(logger)),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map(env)))
      )
      return { allowPrivate, warnings: warnings.map(String) }
    })

  it.effect("ALLOW_PRIVATE_URLS defaults to false, quietly", () =>
    Effect.gen(function*() {
      expect(yield* build([])).toEqual({ allowPrivate: false, warnings: [] })
    }))

  it.effect("ALLOW_PRIVATE_URLS=true lifts the rule and warns at start", () =>
    Effect.gen(function*() {
      const { allowPrivate, warnings } = yield* build([["ALLOW_PRIVATE_URLS", "true"]])
      expect(allowPrivate).toBe(true)
      expect(warnings).toHaveLength(1)
      expect(warnings[0]).toContain("ALLOW_PRIVATE_URLS=true")
    }))
})
