// The input schema a Mastra model sees for a wrapped tool (issue 43): a Standard JSON Schema,
// which Mastra takes as it is (its own injected arguments are made the same way), whose JSON
// Schema is the original's with the optional repeat ordinal added and whose validation is the
// original's on the input without the ordinal, which is put back for the wrapped execute to
// check and take out, so a bad one is refused with the package's own text.

import { type JsonSchema, jsonSchemaOf, withProperty } from "./schema-json.js";

type Issues = { value?: unknown; issues?: readonly unknown[] };

interface StandardWithJson {
  "~standard": {
    validate(value: unknown): Issues | PromiseLike<Issues>;
    jsonSchema?: { input?(options: object): JsonSchema; output?(options: object): JsonSchema };
  };
}

/** `original`'s validation of `value` (synchronous where it is: Mastra refuses an async one); none accepts it. */
function validateWith(original: unknown, value: unknown): Issues | PromiseLike<Issues> {
  const standard = (original as StandardWithJson | undefined)?.["~standard"];
  if (standard === undefined || typeof standard.validate !== "function") return { value };
  return standard.validate(value);
}

/** `checked` with the ordinal put back into a valid object. */
function withOrdinal(checked: Issues, name: string, ordinal: unknown): Issues {
  if (checked.issues !== undefined) return checked;
  const valid = checked.value;
  return { value: valid !== null && typeof valid === "object" ? { ...(valid as object), [name]: ordinal } : valid };
}

/** The Standard JSON Schema showing `original` plus the optional ordinal `name`. */
export function standardWithRepeat(original: unknown, name: string): object {
  const standard = (original as StandardWithJson)["~standard"];
  const json = (io: "input" | "output", options: object): JsonSchema => {
    const convert = standard.jsonSchema?.[io];
    const base = typeof convert === "function" ? convert.call(standard.jsonSchema, options) : (jsonSchemaOf(original, false) as JsonSchema);
    return withProperty(base, name);
  };
  return {
    "~standard": {
      version: 1,
      vendor: "toolonce",
      validate(value: unknown): Issues | PromiseLike<Issues> {
        const has = value !== null && typeof value === "object" && !Array.isArray(value) && Object.prototype.hasOwnProperty.call(value, name);
        if (!has) return validateWith(original, value);
        const { [name]: ordinal, ...rest } = value as Record<string, unknown>;
        const checked = validateWith(original, rest);
        if (typeof (checked as PromiseLike<Issues>).then === "function") return Promise.resolve(checked).then((c) => withOrdinal(c, name, ordinal));
        return withOrdinal(checked as Issues, name, ordinal);
      },
      jsonSchema: { input: (options: object) => json("input", options), output: (options: object) => json("output", options) },
    },
  };
}
