export * as HostedMcp from "./HostedMcp.ts"
