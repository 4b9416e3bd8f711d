/**
 * The node's own spans (the operator's traces, exported by OTLP when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set): the hot paths make theirs only
 * while the node exports them. A span costs the fiber its steps, a copy of
 * its context and a clock read at each end, and a turn made about a dozen;
 * without an exporter they went nowhere.
 */
import { Context, Effect } from "effect"

/** Whether this node exports its spans: the server's tracing layer sets it. */
export class Exporting extends Context.Reference<Exporting>()("@agent-runtime/telemetry/NodeSpans/Exporting", {
  defaultValue: () => false
}) {}

/**
 * `Effect.withSpan` while the node exports its spans (with no stack captured: the name says where the span
 * was made); the effect as it is otherwise. `attributes` are made only for a span.
 */
export const withSpan =
  (name: string, attributes?: () => Record<string, unknown>) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(
      Exporting,
      (exporting) =>
        exporting
          ? Effect.withSpan(self, name, {
            captureStackTrace: false,
            ...(attributes === undefined ? {} : { attributes: attributes() })
          })
          : self
    )

/**
 * The effect with the fiber's tracer off while the node exports no spans, so that no span is made in it at
 * all: libraries' spans included, such as the `sql.execute` of each statement (see the @effect/sql patch).
 * For the hot paths, around a loop rather than each turn: setting it and setting it back costs a few steps.
 */
export const untracedUnlessExporting = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Exporting, (exporting) => exporting ? self : Effect.withTracerEnabled(self, false))
