/**
 * The one place that imports the provider-protocol library: its catalog and
 * the stream function of each API we serve.
 */
import type {
  Api,
  AssistantMessageEventStream,
  Context as PiContext,
  Model,
  ProviderStreams,
  SimpleStreamOptions
} from "@earendil-works/pi-ai"
import { normalizeContext } from "@earendil-works/pi-ai"
import { anthropicMessagesApi } from "@earendil-works/pi-ai/api/anthropic-messages.lazy"
import { googleGenerativeAIApi } from "@earendil-works/pi-ai/api/google-generative-ai.lazy"
import { mistralConversationsApi } from "@earendil-works/pi-ai/api/mistral-conversations.lazy"
import { openAICompletionsApi } from "@earendil-works/pi-ai/api/openai-completions.lazy"
import { openAIResponsesApi } from "@earendil-works/pi-ai/api/openai-responses.lazy"
import { builtinProviders } from "@earendil-works/pi-ai/providers/all"

export type {
  Api,
  AssistantMessage,
  AssistantMessageEvent,
  Context,
  Message,
  Model,
  SimpleStreamOptions,
  ThinkingLevel,
  Tool,
  Usage
} from "@earendil-works/pi-ai"
export { calculateCost, isContextOverflow } from "@earendil-works/pi-ai"

/** APIs reachable with an API key and a base URL, which is what a multi-tenant server can offer. */
const apis: Record<string, () => ProviderStreams> = {
  "anthropic-messages": anthropicMessagesApi,
  "google-generative-ai": googleGenerativeAIApi,
  "mistral-conversations": mistralConversationsApi,
  "openai-completions": openAICompletionsApi,
  "openai-responses": openAIResponsesApi
}

export const supportsApi = (api: string) => api in apis

/** Providers that sell subscriptions signed in with OAuth rather than API keys. */
const subscriptionProviders = new Set(["openai-codex", "github-copilot", "kimi-coding", "radius"])

export interface BuiltinProvider {
  readonly id: string
  readonly name: string
  readonly models: ReadonlyArray<Model<Api>>
}

/** The built-in providers a tenant can use with an API key. */
export const builtins = (): ReadonlyArray<BuiltinProvider> =>
  builtinProviders().flatMap((provider) => {
    if (subscriptionProviders.has(provider.id) || !provider.auth.apiKey) return []
    const models = provider.getModels().filter((model) => supportsApi(model.api) && model.baseUrl !== "")
    return models.length === 0 ? [] : [{ id: provider.id, name: provider.name, models }]
  })

const streams = new Map<string, ProviderStreams>()

export const streamSimple = (
  model: Model<Api>,
  context: PiContext,
  options: SimpleStreamOptions
): AssistantMessageEventStream => {
  let api = streams.get(model.api)
  if (api === undefined) {
    api = apis[model.api]!()
    streams.set(model.api, api)
  }
  return api.streamSimple(model, normalizeContext(context), options)
}
