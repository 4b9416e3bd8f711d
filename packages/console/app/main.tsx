/**
 * The console: the app shell (who is signed in, the navigation) and its
 * routes under /console. Every view reads and writes through the HTTP API
 * (Api.ts); views other than the first are loaded when first shown.
 */
import "uplot/dist/uPlot.min.css"
import "./console.css"
import { render } from "preact"
import { lazy, LocationProvider, Route, Router, useLocation } from "preact-iso"
import { useState } from "preact/hooks"
import { api, ApiError, type MeInfo, operatorToken } from "./Api.ts"
import { ErrorNote, Loading, useLoad } from "./ui.tsx"
import { Agents } from "./views/Agents.tsx"

const AgentView = lazy(() => import("./views/Agent.tsx").then((module) => module.AgentView))
const Tokens = lazy(() => import("./views/Tokens.tsx").then((module) => module.Tokens))
const Webhooks = lazy(() => import("./views/Webhooks.tsx").then((module) => module.Webhooks))
const WebhookView = lazy(() => import("./views/Webhooks.tsx").then((module) => module.WebhookView))
const UsageView = lazy(() => import("./views/Usage.tsx").then((module) => module.UsageView))
const Operator = lazy(() => import("./views/Operator.tsx").then((module) => module.Operator))
const Models = lazy(() => import("./views/Models.tsx").then((module) => module.Models))
const Definitions = lazy(() => import("./views/Definitions.tsx").then((module) => module.Definitions))
const Volumes = lazy(() => import("./views/Volumes.tsx").then((module) => module.Volumes))
const VolumeView = lazy(() => import("./views/Volumes.tsx").then((module) => module.VolumeView))
const Schedules = lazy(() => import("./views/Schedules.tsx").then((module) => module.Schedules))
const Apps = lazy(() => import("./views/Apps.tsx").then((module) => module.Apps))

const base = "/console"

const tenantLinks = [
  [`${base}`, "Agents"],
  [`${base}/usage`, "Usage"],
  [`${base}/tokens`, "API tokens"],
  [`${base}/models`, "Models and keys"],
  [`${base}/definitions`, "Definitions"],
  [`${base}/webhooks`, "Webhooks"],
  [`${base}/volumes`, "Volumes"],
  [`${base}/schedules`, "Schedules"],
  [`${base}/apps`, "Connected apps"]
] as const

const Nav = ({ operator, tenant }: { readonly tenant: boolean; readonly operator: boolean }) => {
  const { path } = useLocation()
  const current = (href: string) =>
    href === base ? path === base || path.startsWith(`${base}/agents`) : path === href || path.startsWith(`${href}/`)
  return (
    <nav class="nav" aria-label="Console">
      <ul>
        {tenant
          ? tenantLinks.map(([href, label]) => (
            <li>
              <a href={href} aria-current={current(href) ? "page" : undefined}>{label}</a>
            </li>
          ))
          : null}
        <li>
          <a href={`${base}/operator`} aria-current={current(`${base}/operator`) ? "page" : undefined}>
            {operator ? "Operator" : "Operator sign-in"}
          </a>
        </li>
      </ul>
    </nav>
  )
}

/** Nobody is signed in here: the service's sign-in page, or the operator's token for the operator's views. */
const SignedOut = () => (
  <main id="main" class="signed-out">
    <h1>Agent Runtime console</h1>
    <p>Sign in to see your agents, keys, webhooks and usage.</p>
    <p>
      <a class="button" href={`/sign-in?next=${encodeURIComponent(location.pathname)}`}>Sign in</a>
    </p>
    <p>
      Operators: <a href={`${base}/operator`}>use the operator token</a>.
    </p>
  </main>
)

const SignOut = () => (
  <form method="post" action="/sign-out" class="sign-out">
    <button type="submit" class="secondary">Sign out</button>
  </form>
)

const Shell = () => {
  const me = useLoad(() =>
    api<MeInfo>("/v1/me").catch((error) => {
      if (error instanceof ApiError && error.status === 401) return null
      throw error
    }), [])
  const [operator, setOperator] = useState(operatorToken.get() !== null)
  const { path } = useLocation()
  if (me.data === undefined) {
    return me.error === undefined
      ? <Loading what="the console" />
      : <ErrorNote error={me.error} />
  }
  const signedIn = me.data !== null
  if (!signedIn && !operator && path !== `${base}/operator`) return <SignedOut />
  return (
    <div class="shell">
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <a class="brand" href={base}>Agent Runtime</a>
        <span class="who">
          {signedIn ? me.data!.name ?? me.data!.login ?? me.data!.tenant : operator ? "Operator" : null}
        </span>
        {signedIn ? <SignOut /> : null}
      </header>
      <Nav tenant={signedIn} operator={operator} />
      <main id="main" tabIndex={-1}>
        <Router>
          <Route path={base} component={signedIn ? Agents : SignedOut} />
          <Route path={`${base}/agents/:id`} component={AgentView} />
          <Route path={`${base}/tokens`} component={Tokens} />
          <Route path={`${base}/webhooks`} component={Webhooks} />
          <Route path={`${base}/webhooks/:id`} component={WebhookView} />
          <Route path={`${base}/usage`} component={UsageView} />
          <Route path={`${base}/models`} component={Models} />
          <Route path={`${base}/definitions`} component={Definitions} />
          <Route path={`${base}/volumes`} component={Volumes} />
          <Route path={`${base}/volumes/:id`} component={VolumeView} />
          <Route path={`${base}/schedules`} component={Schedules} />
          <Route path={`${base}/apps`} component={Apps} />
          <Route path={`${base}/operator`} component={() => <Operator onChange={setOperator} />} />
          <Route
            default
            component={() => (
              <p>
                Nothing here. <a href={base}>Back to the agents</a>.
              </p>
            )}
          />
        </Router>
      </main>
    </div>
  )
}

render(
  <LocationProvider scope={base}>
    <Shell />
  </LocationProvider>,
  document.getElementById("app")!
)
