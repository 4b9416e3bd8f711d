/**
 * The floor of a durable turn on this machine, for scripts/bench/cluster.ts:
 * the same wire work as a runner (a prompt accepted into a stored request
 * row, the turn's journal writes, one streamed chat completion from the
 * upstream, a long-poll of the outcome) in plain Node with node:http, pg and
 * one undici pool, and nothing else: no fencing, cluster, schemas, events,
 * retries or checks beyond a token and an agent lookup. Not a product: the
 * least any Node process pays for the same statements and requests.
 * Environment: DATABASE_URL, UPSTREAM (the fake upstream's base URL).
 */
const http = require("node:http")
const crypto = require("node:crypto")
const Pg = require("pg")
const { Pool } = require("undici")

const db = new Pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 })
const upstream = new Pool(process.env.UPSTREAM, { connections: 64 })
/** Per agent: its history and the tail of its turn queue (turns of one agent run one at a time). */
const agents = new Map()
/** Request id → callbacks waiting for it to complete. */
const waiting = new Map()

const send = (res, status, body) => {
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

const tenantOf = async (req) => {
  const token = (req.headers.authorization ?? "").replace(/^Bearer /, "")
  const hash = crypto.createHash("sha256").update(token).digest("hex")
  return (await db.query("SELECT tenant_id FROM floor_tokens WHERE hash = $1", [hash])).rows[0]?.tenant_id
}

const agentOf = async (tenantId, agentId) =>
  (await db.query("SELECT id, model FROM floor_agents WHERE id = $1 AND tenant_id = $2", [agentId, tenantId])).rows[0]

const readRequest = async (agentId, id) =>
  (await db.query("SELECT id, state, outcome FROM floor_requests WHERE agent_id = $1 AND id = $2", [agentId, id]))
    .rows[0]

const append = (agentId, message) =>
  db.query(
    "INSERT INTO floor_messages (agent_id, seq, message) VALUES ($1, $2, $3::jsonb)",
    [agentId, agents.get(agentId).history.push(message), JSON.stringify(message)]
  )

const turn = async (agentId, requestId, text) => {
  await db.query("UPDATE floor_requests SET state = 'running', began_at = now() WHERE agent_id = $1 AND id = $2", [
    agentId,
    requestId
  ])
  await append(agentId, { role: "user", content: text })
  const answer = await upstream.request({
    path: "/v1/chat/completions",
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer floor" },
    body: JSON.stringify({
      model: "m1",
      stream: true,
      stream_options: { include_usage: true },
      messages: agents.get(agentId).history
    })
  })
  let buffer = ""
  let reply = ""
  let usage = { prompt_tokens: 0, completion_tokens: 0 }
  for await (const chunk of answer.body) {
    buffer += chunk
    for (let end = buffer.indexOf("\n\n"); end !== -1; end = buffer.indexOf("\n\n")) {
      const frame = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      if (!frame.startsWith("data: ") || frame === "data: [DONE]") continue
      const data = JSON.parse(frame.slice(6))
      reply += data.choices?.[0]?.delta?.content ?? ""
      if (data.usage) usage = data.usage
    }
  }
  await append(agentId, { role: "assistant", content: reply })
  await db.query("INSERT INTO floor_usage (agent_id, request_id, input, output) VALUES ($1, $2, $3, $4)", [
    agentId,
    requestId,
    usage.prompt_tokens,
    usage.completion_tokens
  ])
  await db.query(
    "UPDATE floor_requests SET state = 'completed', outcome = $3::jsonb, ended_at = now() WHERE agent_id = $1 AND id = $2",
    [agentId, requestId, JSON.stringify({ result: { reply } })]
  )
  for (const done of waiting.get(requestId) ?? []) done()
  waiting.delete(requestId)
}

const prompt = async (res, tenantId, agentId, body) => {
  if (!(await agentOf(tenantId, agentId))) return send(res, 404, { error: "no such agent", code: "NOT_FOUND" })
  const id = `req_${crypto.randomUUID()}`
  const row = (await db.query(
    "INSERT INTO floor_requests (agent_id, id, state, input) VALUES ($1, $2, 'queued', $3::jsonb) RETURNING id, state",
    [agentId, id, JSON.stringify({ text: body.text })]
  )).rows[0]
  send(res, 202, row)
  const agent = agents.get(agentId) ?? { history: [], tail: Promise.resolve() }
  agents.set(agentId, agent)
  agent.tail = agent.tail.then(() => turn(agentId, id, body.text)).catch((error) => console.error(error))
}

const request = async (res, tenantId, agentId, id, wait) => {
  if (!(await agentOf(tenantId, agentId))) return send(res, 404, { error: "no such agent", code: "NOT_FOUND" })
  // Listening before the read: a turn that completes in between is heard.
  let done = () => {}
  const completed = new Promise((resolve) => (done = resolve))
  if (wait > 0) waiting.set(id, [...(waiting.get(id) ?? []), done])
  let row = await readRequest(agentId, id)
  if (row !== undefined && row.state !== "completed" && wait > 0) {
    const timer = setTimeout(done, wait * 1000)
    await completed
    clearTimeout(timer)
    row = await readRequest(agentId, id)
  }
  const left = (waiting.get(id) ?? []).filter((listener) => listener !== done)
  if (left.length === 0) waiting.delete(id)
  else waiting.set(id, left)
  return row === undefined ? send(res, 404, { error: "no such request", code: "NOT_FOUND" }) : send(res, 200, row)
}

http.createServer({ keepAliveTimeout: 65000 }, (req, res) => {
  const chunks = []
  req.on("data", (chunk) => chunks.push(chunk))
  req.on("end", async () => {
    try {
      const url = new URL(req.url, "http://floor")
      const tenantId = await tenantOf(req)
      if (tenantId === undefined) return send(res, 401, { error: "unauthorized", code: "UNAUTHORIZED" })
      const parts = url.pathname.split("/")
      if (req.method === "POST" && parts[4] === "prompt") {
        return await prompt(res, tenantId, parts[3], JSON.parse(Buffer.concat(chunks).toString()))
      }
      if (req.method === "GET" && parts[4] === "requests") {
        return await request(res, tenantId, parts[3], parts[5], Number(url.searchParams.get("wait") ?? 0))
      }
      send(res, 404, { error: "not found", code: "NOT_FOUND" })
    } catch (error) {
      send(res, 500, { error: String(error), code: "INTERNAL" })
    }
  })
}).listen(0, "127.0.0.1", function() {
  console.log(this.address().port)
})
