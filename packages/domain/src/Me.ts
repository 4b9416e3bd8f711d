import { Schema } from "effect"

export const Via = Schema.Literal("operator", "token", "console", "oauth")
export type Via = typeof Via.Type

export class Me extends Schema.Class<Me>("Me")({
  tenant: Schema.String.annotations({ description: "tenant id; served-tool verification needs it" }),
  via: Via,
  login: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  canStoreKeys: Schema.Boolean,
  defaultModel: Schema.String.annotations({
    description: "provider/model-id: the model an agent gets when it names none"
  })
}) {}
