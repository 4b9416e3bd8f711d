import { Api } from "@agent-runtime/domain"
import { HostedMcp } from "@agent-runtime/mcp"
import { OpenApi } from "@effect/platform"
import { expect, it } from "@effect/vitest"

const operations = HostedMcp.fromDocument(OpenApi.fromApi(Api.Api))

/** Every `$ref` in `node`. */
const refs = (node: unknown): Array<string> =>
  Array.isArray(node)
    ? node.flatMap(refs)
    : typeof node === "object" && node !== null
    ? Object.entries(node).flatMap(([key, value]) => key === "$ref" ? [String(value)] : refs(value))
    : []

it("one tool per listed operation, each named once, none of the operator's", () => {
  expect(operations.map((operation) => operation.operationId).sort()).toEqual([...HostedMcp.operations].sort())
  const names = operations.map((operation) => operation.tool.name)
  expect(new Set(names).size).toBe(names.length)
  expect(names.filter((name) => /^(admin|tokens|clients|paymentNotices)_/.test(name))).toEqual([])
})

it("each input is one self-contained JSON Schema: parameters by name, the body, its named parts in $defs", () => {
  for (const { tool } of operations) {
    const schema = tool.inputSchema as Record<string, any>
    expect(schema.type).toBe("object")
    for (const ref of refs(schema)) {
      expect(ref, `${tool.name}: ${ref}`).toMatch(/^#\/\$defs\//)
      expect(schema.$defs?.[ref.slice("#/$defs/".length)], `${tool.name}: ${ref}`).toBeDefined()
    }
  }
  const prompt = operations.find((operation) => operation.operationId === "agents.prompt")!
  expect(prompt).toMatchObject({ method: "POST", path: "/v1/agents/{id}/prompt" })
  expect((prompt.tool.inputSchema as any).required).toEqual(["id", "body"])
  expect(prompt.tool.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false })
  // Event reads are the poll form: no stream to hold, no snapshot.
  const events = operations.find((operation) => operation.operationId === "agents.events")!
  expect(Object.keys((events.tool.inputSchema as any).properties)).not.toContain("poll")
  expect(events.tool.annotations?.readOnlyHint).toBe(true)
})
