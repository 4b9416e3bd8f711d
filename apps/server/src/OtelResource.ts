/**
 * This node as OpenTelemetry names it, for its traces and its metrics alike: `service.name`
 * (`OTEL_SERVICE_NAME`, by default `agent-runtime`), `service.version` (the server's), and
 * `service.instance.id`, the runner's address, which tells the nodes of a cluster apart. Further attributes
 * come from `OTEL_RESOURCE_ATTRIBUTES`.
 */
import { Resource } from "@effect/opentelemetry"
import { ATTR_SERVICE_INSTANCE_ID } from "@opentelemetry/semantic-conventions"
import { Config, type ConfigError, Effect, Layer } from "effect"
import serverPackage from "../package.json" with { type: "json" }
import * as Runners from "./Runners.ts"
import { ServerConfig } from "./ServerConfig.ts"

export const serviceName: Config.Config<string> = Config.string("OTEL_SERVICE_NAME").pipe(
  Config.withDefault("agent-runtime")
)

export const layer: Layer.Layer<Resource.Resource, ConfigError.ConfigError, ServerConfig> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const server = yield* ServerConfig
    return Resource.layerFromEnv({
      ...Resource.configToAttributes({ serviceName: yield* serviceName, serviceVersion: serverPackage.version }),
      [ATTR_SERVICE_INSTANCE_ID]: Runners.addressOf(server)
    })
  })
)
