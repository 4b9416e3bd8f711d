/**
 * The model layer through the REST API: catalog, keys (tenant, admin,
 * platform), custom providers, key scopes, the egress rules at save time,
 * and secrets that never come back out.
 */
import { FakeUpstream, Http, TestDatabase, TestNode, TestWorld } from "@agent-runtime/testing"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"

const WorldLive = TestWorld.layer((upstream) =>
  Effect.gen(function*() {
    const dir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "catalog-")))
    const catalogFile = Path.join(dir, "catalog.json")
    yield* Effect.promise(() =>
      Fs.writeFile(
        catalogFile,
        JSON.stringify({
          models: {
            // A provider of the catalog file's own, served by the fake upstream.
            "acme/model-1": {
              name: "Acme One",
              api: "openai-completions",
              baseUrl: `${upstream.url}/v1`,
              contextWindow: 32000,
              maxTokens: 4096,
              cost: { input: 1, output: 2, cacheRead: 0.1, cacheWrite: 0 }
            },
            // Prices go stale: the file overrides the built-in ones.
            "anthropic/claude-sonnet-4-5": { cost: { input: 9, output: 99, cacheRead: 0.9, cacheWrite: 9.9 } }
          }
        })
      )
    )
    return { MODEL_CATALOG_FILE: catalogFile, DEFAULT_MODELS: "anthropic/claude-sonnet-4-5,acme/model-1" }
  })
)

const tenant = (node: TestNode.TestNode, name: string) =>
  Effect.map(
    Http.client(node.rest).post("/v1/admin/tenants", { token: node.operatorToken, json: { name } }),
    (response) => response.body as { id: string; token: string }
  )

const customProvider = (upstream: FakeUpstream.FakeUpstream, extra: Record<string, unknown> = {}) => ({
  type: "openai-completions",
  baseUrl: `${upstream.url}/v1`,
  apiKey: "sk-custom-secret-1111",
  headers: { "x-team-secret": "hdr-secret-2222" },
  models: [{ id: "m1", contextWindow: 10000 }],
  ...extra
})

