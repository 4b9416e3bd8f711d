export * as Database from "./Database.ts"
export * as EmbeddedPostgres from "./EmbeddedPostgres.ts"
export * as Ids from "./Ids.ts"
export * as Migrations from "./Migrations.ts"
