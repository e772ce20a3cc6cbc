// Where toolonce says what an operator should hear of: warnings on stderr (an operation held
// as unknown, a claim lost, an outcome that could not be recorded), prefixed `toolonce:`, and
// nothing else. Messages carry keys and tool names, never a store's password or a result.
// TOOLONCE_QUIET=1 silences them (the tests, which provoke them on purpose).

export function warn(message: string): void {
  if (process.env.TOOLONCE_QUIET === "1") return;
  process.emitWarning(message, { type: "toolonce" });
}