layer(WorldLive, { excludeTestServices: true })("model layer over REST", (it) => {
  it.effect("the catalog lists built-in, overridden and file models with availability per tenant", () =>
    Effect.gen(function*() {
      const { node } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const acme = yield* tenant(node, "catalog")
      const before = (yield* api.get("/v1/models", { token: acme.token })).body
      expect(before.next).toBeNull()
      const byId = new Map<string, any>(before.data.map((model: any) => [model.id, model]))
      expect(byId.get("acme/model-1")).toEqual({
        id: "acme/model-1",
        provider: "acme",
        modelId: "model-1",
        name: "Acme One",
        api: "openai-completions",
        reasoning: false,
        input: ["text"],
        contextWindow: 32000,
        maxTokens: 4096,
        cost: { input: 1, output: 2, cacheRead: 0.1, cacheWrite: 0 },
        available: false
      })
      expect(byId.get("anthropic/claude-sonnet-4-5")).toMatchObject({
        cost: { input: 9, output: 99, cacheRead: 0.9, cacheWrite: 9.9 },
        available: false
      })
      // Subscription-only providers are not offered to a multi-tenant server.
      expect([...byId.keys()].some((id) => id.startsWith("openai-codex/") || id.startsWith("github-copilot/"))).toBe(
        false
      )
      expect((yield* api.get("/v1/me", { token: acme.token })).body.defaultModel).toBe("anthropic/claude-sonnet-4-5")

      const set = yield* api.put("/v1/keys/acme", {
        token: acme.token,
        json: { apiKey: "sk-acme-3333", verify: false }
      })
      expect(set).toMatchObject({
        status: 200,
        body: { provider: "acme", last4: "3333", verification: { status: "unverified" } }
      })
      const after = (yield* api.get("/v1/models", { token: acme.token })).body.data
      expect(after.find((model: any) => model.id === "acme/model-1").available).toBe(true)
      // The first runtime default the tenant has a key for.
      expect((yield* api.get("/v1/me", { token: acme.token })).body.defaultModel).toBe("acme/model-1")
      const providers = (yield* api.get("/v1/providers", { token: acme.token })).body
      expect(providers.find((provider: any) => provider.id === "acme")).toMatchObject({
        kind: "model",
        models: 1,
        key: { provider: "acme", source: "tenant", last4: "3333" }
      })
      expect(providers.find((provider: any) => provider.id === "exa")).toMatchObject({ kind: "search", key: null })
      expect(providers.find((provider: any) => provider.id === "browserless")).toMatchObject({ kind: "fetch" })
      const search = yield* api.put("/v1/keys/exa", { token: acme.token, json: { apiKey: "exa-key-1515" } })
      expect(search.body).toEqual({
        provider: "exa",
        last4: "1515",
        verification: { status: "unverified", detail: "not checked" }
      })
      expect((yield* api.get("/v1/providers/exa", { token: acme.token })).body.key).toMatchObject({
        source: "tenant",
        last4: "1515"
      })
    }))

  it.effect("keys are verified with the provider, and only good ones are kept", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const acme = yield* tenant(node, "verify")
      const valid = yield* api.put("/v1/keys/acme", { token: acme.token, json: { apiKey: "sk-good-4444" } })
      expect(valid.body).toEqual({ provider: "acme", last4: "4444", verification: { status: "valid" } })
      const check = upstream.requests().filter((request) => request.protocol === "models").at(-1)!
      expect(check.headers.authorization).toBe("Bearer sk-good-4444")

      const invalid = yield* api.put("/v1/keys/acme", { token: acme.token, json: { apiKey: "sk-invalid-5555" } })
      expect(invalid.body).toMatchObject({ provider: "acme", last4: "5555", verification: { status: "invalid" } })
      const status = (yield* api.get("/v1/providers/acme", { token: acme.token })).body
      expect(status.key).toMatchObject({ last4: "4444" })

      expect(yield* api.put("/v1/keys/nowhere", { token: acme.token, json: { apiKey: "k", verify: false } }))
        .toMatchObject({ status: 404, body: { code: "NOT_FOUND", error: "no provider nowhere" } })
      const spaced = yield* api.put("/v1/keys/acme", { token: acme.token, json: { apiKey: "a b" } })
      expect(spaced.status).toBe(400)
      expect(spaced.body.error).toContain("apiKey")
      expect((yield* api.put("/v1/keys/acme", { token: acme.token, json: { apiKey: "x".repeat(4097) } })).status)
        .toBe(400)
      expect(yield* api.delete("/v1/keys/acme", { token: acme.token })).toMatchObject({
        status: 200,
        body: { id: "acme", deleted: true }
      })
      expect((yield* api.delete("/v1/keys/acme", { token: acme.token })).status).toBe(404)
    }))

  it.effect("operator keys are admin, platform keys reach every tenant, and a tenant's own key wins", () =>
    Effect.gen(function*() {
      const { node } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const a = yield* tenant(node, "admin-a")
      const b = yield* tenant(node, "admin-b")
      const asA = { token: node.operatorToken, headers: { "x-agent-runtime-tenant": a.id } }
      yield* api.put("/v1/keys/acme", { ...asA, json: { apiKey: "sk-admin-6666", verify: false } })
      const keyOf = (token: string, headers?: Record<string, string>) =>
        Effect.map(
          api.get("/v1/providers/acme", { token, ...(headers ? { headers } : {}) }),
          (response) => response.body.key
        )
      expect(yield* keyOf(a.token)).toMatchObject({ source: "admin", last4: "6666" })
      expect(yield* keyOf(b.token)).toBeNull()

      expect(
        yield* api.put("/v1/admin/platform-keys/acme", { token: a.token, json: { apiKey: "sk-p-7777", verify: false } })
      ).toMatchObject({ status: 403 })
      const platform = yield* api.put("/v1/admin/platform-keys/acme", {
        token: node.operatorToken,
        json: { apiKey: "sk-platform-7777", verify: false }
      })
      expect(platform.body).toMatchObject({ provider: "acme", last4: "7777" })
      expect(yield* keyOf(b.token)).toMatchObject({ source: "platform", last4: "7777" })
      expect(yield* keyOf(a.token)).toMatchObject({ source: "admin", last4: "6666" })
      yield* api.delete("/v1/admin/platform-keys/acme", { token: node.operatorToken })
      expect(yield* keyOf(b.token)).toBeNull()
    }))

  it.effect("custom providers keep or remove their key and headers as the input says", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const t = yield* tenant(node, "custom")
      const created = yield* api.put("/v1/providers/local", { token: t.token, json: customProvider(upstream) })
      expect(created.status).toBe(200)
      expect(created.body).toEqual({
        id: "local",
        kind: "model",
        models: 1,
        apiKey: true,
        key: { provider: "local", source: "tenant", last4: "1111", setAt: created.body.key.setAt },
        custom: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          auth: "bearer",
          headers: ["x-team-secret"],
          models: [{ id: "m1", contextWindow: 10000 }]
        }
      })
      const models = (yield* api.get("/v1/models", { token: t.token })).body.data
      expect(models.find((model: any) => model.id === "local/m1")).toMatchObject({
        provider: "local",
        maxTokens: 5000,
        input: ["text"],
        cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
        available: true
      })
      // Omitted apiKey and headers keep what is stored.
      const { apiKey: _key, headers: _headers, ...rest } = customProvider(upstream)
      const kept = yield* api.put("/v1/providers/local", { token: t.token, json: rest })
      expect(kept.body.key.last4).toBe("1111")
      expect(kept.body.custom.headers).toEqual(["x-team-secret"])
      // null removes them.
      const removed = yield* api.put("/v1/providers/local", {
        token: t.token,
        json: { ...rest, apiKey: null, headers: null }
      })
      expect(removed.body.key).toBeNull()
      expect(removed.body.custom.headers).toEqual([])
      // The messages type: auth bearer is kept only while given.
      const messages = { ...rest, type: "anthropic-messages", baseUrl: upstream.url }
      expect(
        (yield* api.put("/v1/providers/local", { token: t.token, json: { ...messages, auth: "bearer" } })).body.custom
          .auth
      )
        .toBe("bearer")
      expect((yield* api.put("/v1/providers/local", { token: t.token, json: messages })).body.custom.auth).toBe(
        "x-api-key"
      )

      const refused = [
        [{ ...rest, models: [] }, "models"],
        [{ ...rest, models: Array.from({ length: 201 }, (_, i) => ({ id: `m${i}`, contextWindow: 1000 })) }, "models"],
        [{ ...rest, type: "gemini" }, "type"],
        [{ ...rest, models: [{ id: "a", contextWindow: 0 }] }, "contextWindow"]
      ] as const
      for (const [body, field] of refused) {
        const response = yield* api.put("/v1/providers/other", { token: t.token, json: body })
        expect(response.status).toBe(400)
        expect(response.body.error).toContain(field)
      }
      expect((yield* api.put("/v1/providers/openai", { token: t.token, json: rest })).body).toEqual({
        error: "invalid request: name: openai is a built-in provider",
        code: "INVALID_REQUEST"
      })
      expect((yield* api.get("/v1/providers/other", { token: t.token })).status).toBe(404)
      expect((yield* api.delete("/v1/providers/local", { token: t.token })).body).toEqual({
        id: "local",
        deleted: true
      })
      expect((yield* api.get("/v1/providers/local", { token: t.token })).status).toBe(404)
    }))

  it.effect("a custom provider changed or removed on a node reaches that node's next model call at once", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const t = yield* tenant(node, "custom-calls")
      yield* api.put("/v1/providers/mine", { token: t.token, json: customProvider(upstream) })
      const agentId = (yield* api.post("/v1/agents", { token: t.token, json: { model: "mine/m1" } })).body.id
      const turn = (text: string) =>
        Effect.gen(function*() {
          const before = upstream.requests().length
          const request = (yield* api.post(`/v1/agents/${agentId}/prompt`, { token: t.token, json: { text } })).body
          const record = yield* Http.settled(api, t.token, agentId, request.id)
          return { record, calls: upstream.requests().slice(before) }
        })
      // Each turn reads the provider as the previous write left it, though model calls reuse their reads.
      expect((yield* turn("one")).calls.map((call) => call.headers.authorization)).toEqual([
        "Bearer sk-custom-secret-1111"
      ])
      yield* api.put("/v1/providers/mine", {
        token: t.token,
        json: customProvider(upstream, { apiKey: "sk-custom-secret-3333" })
      })
      expect((yield* turn("two")).calls.map((call) => call.headers.authorization)).toEqual([
        "Bearer sk-custom-secret-3333"
      ])
      yield* api.delete("/v1/providers/mine", { token: t.token })
      const removed = yield* turn("three")
      expect(removed.calls).toEqual([])
      expect(removed.record.error).toContain("mine/m1")
    }))

  it.effect("key scopes hold entries and their own providers", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const t = yield* tenant(node, "scopes")
      const entry = yield* api.put("/v1/key-scopes/team-a/providers/anthropic", {
        token: t.token,
        json: { apiKey: "sk-scope-8888", baseUrl: upstream.url, headers: { "x-scope-secret": "hdr-scope-9999" } }
      })
      expect(entry.status).toBe(200)
      expect(entry.body).toEqual({
        provider: "anthropic",
        setAt: entry.body.setAt,
        last4: "8888",
        baseUrl: upstream.url,
        headers: ["x-scope-secret"]
      })
      const keyed = yield* api.put("/v1/key-scopes/team-a/providers/acme", {
        token: t.token,
        json: { apiKey: "sk-scope-acme-1212", verify: true }
      })
      expect(keyed.body).toEqual({ provider: "acme", last4: "1212", verification: { status: "valid" } })
      expect(
        yield* api.put("/v1/key-scopes/team-a/providers/anthropic", { token: t.token, json: { region: "x", other: 1 } })
      ).toMatchObject({ status: 400, body: { code: "INVALID_REQUEST" } })
      expect(yield* api.put("/v1/key-scopes/team-a/providers/anthropic", { token: t.token, json: { region: "eu" } }))
        .toMatchObject({
          status: 400,
          body: { error: "invalid request: an entry needs an apiKey, or a baseUrl of a gateway that holds the key" }
        })
      const own = yield* api.put("/v1/key-scopes/team-a/model-providers/gw", {
        token: t.token,
        json: customProvider(upstream)
      })
      expect(own.body).toMatchObject({ id: "gw", key: { last4: "1111" }, custom: { headers: ["x-team-secret"] } })
      const scope = (yield* api.get("/v1/key-scopes/team-a", { token: t.token })).body
      expect(scope.scope).toBe("team-a")
      expect(scope.providers.map((p: any) => p.provider)).toEqual(["acme", "anthropic"])
      expect((yield* api.get("/v1/key-scopes", { token: t.token })).body.map((s: any) => s.scope)).toEqual([
        "team-a"
      ])
      expect((yield* api.get("/v1/key-scopes/team-a/model-providers/gw", { token: t.token })).status).toBe(200)
      expect((yield* api.delete("/v1/key-scopes/team-a/providers/acme", { token: t.token })).status).toBe(200)
      expect((yield* api.delete("/v1/key-scopes/team-a", { token: t.token })).body).toEqual({
        id: "team-a",
        deleted: true
      })
      expect((yield* api.get("/v1/key-scopes/team-a", { token: t.token })).status).toBe(404)
      expect((yield* api.get("/v1/key-scopes/team-a/model-providers/gw", { token: t.token })).status).toBe(404)
      expect((yield* api.put("/v1/key-scopes/bad scope/providers/openai", { token: t.token, json: {} })).status)
        .toBe(400)
    }))

  it.effect("another tenant sees none of it", () =>
    Effect.gen(function*() {
      const { node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const a = yield* tenant(node, "iso-a")
      const b = yield* tenant(node, "iso-b")
      yield* api.put("/v1/providers/mine", { token: a.token, json: customProvider(upstream) })
      yield* api.put("/v1/keys/acme", { token: a.token, json: { apiKey: "sk-iso-1313", verify: false } })
      yield* api.put("/v1/key-scopes/s1/providers/anthropic", { token: a.token, json: { apiKey: "sk-iso-1414" } })
      expect((yield* api.get("/v1/providers/mine", { token: b.token })).status).toBe(404)
      expect((yield* api.delete("/v1/providers/mine", { token: b.token })).status).toBe(404)
      expect((yield* api.get("/v1/providers/acme", { token: b.token })).body.key).toBeNull()
      expect((yield* api.delete("/v1/keys/acme", { token: b.token })).status).toBe(404)
      expect((yield* api.get("/v1/key-scopes/s1", { token: b.token })).status).toBe(404)
      expect((yield* api.delete("/v1/key-scopes/s1", { token: b.token })).status).toBe(404)
      expect((yield* api.get("/v1/key-scopes", { token: b.token })).body).toEqual([])
      const models = (yield* api.get("/v1/models", { token: b.token })).body.data
      expect(models.some((model: any) => model.id === "mine/m1")).toBe(false)
      // A's things are still there.
      expect((yield* api.get("/v1/providers/mine", { token: a.token })).status).toBe(200)
    }))

  it.effect("no answer, log line or stored column holds a key or header value", () =>
    Effect.gen(function*() {
      const { databaseUrl, node, upstream } = yield* TestWorld.TestWorld
      const api = Http.client(node.rest)
      const t = yield* tenant(node, "secrets")
      const secrets = [
        "sk-leak-tenant-aaaa1",
        "sk-leak-custom-bbbb2",
        "hdr-leak-cccc3",
        "sk-leak-scope-dddd4",
        "hdr-leak-eeee5",
        "sk-leak-platform-ffff6"
      ]
      const answers = [
        yield* api.put("/v1/keys/acme", { token: t.token, json: { apiKey: secrets[0], verify: true } }),
        yield* api.put("/v1/providers/leaky", {
          token: t.token,
          json: customProvider(upstream, { apiKey: secrets[1], headers: { "x-leak": secrets[2] } })
        }),
        yield* api.put("/v1/key-scopes/leak/providers/anthropic", {
          token: t.token,
          json: { apiKey: secrets[3], baseUrl: upstream.url, headers: { "x-leak": secrets[4] } }
        }),
        yield* api.put("/v1/admin/platform-keys/acme", {
          token: node.operatorToken,
          json: { apiKey: secrets[5], verify: false }
        }),
        yield* api.get("/v1/providers", { token: t.token }),
        yield* api.get("/v1/providers/leaky", { token: t.token }),
        yield* api.get("/v1/key-scopes", { token: t.token }),
        yield* api.get("/v1/key-scopes/leak", { token: t.token }),
        yield* api.get("/v1/models", { token: t.token }),
        yield* api.get("/v1/me", { token: t.token }),
        // A refused save must not echo what it was given either.
        yield* api.put("/v1/providers/leaky2", {
          token: t.token,
          json: customProvider(upstream, { apiKey: secrets[1], baseUrl: `https://user:${secrets[1]}@10.0.0.1/v1` })
        })
      ]
      expect(answers.every((answer) => answer.status < 500)).toBe(true)
      const everything = answers.map((answer) => answer.text + JSON.stringify([...answer.headers])).join("\n") +
        node.output()
      for (const secret of secrets) expect(everything).not.toContain(secret)

      const dump = yield* TestDatabase.query(
        databaseUrl,
        `SELECT row_to_json(t)::text AS row FROM tenant_keys t
         UNION ALL SELECT row_to_json(p)::text FROM platform_keys p
         UNION ALL SELECT row_to_json(c)::text FROM custom_providers c
         UNION ALL SELECT row_to_json(k)::text FROM key_scope_entries k`
      )
      const stored = dump.map((row) => row.row as string).join("\n")
      expect(stored).toContain("v1.")
      for (const secret of secrets) expect(stored).not.toContain(secret)
    }))
})

