/**
 * What can go wrong calling a model. Transient failures (rate limit,
 * overload, server error, network) are retried by `ModelClient`; the others
 * end the call.
 */
import { Schema } from "effect"

/** The model names no provider or model the tenant can use. */
export class UnknownModel extends Schema.TaggedError<UnknownModel>()("UnknownModel", {
  model: Schema.String
}) {
  override get message() {
    return `unknown model ${this.model}`
  }
}

/** No key for the model's provider in the key scope, the tenant or the platform. */
export class ModelKeyMissing extends Schema.TaggedError<ModelKeyMissing>()("ModelKeyMissing", {
  provider: Schema.String
}) {
  override get message() {
    return `no key for provider ${this.provider}`
  }
}

/** The provider refused the key (401/403). */
export class ModelKeyInvalid extends Schema.TaggedError<ModelKeyInvalid>()("ModelKeyInvalid", {
  provider: Schema.String,
  status: Schema.Number,
  detail: Schema.String
}) {
  override get message() {
    return `provider ${this.provider} refused the key (${this.status}): ${this.detail}`
  }
}

export class ModelRateLimited extends Schema.TaggedError<ModelRateLimited>()("ModelRateLimited", {
  provider: Schema.String,
  /** Seconds the provider asked to wait, when it said. */
  retryAfter: Schema.optional(Schema.Number),
  detail: Schema.String
}) {
  override get message() {
    return `provider ${this.provider} rate limited the call: ${this.detail}`
  }
}

export class ModelOverloaded extends Schema.TaggedError<ModelOverloaded>()("ModelOverloaded", {
  provider: Schema.String,
  status: Schema.Number,
  retryAfter: Schema.optional(Schema.Number),
  detail: Schema.String
}) {
  override get message() {
    return `provider ${this.provider} is overloaded or failing (${this.status}): ${this.detail}`
  }
}

export class ContextOverflow extends Schema.TaggedError<ContextOverflow>()("ContextOverflow", {
  provider: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `the request exceeds the model's context window: ${this.detail}`
  }
}

/** The provider could not be reached, or the connection broke. */
export class ModelNetworkError extends Schema.TaggedError<ModelNetworkError>()("ModelNetworkError", {
  provider: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `provider ${this.provider} unreachable: ${this.detail}`
  }
}

/** Any other refusal by the provider (400 and the like): not retried. */
export class ModelRequestRefused extends Schema.TaggedError<ModelRequestRefused>()("ModelRequestRefused", {
  provider: Schema.String,
  status: Schema.Number,
  detail: Schema.String
}) {
  override get message() {
    return `provider ${this.provider} refused the request (${this.status}): ${this.detail}`
  }
}

/** The endpoint's address is not one the service may call (see the egress rules). */
export class ModelEndpointRefused extends Schema.TaggedError<ModelEndpointRefused>()("ModelEndpointRefused", {
  provider: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `provider ${this.provider} endpoint refused: ${this.detail}`
  }
}

export type ModelError =
  | UnknownModel
  | ModelKeyMissing
  | ModelKeyInvalid
  | ModelRateLimited
  | ModelOverloaded
  | ContextOverflow
  | ModelNetworkError
  | ModelRequestRefused
  | ModelEndpointRefused

export type Transient = ModelRateLimited | ModelOverloaded | ModelNetworkError

export const isTransient = (error: ModelError): error is Transient =>
  error._tag === "ModelRateLimited" || error._tag === "ModelOverloaded" || error._tag === "ModelNetworkError"
