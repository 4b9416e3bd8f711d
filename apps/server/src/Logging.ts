/**
 * Structured logs: logfmt by default, JSON lines with LOG_FORMAT=json. A line written inside a span carries
 * its `trace_id` and `span_id`, the names OpenTelemetry gives them in logs of other formats, so a line leads
 * to its trace (when the node exports traces, see Tracing) and the lines of one request or turn go together.
 */
import {
  Config,
  type ConfigError,
  Context,
  Effect,
  FiberRef,
  FiberRefs,
  HashMap,
  Layer,
  Logger,
  LogLevel,
  Tracer
} from "effect"

const withTraceIds = <A>(logger: Logger.Logger<unknown, A>): Logger.Logger<unknown, A> =>
  Logger.mapInputOptions(logger, (options) => {
    const span = Context.getOption(FiberRefs.getOrDefault(options.context, FiberRef.currentContext), Tracer.ParentSpan)
    // A no-op span (made where the tracer is off, see NodeSpans) names no trace.
    if (span._tag === "None" || span.value.traceId === "noop") return options
    return {
      ...options,
      annotations: HashMap.set(
        HashMap.set(options.annotations, "trace_id", span.value.traceId),
        "span_id",
        span.value.spanId
      )
    }
  })

// Made once: a logger is kept in a set, so the layer provided twice (as `main.ts` does) still writes each line once.
const loggers = {
  logfmt: withTraceIds(Logger.withConsoleLog(Logger.logfmtLogger)),
  json: withTraceIds(Logger.withConsoleLog(Logger.jsonLogger)),
  pretty: withTraceIds(Logger.prettyLoggerDefault)
}

export const layer: Layer.Layer<never, ConfigError.ConfigError> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const format = yield* Config.literal("logfmt", "json", "pretty")("LOG_FORMAT").pipe(Config.withDefault("logfmt"))
    const level = yield* Config.logLevel("LOG_LEVEL").pipe(Config.withDefault(LogLevel.Info))
    return Layer.merge(Logger.replace(Logger.defaultLogger, loggers[format]), Logger.minimumLogLevel(level))
  })
)
