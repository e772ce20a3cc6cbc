// What an AI SDK model sees of a wrapped tool (issue 43): its input schema with the optional
// repeat ordinal added, and a replay's note beside the recorded output. The schema is handed to
// the SDK as its own Schema object (the `vercel.ai.schema` symbol, the same in AI SDK 5, 6 and
// 7), so nothing is imported from the SDK: its JSON Schema is the original's (an SDK Schema's
// own, a Standard JSON Schema's, or zod 4's through zod/v4/core, converted as the SDK converts
// it) with the property added; its validation is the original's on the input without the
// ordinal, which is handed on untouched, so a bad one is refused with the package's own text.

import { type JsonSchema, type Validation, isSdkSchema, isStandard, isZod4, jsonSchemaOf, withProperty } from "./schema-json.js";

const SCHEMA = Symbol.for("vercel.ai.schema");
/** AI SDK 5 also marks a Schema as a validator. */
const VALIDATOR = Symbol.for("vercel.ai.validator");

/** `schema`'s validation of `value`. */
async function validate(schema: unknown, value: unknown): Promise<Validation> {
  if (isSdkSchema(schema)) return schema.validate === undefined ? { success: true, value } : await schema.validate(value);
  if (isZod4(schema)) {
    const r = await schema.safeParseAsync(value);
    return r.success ? { success: true, value: r.data } : { success: false, error: r.error };
  }
  if (isStandard(schema)) {
    const r = await schema["~standard"].validate(value);
    return r.issues === undefined ? { success: true, value: r.value } : { success: false, error: new Error(JSON.stringify(r.issues)) };
  }
  return { success: true, value };
}

/**
 * The AI SDK Schema showing `original` plus the optional ordinal `name`. The input is validated
 * by the original without the ordinal, which is put back for execute to check and take out.
 */
export function schemaWithRepeat(original: unknown, name: string): object {
  let json: JsonSchema | PromiseLike<JsonSchema> | undefined;
  return {
    [SCHEMA]: true,
    [VALIDATOR]: true,
    _type: undefined,
    get jsonSchema() {
      if (json === undefined) {
        const base = jsonSchemaOf(original, true) ?? { type: "object", properties: {} };
        json = typeof (base as PromiseLike<JsonSchema>).then === "function" ? Promise.resolve(base).then((b) => withProperty(b, name)) : withProperty(base as JsonSchema, name);
      }
      return json;
    },
    async validate(value: unknown): Promise<Validation> {
      const has = value !== null && typeof value === "object" && !Array.isArray(value) && Object.prototype.hasOwnProperty.call(value, name);
      if (!has) return validate(original, value);
      const { [name]: ordinal, ...rest } = value as Record<string, unknown>;
      const checked = await validate(original, rest);
      if (!checked.success) return checked;
      const valid = checked.value;
      return { success: true, value: valid !== null && typeof valid === "object" ? { ...(valid as object), [name]: ordinal } : valid };
    },
  };
}
