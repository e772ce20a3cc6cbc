import { ConfigError } from "../errors.js";
import type { Backend } from "../store.js";
export async function openPostgres(_url: string): Promise<Backend> {
  throw new ConfigError("postgres: not yet");
}
export async function postgresFromClient(_c: object): Promise<Backend> {
  throw new ConfigError("postgres: not yet");
}
