// The JSON Schema a framework shows a model for a tool's input schema, read here without the
// framework (issue 43: the repeat ordinal is added to it): an AI SDK Schema's own, a Standard
// JSON Schema's, zod 4's through zod/v4/core (the zod every supported framework requires), or a
// plain JSON Schema object; and the top-level properties a schema declares, to find a tool
// that has its own argument of the ordinal's name.

import { warn } from "./log.js";
import { repeatProperty } from "./repeat.js";

/** What marks an AI SDK Schema (`jsonSchema()`, `zodSchema()`), the same in AI SDK 5, 6 and 7. */
const SCHEMA = Symbol.for("vercel.ai.schema");

export type JsonSchema = Record<string, unknown>;
export type Validation = { success: true; value: unknown } | { success: false; error: unknown };

export interface SdkSchema {
  jsonSchema: JsonSchema | PromiseLike<JsonSchema>;
  validate?: (value: unknown) => Validation | PromiseLike<Validation>;
}

export interface ZodLike {
  _zod?: unknown;
  safeParseAsync(value: unknown): Promise<{ success: boolean; data?: unknown; error?: unknown }>;
}

export interface StandardLike {
  "~standard": {
    validate(value: unknown): { value?: unknown; issues?: readonly unknown[] } | PromiseLike<{ value?: unknown; issues?: readonly unknown[] }>;
    jsonSchema?: { input(options: { target: string }): JsonSchema };
  };
}

export const isSdkSchema = (s: unknown): s is SdkSchema => s !== null && typeof s === "object" && (s as Record<symbol, unknown>)[SCHEMA] === true && "jsonSchema" in s;
export const isZod4 = (s: unknown): s is ZodLike => s !== null && typeof s === "object" && "_zod" in s && typeof (s as ZodLike).safeParseAsync === "function";
export const isStandard = (s: unknown): s is StandardLike => s !== null && typeof s === "object" && "~standard" in s;

/** The SDK's treatment of a converted schema: every object closed unless it says otherwise. */
function closeObjects(schema: unknown): unknown {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) return schema;
  const s = schema as JsonSchema;
  const type = s.type;
  if (type === "object" || (Array.isArray(type) && type.includes("object"))) {
    const extra = s.additionalProperties;
    s.additionalProperties = extra != null && typeof extra !== "boolean" ? closeObjects(extra) : false;
    const properties = s.properties as JsonSchema | undefined;
    if (properties != null) for (const k of Object.keys(properties)) properties[k] = closeObjects(properties[k]);
  }
  if (s.items != null) s.items = Array.isArray(s.items) ? s.items.map(closeObjects) : closeObjects(s.items);
  for (const list of ["anyOf", "allOf", "oneOf"]) if (Array.isArray(s[list])) s[list] = (s[list] as unknown[]).map(closeObjects);
  const definitions = s.definitions as JsonSchema | undefined;
  if (definitions != null) for (const k of Object.keys(definitions)) definitions[k] = closeObjects(definitions[k]);
  return s;
}

/** A JSON Schema written out as an object (not a schema library's), describing an object. */
const isPlain = (s: unknown): s is JsonSchema =>
  s !== null && typeof s === "object" && !isSdkSchema(s) && !isZod4(s) && !isStandard(s) && (s as JsonSchema).type === "object";

/**
 * The JSON Schema of `schema`, or undefined when it cannot be read here; `closed` closes every
 * object as the AI SDK does when it converts one.
 */
export function jsonSchemaOf(schema: unknown, closed: boolean): JsonSchema | PromiseLike<JsonSchema> | undefined {
  const close = (json: JsonSchema) => (closed ? (closeObjects(json) as JsonSchema) : json);
  if (isSdkSchema(schema)) return schema.jsonSchema;
  if (isPlain(schema)) return schema;
  if (isStandard(schema) && typeof schema["~standard"].jsonSchema?.input === "function") return close(schema["~standard"].jsonSchema.input({ target: "draft-07" }));
  if (isZod4(schema)) {
    let core: { toJSONSchema(s: unknown, o: object): JsonSchema };
    try {
      // The zod the frameworks themselves require (zod 3.25 and later carry zod/v4/core).
      core = require("zod/v4/core");
    } catch {
      return undefined;
    }
    return close(core.toJSONSchema(schema, { target: "draft-7", io: "input", reused: "inline" }));
  }
  return undefined;
}

/** The properties `schema` declares at its top level, as far as they can be read without converting it. */
export function ownProperties(schema: unknown): string[] | undefined {
  if (isZod4(schema)) {
    const shape = (schema as { shape?: unknown }).shape;
    return shape !== null && typeof shape === "object" ? Object.keys(shape) : undefined;
  }
  const standard = isStandard(schema) ? schema["~standard"].jsonSchema : undefined;
  const json = isSdkSchema(schema) ? schema.jsonSchema : isPlain(schema) ? schema : typeof standard?.input === "function" ? standard.input({ target: "draft-07" }) : undefined;
  if (json !== null && typeof json === "object" && typeof (json as PromiseLike<unknown>).then !== "function") {
    const properties = (json as JsonSchema).properties;
    return properties !== null && typeof properties === "object" ? Object.keys(properties) : [];
  }
  return undefined;
}

/** Whether the repeat property can be shown for `schema` (its JSON Schema can be read here). */
export function canShowRepeat(schema: unknown): boolean {
  return isSdkSchema(schema) || isPlain(schema) || (isStandard(schema) && typeof schema["~standard"].jsonSchema?.input === "function") || isZod4(schema);
}

/** With `properties` gaining the ordinal `name`; a schema that is not an object is returned as it is. */
export function withProperty(json: JsonSchema, name: string): JsonSchema {
  const properties = (json.properties ?? {}) as JsonSchema;
  return { ...json, properties: { ...properties, [name]: repeatProperty() } };
}

/** The repeat argument a tool gets, given its schema: none when it has its own of that name (a warning names it). */
export function repeatFor(tool: string, schema: unknown, name: string | undefined): string | undefined {
  if (name === undefined) return undefined;
  if (ownProperties(schema)?.includes(name)) {
    warn(`the tool ${tool} has its own argument ${JSON.stringify(name)}: it keeps it, and gets no repeat argument (set repeatArgument to another name to give it one)`);
    return undefined;
  }
  if (!canShowRepeat(schema)) {
    warn(`the input schema of ${tool} cannot be read here (not zod 4, a Standard JSON Schema, an AI SDK jsonSchema or a JSON Schema object): it gets no repeat argument`);
    return undefined;
  }
  return name;
}
