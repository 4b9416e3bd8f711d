/**
 * Definitions, reusable agent templates, kept as immutable revisions: an
 * update writes revision n+1 and leaves n as it was, so an agent pinned to a
 * revision runs exactly what it was made with until it is moved on. Secrets
 * of tool sources (bearer tokens, header values) are sealed in the revision
 * and never leave; URLs are checked by the egress rules before anything is
 * written.
 */
import { ApiError, Common, Definition } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { Ids, PersistenceError, SealedSecret } from "@agent-runtime/store"
import type { ToolSources } from "@agent-runtime/toolsources"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option, Redacted, Schema } from "effect"

/** A tool source as a revision keeps it: its settings, with any secret sealed. */
const StoredAuth = Schema.Union(
  Schema.Struct({ type: Schema.Literal("none") }),
  Schema.Struct({ type: Schema.Literal("runtime") }),
  Schema.Struct({ type: Schema.Literal("bearer"), sealed: Schema.String, last4: Schema.String }),
  Schema.Struct({
    type: Schema.Literal("header"),
    name: Schema.String,
    sealed: Schema.String,
    last4: Schema.String
  })
)
type StoredAuth = typeof StoredAuth.Type

const Filter = Schema.Struct({
  include: Schema.optional(Schema.Array(Schema.String)),
  exclude: Schema.optional(Schema.Array(Schema.String))
})

const StoredSource = Schema.Struct({
  kind: Schema.Literal("mcp", "openapi"),
  name: Schema.String,
  url: Schema.optional(Schema.String),
  document: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  baseUrl: Schema.optional(Schema.String),
  auth: StoredAuth,
  tools: Schema.optional(Filter),
  operations: Schema.optional(Filter),
  exposure: Schema.optional(Schema.Literal("direct", "codemode", "both"))
})
type StoredSource = typeof StoredSource.Type

/** The body of a revision: everything but its id, number and times. */
const Body = Schema.Struct({
  name: Schema.String,
  description: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  systemPrompt: Schema.optional(Schema.String),
  thinkingLevel: Schema.optional(Definition.Definition.fields.thinkingLevel.from),
  fileTools: Schema.optional(Schema.Boolean),
  builtins: Schema.Array(Schema.String),
  delegate: Schema.optional(Definition.Definition.fields.delegate.from),
  humanInput: Schema.optional(Definition.Definition.fields.humanInput.from),
  toolSources: Schema.Array(StoredSource)
})
type Body = typeof Body.Type

const RevisionRow = Schema.Struct({
  id: Schema.String,
  revision: Schema.Number,
  body: Body,
  createdAt: Schema.Number,
  updatedAt: Schema.Number
})
type RevisionRow = typeof RevisionRow.Type

/** A revision as turns use it: the template's settings and its tool sources with their secrets opened. */
export interface Resolved {
  readonly id: string
  readonly revision: number
  readonly model?: string | undefined
  readonly systemPrompt?: string | undefined
  readonly thinkingLevel?: string | undefined
  readonly fileTools?: boolean | undefined
  readonly builtins: ReadonlyArray<string>
  readonly delegate?: Definition.Definition["delegate"]
  readonly humanInput?: Definition.Definition["humanInput"]
  readonly toolSources: ReadonlyArray<ToolSources.Source & { readonly exposure?: "direct" | "codemode" | "both" }>
}

