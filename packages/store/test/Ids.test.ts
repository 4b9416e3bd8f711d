/**
 * Ids drawn from the pooled random bytes: the shapes clients check, no two
 * alike across many pool refills, and creation order kept across milliseconds.
 */
import { Ids } from "@agent-runtime/store"
import { expect, it } from "@effect/vitest"

it("keeps its shapes: 26 Crockford characters, agents' client_ and 40 hex, volumes' vol_ and 24 hex", () => {
  expect(Ids.make("req")).toMatch(/^req_[0-9A-HJKMNP-TV-Z]{26}$/)
  expect(Ids.agent()).toMatch(/^client_[0-9a-f]{40}$/)
  expect(Ids.volume()).toMatch(/^vol_[0-9a-f]{24}$/)
})

it("never repeats across many refills of the pool, whatever the mix of kinds", () => {
  const seen = new Set<string>()
  for (let i = 0; i < 20_000; i++) {
    seen.add(Ids.make("req"))
    seen.add(Ids.agent())
    seen.add(Ids.volume())
  }
  expect(seen.size).toBe(60_000)
})

it("sorts by creation time across milliseconds", async () => {
  const first = Ids.make("req")
  await new Promise((resolve) => setTimeout(resolve, 3))
  const second = Ids.make("req")
  expect(first < second).toBe(true)
  const agent = Ids.agent()
  await new Promise((resolve) => setTimeout(resolve, 3))
  expect(agent < Ids.agent()).toBe(true)
})

it("spreads its random part: each of the 32 characters turns up in every random position", () => {
  const ids = Array.from({ length: 4000 }, () => Ids.make("x").slice(2 + 10))
  for (let position = 0; position < 16; position++) {
    expect(new Set(ids.map((id) => id[position])).size).toBe(32)
  }
})
