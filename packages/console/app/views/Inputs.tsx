/**
 * An agent's pending inputs and their answer forms: questions (options or own
 * words), approvals (with the exact arguments), forms rendered from their
 * JSON Schema, and pages to open. Answers go to the API as the console's
 * person.
 */
import type { JSX } from "preact"
import { useId } from "preact/hooks"
import { api, path, type PendingInput } from "../Api.ts"
import { ErrorNote, pretty, useAction } from "../ui.tsx"
import { httpUrl } from "../Urls.ts"

type Answer = { readonly action: "accept" | "decline" | "cancel"; readonly content?: unknown }

const kindTitles: Record<string, string> = {
  question: "A question",
  approval: "An approval",
  form: "A form to fill in",
  url: "A page to open"
}

const Buttons = (
  { accept, busy, cancel }: { readonly accept: string; readonly busy: boolean; readonly cancel?: true }
) => (
  <div class="actions">
    <button type="submit" value="accept" disabled={busy}>{accept}</button>
    <button type="submit" value="decline" class="secondary" disabled={busy}>Decline</button>
    {cancel ? <button type="submit" value="cancel" class="secondary" disabled={busy}>Cancel</button> : null}
  </div>
)

/** The question form's fields; read back by name on submit. */
const QuestionFields = ({ detail }: { readonly detail: any }) => {
  const prefix = useId()
  const questions: Array<any> = Array.isArray(detail.questions)
    ? detail.questions.filter((question: any) => typeof question?.question === "string")
    : []
  return (
    <>
      {questions.map((question, i) => {
        const options: Array<any> = Array.isArray(question.options)
          ? question.options.filter((option: any) => typeof option?.label === "string")
          : []
        return (
          <fieldset>
            <legend>{question.header ? `${question.header}: ${question.question}` : question.question}</legend>
            {options.map((option, j) => (
              <div class="option">
                <input
                  id={`${prefix}-${i}-${j}`}
                  type={question.multiSelect === true ? "checkbox" : "radio"}
                  name={`q${i}`}
                  value={option.label}
                />
                <label for={`${prefix}-${i}-${j}`}>
                  {option.label}
                  {typeof option.description === "string"
                    ? <span class="hint">{option.description}</span>
                    : null}
                </label>
              </div>
            ))}
            <label class="field">
              <span class="field-label">{options.length > 0 ? "Or in your own words" : "Your answer"}</span>
              <input name={`own${i}`} type="text" autoComplete="off" />
            </label>
          </fieldset>
        )
      })}
    </>
  )
}

const questionAnswer = (detail: any, data: FormData): Answer | string => {
  const questions: Array<any> = Array.isArray(detail.questions)
    ? detail.questions.filter((question: any) => typeof question?.question === "string")
    : []
  const answers: Record<string, string | Array<string>> = {}
  questions.forEach((question, i) => {
    const own = String(data.get(`own${i}`) ?? "").trim()
    const chosen = data.getAll(`q${i}`).map(String)
    if (own !== "") answers[question.question] = own
    else if (chosen.length > 0) answers[question.question] = question.multiSelect === true ? chosen : chosen[0]!
  })
  return Object.keys(answers).length === 0
    ? "Choose an answer, or write one."
    : { action: "accept", content: { answers } }
}

/** Fields from the form's JSON Schema (flat objects of strings, numbers, booleans and choices). */
const SchemaFields = ({ detail }: { readonly detail: any }) => {
  const schema = typeof detail.requestedSchema === "object" && detail.requestedSchema !== null
    ? detail.requestedSchema
    : {}
  const properties: Record<string, any> = typeof schema.properties === "object" && schema.properties !== null
    ? schema.properties
    : {}
  const required = new Set<string>(Array.isArray(schema.required) ? schema.required : [])
  return (
    <>
      {Object.entries(properties).map(([name, property]) => {
        const title = typeof property?.title === "string" ? property.title : name
        const must = required.has(name)
        const hint = typeof property?.description === "string" ? property.description : undefined
        const label = `${title}${must ? " (required)" : ""}`
        let control: JSX.Element
        if (Array.isArray(property?.enum)) {
          control = (
            <select name={name} required={must}>
              <option value="">{must ? "Choose…" : "(none)"}</option>
              {property.enum.map((value: unknown, i: number) => (
                <option value={String(i)} selected={value === property.default}>
                  {Array.isArray(property.enumNames) && typeof property.enumNames[i] === "string"
                    ? property.enumNames[i]
                    : String(value)}
                </option>
              ))}
            </select>
          )
        } else if (property?.type === "boolean") {
          control = <input type="checkbox" name={name} checked={property.default === true} />
        } else if (property?.type === "number" || property?.type === "integer") {
          control = (
            <input
              type="number"
              name={name}
              required={must}
              step={property.type === "integer" ? 1 : "any"}
              min={property.minimum}
              max={property.maximum}
              value={typeof property.default === "number" ? property.default : undefined}
            />
          )
        } else {
          control = (
            <input
              type={property?.format === "email"
                ? "email"
                : property?.format === "uri"
                ? "url"
                : property?.format === "date"
                ? "date"
                : "text"}
              name={name}
              required={must}
              minLength={property?.minLength}
              maxLength={property?.maxLength}
              value={typeof property?.default === "string" ? property.default : undefined}
            />
          )
        }
        return (
          <label class="field">
            <span class="field-label">{label}</span>
            {control}
            {hint === undefined ? null : <span class="hint">{hint}</span>}
          </label>
        )
      })}
    </>
  )
}