export interface Service {
  readonly create: (
    tenantId: string,
    input: Definition.DefinitionInput
  ) => Effect.Effect<Definition.Definition, ApiError.InvalidRequest | PersistenceError.PersistenceError>
  /**
   * Creates or updates the tenant's live definition under `key`: the first call creates it at revision 1;
   * later ones answer it as it is when `input` says what its latest revision says, else write the next
   * revision holding `input` (a source's secret left out keeps the same-named source's, as on update).
   * `created` tells which.
   */
  readonly upsert: (
    tenantId: string,
    key: string,
    input: Definition.DefinitionInput
  ) => Effect.Effect<
    { readonly definition: Definition.Definition; readonly created: boolean },
    ApiError.InvalidRequest | PersistenceError.PersistenceError
  >
  /** The latest revision of each live definition, by id. */
  readonly list: (
    tenantId: string,
    params: Common.PageParams
  ) => Effect.Effect<
    { readonly data: ReadonlyArray<Definition.Definition>; readonly next: string | null },
    PersistenceError.PersistenceError
  >
  /** The latest revision, or the one asked for (also of a deleted definition, for the agents pinned to it). */
  readonly get: (
    tenantId: string,
    id: string,
    revision?: number
  ) => Effect.Effect<Definition.Definition, ApiError.NotFound | PersistenceError.PersistenceError>
  /** Writes the next revision: what `input` gives changes, the rest is kept. */
  readonly update: (
    tenantId: string,
    id: string,
    input: Definition.DefinitionUpdate
  ) => Effect.Effect<
    Definition.Definition,
    ApiError.NotFound | ApiError.InvalidRequest | PersistenceError.PersistenceError
  >
  /** Hides the definition from new agents; its revisions stay for the agents made from it. */
  readonly remove: (
    tenantId: string,
    id: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** A revision with its secrets opened; revisions never change, so each is read once per node. */
  readonly resolve: (
    tenantId: string,
    id: string,
    revision?: number
  ) => Effect.Effect<Resolved, ApiError.NotFound | PersistenceError.PersistenceError>
}

export class Definitions extends Context.Tag("@agent-runtime/agent/Definitions")<Definitions, Service>() {}

const last4 = (secret: string) => secret.slice(-4)

const sealContext = (tenantId: string, id: string, source: string) =>
  `tenant:${tenantId}/definition:${id}/source:${source}`

/** JSON with every object's keys sorted: two bodies compared whatever order their keys came in (jsonb reorders them). */
const canonical = (value: unknown): string =>
  JSON.stringify(value, (_key, field: unknown) =>
    field !== null && typeof field === "object" && !Array.isArray(field)
      ? Object.fromEntries(Object.entries(field).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : field)

const toRecord = (row: RevisionRow): Definition.Definition =>
  new Definition.Definition({
    id: row.id,
    revision: row.revision,
    name: row.body.name,
    ...(row.body.description === undefined ? {} : { description: row.body.description }),
    ...(row.body.model === undefined ? {} : { model: row.body.model }),
    ...(row.body.systemPrompt === undefined ? {} : { systemPrompt: row.body.systemPrompt }),
    ...(row.body.thinkingLevel === undefined ? {} : { thinkingLevel: row.body.thinkingLevel }),
    ...(row.body.fileTools === undefined ? {} : { fileTools: row.body.fileTools }),
    builtins: row.body.builtins as Definition.Definition["builtins"],
    ...(row.body.delegate === undefined ? {} : { delegate: row.body.delegate }),
    ...(row.body.humanInput === undefined ? {} : { humanInput: row.body.humanInput }),
    toolSources: row.body.toolSources.map((source) =>
      new Definition.ToolSourceSettings({
        kind: source.kind,
        name: source.name,
        ...(source.url === undefined ? {} : { url: source.url }),
        ...(source.document === undefined ? {} : { document: true }),
        ...(source.baseUrl === undefined ? {} : { baseUrl: source.baseUrl }),
        auth: new Definition.SourceAuth({
          type: source.auth.type,
          ...(source.auth.type === "header" ? { name: source.auth.name } : {}),
          ...("last4" in source.auth ? { last4: source.auth.last4 } : {})
        }),
        ...(source.tools === undefined ? {} : { tools: new Definition.ToolFilter(source.tools) }),
        ...(source.operations === undefined ? {} : { operations: new Definition.ToolFilter(source.operations) }),
        ...(source.exposure === undefined ? {} : { exposure: source.exposure })
      })
    ),
    createdAt: row.createdAt,
    updatedAt: row.updatedAt
  })

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const sealer = yield* SealedSecret.Sealer
  const egress = yield* Egress.Egress
  const decodeRows = Schema.decodeUnknown(Schema.Array(RevisionRow))

  /**
   * The sources as a revision keeps them: URLs checked, new secrets sealed, a
   * secret left out taken from the same-named source of `previous`.
   */
  const storeSources = (
    tenantId: string,
    id: string,
    inputs: ReadonlyArray<Definition.ToolSourceInput>,
    previous: ReadonlyArray<StoredSource>
  ) =>
    Effect.forEach(inputs, (input) =>
      Effect.gen(function*() {
        const invalid = (error: string) => new ApiError.InvalidRequest({ error: `toolSources ${input.name}: ${error}` })
        for (const url of [input.url, input.kind === "openapi" ? input.baseUrl : undefined]) {
          if (url === undefined) continue
          yield* Effect.mapError(
            egress.check(url),
            (refusal) => invalid(`${url} may not be called: ${refusal.message}`)
          )
        }
        const auth = input.auth ?? { type: "none" as const }
        if (auth.type === "header" && input.kind === "mcp") {
          return yield* invalid("header auth is for OpenAPI sources; use bearer or runtime")
        }
        const previousAuth = previous.find((source) => source.name === input.name)?.auth
        const kept = previousAuth !== undefined && previousAuth.type === auth.type && "sealed" in previousAuth
          ? previousAuth
          : undefined
        const context = sealContext(tenantId, id, input.name)
        const sealed = (secret: string | undefined, field: string) =>
          Effect.gen(function*() {
            if (secret === undefined) {
              if (kept === undefined) return yield* invalid(`auth.${field} is required`)
              return { sealed: kept.sealed, last4: kept.last4 }
            }
            // The same secret again keeps its sealed form (sealing anew differs each time), so a revision that
            // repeats its input is seen to be unchanged.
            const same = kept !== undefined &&
              Option.exists(yield* Effect.option(sealer.open(kept.sealed, context)), (open) =>
                Redacted.value(open) === secret)
            return same
              ? { sealed: kept.sealed, last4: kept.last4 }
              : { sealed: sealer.seal(secret, context), last4: last4(secret) }
          })
        const stored: StoredAuth = auth.type === "bearer"
          ? { type: "bearer", ...(yield* sealed(auth.token, "token")) }
          : auth.type === "header"
          ? { type: "header", name: auth.name, ...(yield* sealed(auth.value, "value")) }
          : { type: auth.type }
        const { auth: _auth, ...settings } = input
        const source: StoredSource = { ...settings, auth: stored }
        return source
      }))

  const select = (tenantId: string, id: string, revision: number | undefined, live: boolean) =>
    sql`
      SELECT d.id, r.revision, r.body,
        floor(extract(epoch from d.created_at))::float8 AS created_at,
        floor(extract(epoch from r.created_at))::float8 AS updated_at
      FROM definitions d
      JOIN definition_revisions r ON r.definition_id = d.id AND r.revision = ${
      revision === undefined ? sql`d.revision` : revision
    }
      WHERE d.id = ${id} AND d.tenant_id = ${tenantId} ${live ? sql`AND d.deleted_at IS NULL` : sql``}`.pipe(
      Effect.flatMap(decodeRows),
      PersistenceError.PersistenceError.refail,
      Effect.flatMap((rows) =>
        rows.length === 0
          ? Effect.fail(
            new ApiError.NotFound({
              error: revision === undefined ? `no definition ${id}` : `no definition ${id} at revision ${revision}`
            })
          )
          : Effect.succeed(rows[0]!)
      )
    )

  const insertRevision = (id: string, revision: number, body: Body) =>
    sql`INSERT INTO definition_revisions (definition_id, revision, body)
      VALUES (${id}, ${revision}, ${JSON.stringify(body)}::jsonb)`

  /** What a revision keeps of a whole input; a source's secret left out is taken from `previous`. */
  const bodyOf = (
    tenantId: string,
    id: string,
    input: Definition.DefinitionInput,
    previous: ReadonlyArray<StoredSource>
  ) =>
    Effect.map(
      storeSources(tenantId, id, input.toolSources ?? [], previous),
      (toolSources): Body => ({ ...input, builtins: input.builtins ?? [], toolSources })
    )

  /** Inserts a definition at revision 1; false, writing nothing, when a live one of the tenant holds `key`. */
  const insert = (tenantId: string, id: string, key: string | null, body: Body) =>
    sql.withTransaction(Effect.gen(function*() {
      const inserted = yield* sql`
        INSERT INTO definitions ${sql.insert({ id, tenantId, revision: 1, idempotencyKey: key })}
        ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL AND deleted_at IS NULL
        DO NOTHING RETURNING id`
      if (inserted.length === 0) return false
      yield* insertRevision(id, 1, body)
      return true
    })).pipe(PersistenceError.PersistenceError.refail)

  /** Writes `body` as the next revision; None when the definition is gone. */
  const writeRevision = (id: string, body: Body) =>
    // Two writes at once: the row lock orders them, and each writes the revision after the one it found.
    sql.withTransaction(Effect.gen(function*() {
      const [locked] = yield* sql<{ revision: number }>`
        SELECT revision FROM definitions WHERE id = ${id} AND deleted_at IS NULL FOR UPDATE`
      if (locked === undefined) return Option.none<number>()
      const revision = locked.revision + 1
      yield* insertRevision(id, revision, body)
      yield* sql`UPDATE definitions SET revision = ${revision} WHERE id = ${id}`
      return Option.some(revision)
    })).pipe(PersistenceError.PersistenceError.refail)

  /** A revision just written in the same tenant: not finding it would be a bug. */
  const written = (tenantId: string, id: string, revision: number) =>
    Effect.map(select(tenantId, id, revision, false).pipe(Effect.catchTag("NotFound", Effect.die)), toRecord)

  const create: Service["create"] = (tenantId, input) =>
    Effect.gen(function*() {
      const id = Ids.make("def")
      yield* insert(tenantId, id, null, yield* bodyOf(tenantId, id, input, []))
      return yield* written(tenantId, id, 1)
    })

  const upsert: Service["upsert"] = (tenantId, key, input) =>
    Effect.gen(function*() {
      const [found] = yield* sql<{ id: string }>`
        SELECT id FROM definitions
        WHERE tenant_id = ${tenantId} AND idempotency_key = ${key} AND deleted_at IS NULL`.pipe(
        PersistenceError.PersistenceError.refail
      )
      if (found === undefined) {
        const id = Ids.make("def")
        if (yield* insert(tenantId, id, key, yield* bodyOf(tenantId, id, input, []))) {
          return { definition: yield* written(tenantId, id, 1), created: true }
        }
        // Another call made it meanwhile: this one is a repeat of that.
        return yield* upsert(tenantId, key, input)
      }
      const current = yield* select(tenantId, found.id, undefined, true)
      const body = yield* bodyOf(tenantId, found.id, input, current.body.toolSources)
      if (canonical(body) === canonical(current.body)) return { definition: toRecord(current), created: false }
      const revision = yield* writeRevision(found.id, body)
      // Deleted meanwhile, which frees the key: the next try makes a new one.
      if (Option.isNone(revision)) return yield* upsert(tenantId, key, input)
      return { definition: yield* written(tenantId, found.id, revision.value), created: false }
    }).pipe(
      // Deleted between finding it and reading it: likewise.
      Effect.catchTag("NotFound", () => upsert(tenantId, key, input))
    )

  const list: Service["list"] = (tenantId, params) =>
    sql`
      SELECT d.id, r.revision, r.body,
        floor(extract(epoch from d.created_at))::float8 AS created_at,
        floor(extract(epoch from r.created_at))::float8 AS updated_at
      FROM definitions d
      JOIN definition_revisions r ON r.definition_id = d.id AND r.revision = d.revision
      WHERE d.tenant_id = ${tenantId} AND d.deleted_at IS NULL
        ${params.after === undefined ? sql`` : sql`AND d.id > ${params.after}`}
      ORDER BY d.id
      LIMIT ${Common.pageQueryLimit(params)}`.pipe(
      Effect.flatMap(decodeRows),
      PersistenceError.PersistenceError.refail,
      Effect.map((rows) => Common.toPage(rows.map(toRecord), params))
    )

  const get: Service["get"] = (tenantId, id, revision) =>
    Effect.map(select(tenantId, id, revision, revision === undefined), toRecord)

  const update: Service["update"] = (tenantId, id, input) =>
    Effect.gen(function*() {
      const current = yield* select(tenantId, id, undefined, true)
      const next: Record<string, unknown> = { ...current.body }
      for (const [field, value] of Object.entries(input)) {
        if (field === "toolSources") continue
        if (value === null) delete next[field]
        else if (value !== undefined) next[field] = value
      }
      const body = {
        ...next,
        toolSources: input.toolSources === undefined
          ? current.body.toolSources
          : yield* storeSources(tenantId, id, input.toolSources, current.body.toolSources)
      } as Body
      const revision = yield* writeRevision(id, body)
      if (Option.isNone(revision)) return yield* new ApiError.NotFound({ error: `no definition ${id}` })
      return yield* written(tenantId, id, revision.value)
    })

  const remove: Service["remove"] = (tenantId, id) =>
    sql<{ id: string }>`
      UPDATE definitions SET deleted_at = now()
      WHERE id = ${id} AND tenant_id = ${tenantId} AND deleted_at IS NULL
      RETURNING id`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap(Common.deleted(id, `no definition ${id}`))
    )

