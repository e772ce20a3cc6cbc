// What a LangChain model is bound for each tool (issue 43): a write tool that has the repeat
// ordinal is bound as its JSON Schema with the ordinal among its parameters, in the function
// format every chat model's bindTools takes; any other tool as it is. The agent still runs its
// own tool by name: LangChain lets wrapModelCall replace a tool by a spec, not by another tool.

import { jsonSchemaOf, withProperty } from "./schema-json.js";

/** A tool as the model request lists it, as far as it is read here. */
export interface DeclaredTool {
  name?: string;
  description?: string;
  schema?: unknown;
  tags?: string[];
  metadata?: Record<string, unknown>;
}

/**
 * The function mapping each tool of a model request to what the model is bound: `isWrite` and
 * `repeatOf` are the middleware's, made once per tool, not per model call.
 */
export function boundView(
  isWrite: (tool: string, declared: DeclaredTool) => boolean,
  repeatOf: (tool: string, declared: DeclaredTool) => string | undefined,
): (tool: unknown) => unknown {
  const views = new WeakMap<object, unknown>();
  const view = (declared: DeclaredTool & { name: string }): unknown => {
    if (!isWrite(declared.name, declared)) return declared;
    const repeat = repeatOf(declared.name, declared);
    const json = repeat === undefined ? undefined : jsonSchemaOf(declared.schema, false);
    if (json === undefined || typeof (json as PromiseLike<unknown>).then === "function") return declared;
    const { $schema: _dialect, ...parameters } = withProperty(json as Record<string, unknown>, repeat as string);
    return { type: "function", function: { name: declared.name, description: declared.description ?? "", parameters } };
  };
  return (tool: unknown): unknown => {
    const declared = tool as DeclaredTool;
    if (declared === null || typeof declared !== "object" || typeof declared.name !== "string" || !("schema" in declared)) return tool;
    if (!views.has(declared)) views.set(declared, view(declared as DeclaredTool & { name: string }));
    return views.get(declared);
  };
}