const privateUrls = [
  "http://public.example/v1",
  "https://127.0.0.1/v1",
  "https://127.1/v1",
  "https://2130706433/v1",
  "https://0x7f000001/v1",
  "https://0177.0.0.1/v1",
  "https://0.0.0.0/v1",
  "https://10.0.0.1/v1",
  "https://172.16.0.1/v1",
  "https://172.31.255.254/v1",
  "https://192.168.1.1/v1",
  "https://100.64.0.1/v1",
  "https://169.254.169.254/latest",
  "https://224.0.0.1/v1",
  "https://255.255.255.255/v1",
  "https://[::1]/v1",
  "https://[::]/v1",
  "https://[fe80::1]/v1",
  "https://[fc00::1]/v1",
  "https://[fd12::1]/v1",
  "https://[::ffff:127.0.0.1]/v1",
  "https://[::ffff:10.0.0.1]/v1",
  "https://[64:ff9b::7f00:1]/v1",
  "https://[2002:7f00:1::]/v1",
  "https://localhost/v1",
  "https://api.localhost/v1",
  "https://user:pass@example.com/v1",
  "ftp://example.com/v1"
]

describe("egress at save time", () => {
  it.scopedLive(
    `refuses ${privateUrls.length} private or tricky base URLs, and ALLOW_PRIVATE_URLS lets loopback in`,
    () =>
      Effect.gen(function*() {
        const node = yield* TestNode.start({ databaseUrl: yield* TestDatabase.make })
        const api = Http.client(node.rest)
        const t = yield* tenant(node, "ssrf")
        for (const baseUrl of privateUrls) {
          const provider = yield* api.put("/v1/providers/p", {
            token: t.token,
            json: { type: "openai-completions", baseUrl, models: [{ id: "m", contextWindow: 1000 }] }
          })
          expect(provider.status, baseUrl).toBe(400)
          expect(provider.body.code).toBe("INVALID_REQUEST")
          expect(provider.body.error).toMatch(/baseUrl/)
          if (baseUrl.startsWith("https://") || baseUrl.startsWith("http://")) {
            const entry = yield* api.put("/v1/key-scopes/s/providers/openai", { token: t.token, json: { baseUrl } })
            expect(entry.status, baseUrl).toBe(400)
          }
        }
        expect((yield* api.get("/v1/providers/p", { token: t.token })).status).toBe(404)
        expect((yield* api.get("/v1/key-scopes", { token: t.token })).body).toEqual([])
        expect(node.output()).not.toContain("ALLOW_PRIVATE_URLS=true")

        const upstream = yield* FakeUpstream.start()
        const open = yield* TestNode.start({
          databaseUrl: yield* TestDatabase.make,
          env: { ALLOW_PRIVATE_URLS: "true" }
        })
        expect(open.output()).toMatch(/level=WARN .*ALLOW_PRIVATE_URLS=true/)
        const u = yield* tenant(open, "open")
        const saved = yield* Http.client(open.rest).put("/v1/providers/p", {
          token: u.token,
          json: {
            type: "openai-completions",
            baseUrl: `${upstream.url}/v1`,
            models: [{ id: "m", contextWindow: 1000 }]
          }
        })
        expect(saved.status).toBe(200)
      }),
    { timeout: 60_000 }
  )
})