const formAnswer = (detail: any, data: FormData, form: HTMLFormElement): Answer | string | undefined => {
  if (!form.reportValidity()) return undefined
  const properties: Record<string, any> = detail.requestedSchema?.properties ?? {}
  const content: Record<string, unknown> = {}
  for (const [name, property] of Object.entries(properties)) {
    const value = data.get(name)
    if (property?.type === "boolean") content[name] = value !== null
    else if (value === null || value === "") continue
    else if (Array.isArray(property?.enum)) content[name] = property.enum[Number(value)]
    else if (property?.type === "number" || property?.type === "integer") content[name] = Number(value)
    else content[name] = String(value)
  }
  return { action: "accept", content }
}

export const InputCard = (
  { agentId, input, onAnswered }: {
    readonly agentId: string
    readonly input: PendingInput
    readonly onAnswered: () => void
  }
) => {
  const action = useAction()
  const problem = useAction()
  const detail: any = input.detail
  const url = input.kind === "url" ? httpUrl(detail.url) : undefined
  const titleId = useId()
  const onSubmit = async (event: JSX.TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault()
    const form = event.currentTarget
    const chosen = (event.submitter as HTMLButtonElement | null)?.value ?? "accept"
    const data = new FormData(form)
    let answer: Answer | string | undefined
    if (chosen === "decline" || chosen === "cancel") {
      const reason = String(data.get("reason") ?? "").trim()
      answer = {
        action: chosen,
        ...(input.kind === "approval" && chosen === "decline" && reason !== "" ? { content: { reason } } : {})
      }
    } else if (input.kind === "question") answer = questionAnswer(detail, data)
    else if (input.kind === "approval") {
      answer = {
        action: "accept",
        content: typeof detail.argumentsHash === "string" ? { argumentsHash: detail.argumentsHash } : {}
      }
    } else if (input.kind === "form") answer = formAnswer(detail, data, form)
    else answer = { action: "accept" }
    if (answer === undefined) return
    if (typeof answer === "string") {
      await problem.run(() => Promise.reject(new Error(answer)))
      return
    }
    const sent = answer
    const done = await action.run(() =>
      api(path`/v1/agents/${agentId}/inputs/${input.id}/answer`, { method: "POST", body: sent }).then(() => true)
    )
    if (done) onAnswered()
  }
  return (
    <article class="card input" aria-labelledby={titleId} data-kind={input.kind}>
      <h3 id={titleId}>{input.message === "" ? kindTitles[input.kind] : input.message}</h3>
      <p class="muted small">
        {kindTitles[input.kind]}, open until {new Date(input.expiresAt * 1000).toLocaleString()}.
      </p>
      <form onSubmit={onSubmit} noValidate>
        {input.kind === "question" ? <QuestionFields detail={detail} /> : null}
        {input.kind === "approval"
          ? (
            <>
              <p>
                Tool <code>{String(detail.tool ?? "")}</code>
                {typeof detail.source === "string" ? ` (from ${detail.source})` : ""} with these arguments:
              </p>
              <pre>{pretty(detail.arguments ?? {})}</pre>
              <label class="field">
                <span class="field-label">Reason (sent if you decline)</span>
                <textarea name="reason" rows={2} maxLength={2000} />
              </label>
            </>
          )
          : null}
        {input.kind === "form" ? <SchemaFields detail={detail} /> : null}
        {input.kind === "url"
          ? url === undefined
            ? <p class="error">The agent asks you to open an address the console does not open.</p>
            : (
              <p>
                This opens a page at <strong>{url.origin}</strong>
                {url.origin === detail.origin ?
                  null :
                  (
                    <span class="error">
                      The agent named the origin {String(detail.origin)}, which is not where the link goes.
                    </span>
                  )}
                : <a href={url.href} target="_blank" rel="noopener noreferrer">open it</a>.
              </p>
            )
          : null}
        <Buttons
          accept={input.kind === "approval" ? "Approve" : input.kind === "url" ? "I am done" : "Send answer"}
          busy={action.busy}
          {...(input.kind === "form" ? { cancel: true as const } : {})}
        />
      </form>
      <ErrorNote error={problem.error ?? action.error} />
    </article>
  )
}