  const open = (tenantId: string, id: string, source: StoredSource): Effect.Effect<Resolved["toolSources"][number]> =>
    Effect.gen(function*() {
      const secret = (sealed: string) => Effect.orDie(sealer.open(sealed, sealContext(tenantId, id, source.name)))
      const auth = source.auth.type === "bearer"
        ? { type: "bearer" as const, token: yield* secret(source.auth.sealed) }
        : source.auth.type === "header"
        ? { type: "header" as const, name: source.auth.name, value: yield* secret(source.auth.sealed) }
        : { type: source.auth.type }
      const exposure = source.exposure === undefined ? {} : { exposure: source.exposure }
      if (source.kind === "mcp") {
        return {
          kind: "mcp",
          name: source.name,
          url: source.url!,
          // Header auth is refused for MCP sources when saved.
          auth: auth as Exclude<typeof auth, { type: "header" }>,
          ...(source.tools === undefined ? {} : { tools: source.tools as ToolSources.Filter }),
          ...exposure
        }
      }
      return {
        kind: "openapi",
        name: source.name,
        ...(source.url === undefined ? {} : { url: source.url }),
        ...(source.document === undefined ? {} : { document: source.document }),
        ...(source.baseUrl === undefined ? {} : { baseUrl: source.baseUrl }),
        auth,
        ...(source.operations === undefined ? {} : { operations: source.operations as ToolSources.Filter }),
        ...exposure
      }
    })

