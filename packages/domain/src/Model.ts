/**
 * The model catalog (GET /v1/models): every model an agent may name, with
 * its prices and whether the tenant has a key for its provider.
 */
import { Schema } from "effect"

/** Prices in USD per million tokens. */
export class ModelCost extends Schema.Class<ModelCost>("ModelCost")({
  input: Schema.Number,
  output: Schema.Number,
  cacheRead: Schema.Number,
  cacheWrite: Schema.Number
}) {}

export class Model extends Schema.Class<Model>("Model")({
  id: Schema.String.annotations({ description: "provider/model-id; pass as `model`" }),
  provider: Schema.String,
  modelId: Schema.String,
  name: Schema.String,
  api: Schema.String,
  reasoning: Schema.Boolean,
  input: Schema.Array(Schema.String).annotations({ description: "input kinds the model takes (text, image)" }),
  contextWindow: Schema.Number,
  maxTokens: Schema.Number,
  cost: ModelCost,
  available: Schema.Boolean.annotations({ description: "the tenant has a key for the provider" })
}) {}
