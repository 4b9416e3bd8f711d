import { Schema, Either, ParseResult } from "effect"
const show = (s: any, v: unknown) => { const r = Schema.decodeUnknownEither(s)(v); console.log(Either.isLeft(r) ? ParseResult.TreeFormatter.formatErrorSync(r.left) : r.right) }
class A extends Schema.Class<A>("A")({ a: Schema.String }, [undefined, undefined, { parseOptions: { onExcessProperty: "error" } }] as any) {}
show(A, { a: "x", c: 1 })
class B extends Schema.Class<B>("B")({ a: Schema.String }, [{ parseOptions: { onExcessProperty: "error" } }]) {}
show(B, { a: "x", c: 1 })
class C extends Schema.Class<C>("C")(Schema.Struct({ a: Schema.String }).annotations({ parseOptions: { onExcessProperty: "error" } })) {}
show(C, { a: "x", c: 1 })
show(Schema.Struct({x: C}), {x: { a: "x", c: 1 }})
console.log(Schema.encodedSchema(C).ast._tag)