  // Revisions never change: each is read and opened once per node. Failures are not kept.
  const resolved = new Map<string, Resolved>()
  const resolveRevision = (tenantId: string, id: string, revision: number) =>
    Effect.suspend(() => {
      const key = `${tenantId}/${id}/${revision}`
      const known = resolved.get(key)
      if (known !== undefined) return Effect.succeed(known)
      return select(tenantId, id, revision, false).pipe(
        Effect.flatMap((row) =>
          Effect.map(
            Effect.forEach(row.body.toolSources, (source) => open(tenantId, id, source)),
            (toolSources): Resolved => ({
              id,
              revision: row.revision,
              model: row.body.model,
              systemPrompt: row.body.systemPrompt,
              thinkingLevel: row.body.thinkingLevel,
              fileTools: row.body.fileTools,
              builtins: row.body.builtins,
              delegate: row.body.delegate,
              humanInput: row.body.humanInput,
              toolSources
            })
          )
        ),
        Effect.tap((revision) => {
          if (resolved.size >= 4096) resolved.delete(resolved.keys().next().value!)
          resolved.set(key, revision)
        })
      )
    })

  const resolve: Service["resolve"] = (tenantId, id, revision) =>
    revision === undefined
      ? Effect.flatMap(select(tenantId, id, undefined, true), (row) => resolveRevision(tenantId, id, row.revision))
      : resolveRevision(tenantId, id, revision)

  return Definitions.of({ create, upsert, list, get, update, remove, resolve })
})

export const layer: Layer.Layer<Definitions, never, SqlClient.SqlClient | SealedSecret.Sealer | Egress.Egress> = Layer
  .effect(Definitions, make)
