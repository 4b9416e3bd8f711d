/**
 * The scheduler of turns: work of a turn that waited (for the database, the model, a timer) goes on after
 * the node has read its sockets, so a request arriving while turns run (a prompt to accept, a request to
 * answer) is served before the turns' next steps, not behind them.
 */
import { Scheduler } from "effect"

class TurnScheduler implements Scheduler.Scheduler {
  #tasks: Array<Scheduler.Task> = []
  #scheduled = false

  scheduleTask(task: Scheduler.Task): void {
    this.#tasks.push(task)
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#drain)
    }
  }

  shouldYield(fiber: Parameters<Scheduler.Scheduler["shouldYield"]>[0]): number | false {
    return Scheduler.defaultShouldYield(fiber)
  }

  readonly #drain = () => {
    this.#scheduled = false
    // What is scheduled meanwhile waits for the next round, after the node's I/O.
    const tasks = this.#tasks
    this.#tasks = []
    for (const task of tasks) task()
  }
}

export const turnScheduler: Scheduler.Scheduler = new TurnScheduler()
