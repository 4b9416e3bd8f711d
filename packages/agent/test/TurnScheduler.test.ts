/**
 * The turns' scheduler against the node's own I/O: a turn's step that waited goes on after the node has read
 * its sockets, so a request arriving while a turn works is answered between its steps, not after all of them.
 * The same busy turn on Effect's default scheduler is the control: it runs every step before the request.
 */
import { expect, it } from "@effect/vitest"
import { Effect, Scheduler } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { turnScheduler } from "../src/internal/turnScheduler.ts"

const steps = 40

/** A turn of `steps` steps, each waiting for a promise (as for a statement's answer) and then busy for 2 ms. */
const busyTurn = (progress: { done: number }) =>
  Effect.forEach(Array.from({ length: steps }), () =>
    Effect.zipRight(
      Effect.promise(() => Promise.resolve()),
      Effect.sync(() => {
        const until = performance.now() + 2
        while (performance.now() < until) {
          // busy, as a turn's own work
        }
        progress.done++
      })
    ), { discard: true })

/** How many of the turn's steps had run when a request sent as it began was answered. */
const stepsBeforeAnswer = (scheduler: Scheduler.Scheduler) =>
  Effect.acquireUseRelease(
    Effect.async<Http.Server>((resume) => {
      const server = Http.createServer((_request, response) => response.end("ok"))
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.gen(function*() {
        const { port } = server.address() as AddressInfo
        const progress = { done: 0 }
        // The connection is open and idle before the turn starts, as a client's keep-alive connection is.
        const agent = new Http.Agent({ keepAlive: true, maxSockets: 1 })
        const get = () =>
          new Promise<number>((resolve, reject) =>
            Http.get({ port, host: "127.0.0.1", agent }, (response) => {
              response.resume()
              response.on("end", () => resolve(progress.done))
            }).on("error", reject)
          )
        yield* Effect.promise(get)
        const turn = yield* Effect.fork(busyTurn(progress).pipe(Effect.withScheduler(scheduler)))
        const answeredAt = yield* Effect.promise(get)
        yield* turn.await
        agent.destroy()
        return answeredAt
      }),
    (server) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
      })
  )

it.live("a request arriving while a turn works is answered between the turn's steps", () =>
  Effect.gen(function*() {
    const onTurns = yield* stepsBeforeAnswer(turnScheduler)
    const onDefault = yield* stepsBeforeAnswer(Scheduler.defaultScheduler)
    expect(onDefault).toBe(steps)
    expect(onTurns).toBeLessThan(steps / 4)
  }))
