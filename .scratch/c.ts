import { Schema } from "effect"
class C extends Schema.Class<C>("C")({ a: Schema.Number }) {}
class P extends Schema.Class<P>("P")({ c: C, cs: Schema.Array(C) }) {}
const p: P = { c: { a: 1 }, cs: [{ a: 2 }] }
console.log(Schema.encodeSync(P)(p))
console.log(P.make({ c: C.make({a:1}), cs: [] }))
