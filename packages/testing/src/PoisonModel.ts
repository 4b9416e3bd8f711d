/**
 * Responses a model can send that nobody expects, in families: text
 * PostgreSQL cannot store (NUL, unpaired surrogates) in replies, thinking,
 * tool names, tool call ids and arguments; megabytes of arguments; arguments
 * that are not JSON, or JSON that is not an object; tool names no tool has;
 * arguments nested thousands of levels deep; tool call ids too long for an
 * index, or used twice in one response. Each is a `FakeUpstream.Step`, so
 * the fake model sends it through a real provider protocol. `arbitrary`
 * mixes the families (fast-check, deterministic for a seed).
 */
import fc from "fast-check"
import type * as FakeUpstream from "./FakeUpstream.ts"

export type Family =
  | "nul"
  | "surrogates"
  | "huge_arguments"
  | "invalid_json"
  | "not_an_object"
  | "unknown_tool"
  | "deep_nesting"
  | "bad_tool_call_ids"

export const families: ReadonlyArray<Family> = [
  "nul",
  "surrogates",
  "huge_arguments",
  "invalid_json",
  "not_an_object",
  "unknown_tool",
  "deep_nesting",
  "bad_tool_call_ids"
]

/** The tools the poisoned agent has: its file tools (a workspace is mounted) and `ask_user`. */
export const builtins: ReadonlyArray<string> = ["ask_user"]

const nested = (depth: number) => `${"[".repeat(depth)}1${"]".repeat(depth)}`

/** One response of each family, the worst of its kind that is still something a model could say. */
export const examples: Readonly<Record<Family, ReadonlyArray<FakeUpstream.Step>>> = {
  nul: [
    { text: "before\u0000after" },
    { thinking: "thinks\u0000aloud", text: "done\u0000" },
    { toolCalls: [{ name: "write", arguments: { path: "nul\u0000.txt", content: "a\u0000b" } }] },
    { toolCalls: [{ name: "write", arguments: { path: "clean.txt", content: "\u0000".repeat(1000) } }] },
    {
      toolCalls: [{
        name: "ask_user",
        arguments: { questions: [{ question: "Which\u0000one?", options: [{ label: "a\u0000" }, { label: "b" }] }] }
      }]
    },
    { toolCalls: [{ name: "wr\u0000ite", arguments: { "k\u0000ey": "v" } }] }
  ],
  surrogates: [
    { text: "lone \ud800 high and \udc00 low" },
    { toolCalls: [{ name: "write", arguments: { path: "s\udfff.txt", content: "x\ud83d" } }] },
    { toolCalls: [{ name: "ask_user", arguments: { questions: [{ question: "\udbff?", options: [] }] } }] }
  ],
  huge_arguments: [
    { toolCalls: [{ name: "write", arguments: { path: "big.txt", content: "x".repeat(1024 * 1024) } }] },
    { toolCalls: [{ name: "no_such_tool", arguments: { blob: "y".repeat(1024 * 1024) } }] }
  ],
  invalid_json: [
    { toolCalls: [{ name: "write", arguments: '{"path": "a.txt", "content": ' }] },
    { toolCalls: [{ name: "write", arguments: "not json at all" }] },
    { toolCalls: [{ name: "read", arguments: '{"path": "a.txt"}}}}' }] }
  ],
  not_an_object: [
    { toolCalls: [{ name: "write", arguments: "[1, 2, 3]" }] },
    { toolCalls: [{ name: "read", arguments: '"a.txt"' }] },
    { toolCalls: [{ name: "ls", arguments: "null" }] },
    { toolCalls: [{ name: "ls", arguments: "42" }] }
  ],
  unknown_tool: [
    { toolCalls: [{ name: "delete_everything", arguments: {} }] },
    { toolCalls: [{ name: "t".repeat(100_000), arguments: {} }] },
    { toolCalls: [{ name: "", arguments: {} }] }
  ],
  deep_nesting: [
    { toolCalls: [{ name: "write", arguments: `{"path":"d.txt","content":${nested(20_000)}}` }] },
    { toolCalls: [{ name: "ask_user", arguments: `{"questions":${nested(200)}}` }] },
    { toolCalls: [{ name: "ls", arguments: `{"path":${nested(65)}}` }] }
  ],
  bad_tool_call_ids: [
    { toolCalls: [{ id: "c".repeat(10_000), name: "ls", arguments: {} }] },
    {
      toolCalls: [
        { id: "call_same", name: "ls", arguments: {} },
        { id: "call_same", name: "read", arguments: { path: "x.txt" } }
      ]
    },
    { toolCalls: [{ id: "call\u0000nul", name: "ls", arguments: {} }] },
    { toolCalls: [{ id: "call with spaces\n", name: "ls", arguments: {} }] }
  ]
}

/** Every example, with its family, in a fixed order. */
export const allExamples: ReadonlyArray<{ readonly family: Family; readonly step: FakeUpstream.Step }> = families
  .flatMap((family) => examples[family].map((step) => ({ family, step })))

const poisonText: fc.Arbitrary<string> = fc.oneof(
  fc.string(),
  fc.constantFrom("\u0000", "\ud800", "\udfff", "a\u0000b", "\ud83d", "\u0000\ud800\u0000"),
  fc.tuple(fc.string(), fc.constantFrom("\u0000", "\ud800", "\udc00"), fc.string()).map((parts) => parts.join(""))
)

const toolName = fc.oneof(
  fc.constantFrom("write", "read", "ls", "ask_user", "edit", "glob", "grep"),
  poisonText
)

const poisonArguments: fc.Arbitrary<unknown> = fc.oneof(
  fc.dictionary(poisonText, fc.oneof(poisonText, fc.integer(), fc.boolean(), fc.constant(null))),
  fc.record({ path: poisonText, content: poisonText }),
  fc.integer({ min: 1, max: 3_000 }).map(nested).map((deep) => `{"path":${deep}}`),
  fc.constantFrom("{", "[1,", "null", "true", '"text"', "{}}"),
  fc.integer({ min: 1, max: 64 }).map((kib) => ({ path: "big.txt", content: "z".repeat(kib * 1024) }))
)

/** Mixed responses of every family, one to three tool calls or a text. */
export const arbitrary: fc.Arbitrary<FakeUpstream.Step> = fc.oneof(
  fc.record({ text: poisonText }),
  fc.record({ thinking: poisonText, text: poisonText }),
  fc.array(
    fc.record({
      id: fc.option(fc.oneof(poisonText, fc.constant("call_dup")), { nil: undefined }),
      name: toolName,
      arguments: poisonArguments
    }),
    { minLength: 1, maxLength: 3 }
  ).map((calls) => ({
    toolCalls: calls.map(({ id, ...call }) => id === undefined || id === "" ? call : { id, ...call })
  }))
)
