// The texts the model (or, for the notices, the caller) reads when the layer answers instead of
// the tool, from the Rust core's data/texts.json (carried by scripts/artifacts.js): one wording
// for every implementation, none of it kept here (test/texts.test.js fails on a sentence of the
// sources' own). A template's `{name}` placeholders are filled in one pass, so a value holding
// braces is put in as it is; a placeholder without a value, or a value for none, is a bug that
// throws.

import { TEXTS, type TextName } from "./artifacts.generated.js";

export type { TextName };

/** The template `name` with `values` in place of its placeholders. */
export function text(name: TextName, values: Readonly<Record<string, string>> = {}): string {
  const template = TEXTS[name];
  if (template === undefined) throw new Error(`the text ${name} is missing from this package (run npm run build)`);
  const used = new Set<string>();
  const filled = template.replace(/\{([a-z_]+)\}/g, (_all, key: string) => {
    const value = values[key];
    if (value === undefined) throw new Error(`no value for the placeholder ${key} of the text ${name}`);
    used.add(key);
    return value;
  });
  for (const key of Object.keys(values)) {
    if (!used.has(key)) throw new Error(`the text ${name} has no placeholder ${key}`);
  }
  return filled;
}
