/**
 * `GET /v1/models` as one body both official SDKs page through: OpenAI's
 * `{object: "list", data: [{id, object: "model", created, owned_by}]}` and
 * Anthropic's `{data: [{type: "model", id, display_name, created_at}],
 * has_more, first_id, last_id}`, each entry carrying both sets of fields.
 * Listed are the models the tenant can call now: catalog models whose
 * provider has a key, and its custom models, of the APIs the gateway speaks.
 */
import type { Model } from "@agent-runtime/domain"
import { speaks } from "./translated.ts"

/** The catalog has no release dates; a fixed time keeps the listing stable. */
const epoch = 1_735_689_600

export const encode = (models: ReadonlyArray<Model.Model>) => {
  const data = models
    .filter((model) => model.available && speaks(model.api))
    .map((model) => ({
      id: model.id,
      object: "model",
      type: "model",
      created: epoch,
      created_at: new Date(epoch * 1000).toISOString(),
      owned_by: model.provider,
      display_name: model.name
    }))
  return {
    object: "list",
    data,
    has_more: false,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null
  }
}
