import { Schema, Either, ParseResult } from "effect"
class A extends Schema.Class<A>("A")({ a: Schema.String, b: Schema.optional(Schema.Number) }, { parseOptions: { onExcessProperty: "error" } }) {}
const r = Schema.decodeUnknownEither(A)({ a: "x", c: 1 })
console.log(Either.isLeft(r) ? ParseResult.TreeFormatter.formatErrorSync(r.left) : r.right)
const S = Schema.Struct({ a: Schema.String }).annotations({ parseOptions: { onExcessProperty: "error" } })
const r2 = Schema.decodeUnknownEither(S)({ a: "x", c: 1 })
console.log(Either.isLeft(r2) ? ParseResult.TreeFormatter.formatErrorSync(r2.left) : r2.right)
// nested
const Outer = Schema.Struct({ inner: S })
const r3 = Schema.decodeUnknownEither(Outer)({ inner: { a: "x", c: 1 } })
console.log(Either.isLeft(r3) ? ParseResult.TreeFormatter.formatErrorSync(r3.left) : r3.right)
class O2 extends Schema.Class<O2>("O2")({ inner: A }) {}
const r4 = Schema.decodeUnknownEither(O2)({ inner: { a: "x", c: 1 } })
console.log(Either.isLeft(r4) ? ParseResult.TreeFormatter.formatErrorSync(r4.left) : r4.right)
const F = Schema.Struct({ m: Schema.Record({ key: Schema.String, value: Schema.String }).pipe(Schema.filter((r) => Object.keys(r).length <= 1 || "at most 1 key")) })
const r5 = Schema.decodeUnknownEither(F)({ m: { a: "1", b: "2" } })
console.log(Either.isLeft(r5) ? ParseResult.TreeFormatter.formatErrorSync(r5.left) : r5.right)
console.log(Either.isLeft(r5) ? JSON.stringify(ParseResult.ArrayFormatter.formatErrorSync(r5.left)) : r5.right)
