import { ConfigError } from "../errors.js";
import type { Backend } from "../store.js";
export async function openSqlite(_url: string): Promise<Backend> {
  throw new ConfigError("sqlite: not yet");
}
