import { Schema, Either, ParseResult } from "effect"
const show = (s: any, v: unknown) => { const r = Schema.decodeUnknownEither(s)(v); console.log(Either.isLeft(r) ? ParseResult.TreeFormatter.formatErrorSync(r.left) + "\n" + JSON.stringify(ParseResult.ArrayFormatter.formatErrorSync(r.left)) : r.right) }
const R = Schema.Record({ key: Schema.String.pipe(Schema.maxLength(3)), value: Schema.String.pipe(Schema.maxLength(2)) })
show(Schema.Struct({ m: R }), { m: { abcd: "x", ab: "y" } })
show(Schema.Struct({ m: R }), { m: { ab: "xyz" } })
class S extends Schema.Class<S>("S")(Schema.Struct({ text: Schema.optional(Schema.String), code: Schema.optional(Schema.String) }).pipe(Schema.filter((s) => (s.text === undefined) !== (s.code === undefined) || { path: ["text"], message: "give exactly one of text or code" }))) {}
show(S, {})
show(S, { text: "a" })
show(Schema.Struct({ a: Schema.String.pipe(Schema.pattern(/^\S+$/, { message: () => "must not contain whitespace" })) }), { a: "a b" })
show(Schema.Struct({ a: Schema.String.pipe(Schema.maxLength(2)).pipe(Schema.filter(s=> s !== "x" || "no x")) }), { a: "abc" })
