import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import * as Util from "node:util"
import * as CanonicalJson from "../src/CanonicalJson.ts"
import { Sender } from "../src/Input.ts"
import { PromptInput } from "../src/Run.ts"

const { encode, equals } = CanonicalJson

/** The same value with the keys of every object in reverse order. */
const reversed = (value: unknown): unknown =>
  Array.isArray(value)
    ? value.map(reversed)
    : value !== null && typeof value === "object"
    ? Object.fromEntries(Object.entries(value).reverse().map(([key, item]) => [key, reversed(item)]))
    : value

describe("CanonicalJson", () => {
  it("sorts the keys of every object, at every depth", () => {
    expect(encode({ b: 1, a: { d: [{ z: 1, y: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[{"y":2,"z":1}]},"b":1}')
    expect(encode({ b: { y: 1, x: 2 }, a: 0 })).toBe(encode({ a: 0, b: { x: 2, y: 1 } }))
  })

  it("keeps nested values: objects that differ deep inside encode differently", () => {
    // The old digest's replacer array kept only top-level names, so both of these were {"metadata":{}}.
    expect(encode({ metadata: { ticket: "T-1" } })).toBe('{"metadata":{"ticket":"T-1"}}')
    expect(equals({ metadata: { ticket: "T-1" } }, { metadata: { ticket: "T-2" } })).toBe(false)
    expect(equals({ a: [{ b: { c: 1 } }] }, { a: [{ b: { c: 2 } }] })).toBe(false)
  })

  it("keeps arrays in order", () => {
    expect(encode([3, 1, 2])).toBe("[3,1,2]")
    expect(equals([1, 2], [2, 1])).toBe(false)
  })

  it("drops undefined fields like JSON.stringify, and writes null for them in arrays", () => {
    expect(encode({ a: undefined, b: 1, c: () => 1, d: Symbol("s") })).toBe('{"b":1}')
    expect(equals({ a: 1, b: undefined }, { a: 1 })).toBe(true)
    expect(encode([undefined, () => 1, Symbol("s"), 1])).toBe("[null,null,null,1]")
  })

  it("writes a value JSON cannot write at all as null", () => {
    expect(encode(undefined)).toBe("null")
    expect(encode(() => 1)).toBe("null")
  })

  it("agrees with JSON.stringify on scalars, strings that need escaping, toJSON and boxed values", () => {
    for (
      const value of [
        0,
        -1.5,
        1e21,
        Number.NaN,
        Number.POSITIVE_INFINITY,
        true,
        null,
        "",
        'quote " backslash \\ newline \n tab \t \u0001 \u2028 é 🙂',
        new Date(0),
        { at: new Date(1_000) },
        [new Number(1), new String("s"), new Boolean(false)]
      ]
    ) {
      expect(encode(value)).toBe(JSON.stringify(value))
    }
    expect(encode({ "é": 1, 'a"b': 2 })).toBe('{"a\\"b":2,"é":1}')
    expect(encode({ nested: { toJSON: (key: string) => `as ${key}` } })).toBe('{"nested":"as nested"}')
  })

  it("encodes schema class instances by their fields, also when spread", () => {
    const from = new Sender({ id: "u-1", name: "Ann" })
    const input = new PromptInput({ text: "hi", metadata: { b: "2", a: "1" }, from })
    expect(encode(input)).toBe('{"from":{"id":"u-1","name":"Ann"},"metadata":{"a":"1","b":"2"},"text":"hi"}')
    expect(encode({ ...input, requestId: "r" })).toBe(
      '{"from":{"id":"u-1","name":"Ann"},"metadata":{"a":"1","b":"2"},"requestId":"r","text":"hi"}'
    )
  })

  it("shares values that are not cycles, and refuses a cycle", () => {
    const shared = { x: 1 }
    expect(encode({ a: shared, b: [shared, shared] })).toBe('{"a":{"x":1},"b":[{"x":1},{"x":1}]}')
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    expect(() => encode(cyclic)).toThrow(TypeError)
  })

  it("for any JSON value: reads back as the value, ignores key order, and tells different values apart", () => {
    FastCheck.assert(
      FastCheck.property(FastCheck.jsonValue(), (value) => {
        // As through JSON.stringify: -0 reads back as 0.
        expect(JSON.parse(encode(value))).toEqual(JSON.parse(JSON.stringify(value)))
        expect(encode(reversed(value))).toBe(encode(value))
      })
    )
    FastCheck.assert(
      FastCheck.property(FastCheck.jsonValue(), FastCheck.jsonValue(), (a, b) => {
        // Two values encode the same exactly when they are the same JSON (node's deep equality ignores key order).
        const asJson = (value: unknown) => JSON.parse(JSON.stringify(value))
        expect(equals(a, b)).toBe(Util.isDeepStrictEqual(asJson(a), asJson(b)))
      })
    )
  })
})
