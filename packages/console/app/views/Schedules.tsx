/** Schedules: what every agent will be told, and when; cancelled here. */
import { api, path, type ScheduleInfo } from "../Api.ts"
import { ConfirmButton, ErrorNote, Loading, Page, Table, Time, useAction, useLoad } from "../ui.tsx"

export const Schedules = () => {
  const schedules = useLoad(() => api<Array<ScheduleInfo>>("/v1/schedules"), [])
  const action = useAction()
  return (
    <Page title="Schedules">
      <ErrorNote error={action.error ?? schedules.error} />
      {schedules.data === undefined ? <Loading what="schedules" /> : (
        <Table
          label="Schedules"
          rows={schedules.data}
          rowKey={(schedule) => schedule.id}
          empty="Nothing is scheduled."
          columns={[
            {
              label: "Agent",
              render: (schedule) => (
                <a class="mono small" href={`/console/agents/${encodeURIComponent(schedule.agent)}`}>
                  {schedule.agent}
                </a>
              )
            },
            { label: "Due", render: (schedule) => <Time at={schedule.dueAt} /> },
            {
              label: "Repeats",
              render: (schedule) => schedule.everySeconds === undefined ? "no" : `every ${schedule.everySeconds} s`
            },
            { label: "What", render: (schedule) => schedule.text ?? <code>{schedule.code?.slice(0, 80)}</code> },
            {
              label: "",
              class: "row-actions",
              render: (schedule) => (
                <ConfirmButton
                  confirm="Cancel it"
                  onConfirm={() =>
                    action.run(() =>
                      api(path`/v1/agents/${schedule.agent}/schedules/${schedule.id}`, { method: "DELETE" })
                    ).then(schedules.reload)}
                >
                  Cancel
                </ConfirmButton>
              )
            }
          ]}
        />
      )}
    </Page>
  )
}
