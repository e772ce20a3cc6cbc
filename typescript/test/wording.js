// What test/texts.test.js looks for in the package's sources: wording a model would read that is
// not data/texts.json's. Two rules, neither a list of today's strings:
//
// - a copy: a string literal that holds six words in a row of one of the file's templates (a
//   text written out again, or one that drifted from the file word by word);
// - a sentence: a string literal of four words or more that reads like the texts do, starting
//   with a capitalised word and a lower-case one ("Not executed: ...", "Outcome unknown: ...")
//   or holding a full stop between sentences. The messages of exceptions thrown for the
//   programmer (`new TypeError(...)`, `new ConfigError(...)`, any error class but those whose
//   message a model reads) and the log's lines (`warn(...)`) are operator-facing
//   and exempt from both rules; so is bin/, the operator's command line, which no model reads.

"use strict";

const fs = require("node:fs");
const path = require("node:path");

/**
 * The classes whose messages a model reads, never an exemption: the outcome errors its call is
 * refused with (src/errors.ts), and the canonical form's refusal, which becomes the reason of one.
 */
const MODEL_ERRORS = /^(InvalidArguments|OperationInFlight|OperationConflict|OutcomeUnknown|StoreUnavailable|PermanentError|ToolonceError|Refused)$/;

/** What the code before a `/` ends with when the `/` starts a regular expression, not a division. */
const BEFORE_REGEX = /(?:^|[(,=:[!&|?{};]|\breturn)\s*$/;

/**
 * The string literals of a JavaScript or TypeScript source, comments and regexes skipped, and the
 * source with every literal's inside blanked (to read the code around one).
 */
function literals(src) {
  const out = [];
  let code = "";
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    if (c === "/" && src[i + 1] === "/") {
      const end = src.indexOf("\n", i);
      i = end < 0 ? src.length : end;
    } else if (c === "/" && src[i + 1] === "*") {
      i = src.indexOf("*/", i + 2) + 2;
    } else if (c === "/" && BEFORE_REGEX.test(src.slice(Math.max(0, i - 40), i))) {
      i = skipRegex(src, i);
    } else if (c === '"' || c === "'" || c === "`") {
      const [text, end] = readString(src, i);
      out.push({ at: i, text, line: src.slice(0, i).split("\n").length });
      code += src.slice(code.length, i + 1) + " ".repeat(Math.max(0, end - i - 2));
      i = end;
    } else {
      i++;
    }
  }
  return { found: out, code: code + src.slice(code.length) };
}

/** Past the regular expression starting at `i`. */
function skipRegex(src, i) {
  let j = i + 1;
  let inClass = false;
  while (j < src.length && src[j] !== "\n") {
    if (src[j] === "\\") j++;
    else if (src[j] === "[") inClass = true;
    else if (src[j] === "]") inClass = false;
    else if (src[j] === "/" && !inClass) return j + 1;
    j++;
  }
  return i + 1;
}

/** The literal's text (a template's substitutions as `${}`) and where it ends. */
function readString(src, i) {
  const quote = src[i];
  let j = i + 1;
  let text = "";
  while (j < src.length && src[j] !== quote) {
    if (src[j] === "\\") {
      text += src[j + 1];
      j += 2;
    } else if (quote === "`" && src[j] === "$" && src[j + 1] === "{") {
      let depth = 1;
      j += 2;
      while (j < src.length && depth > 0) {
        if (src[j] === "{") depth++;
        else if (src[j] === "}") depth--;
        j++;
      }
      text += "${}";
    } else {
      text += src[j++];
    }
  }
  return [text, j + 1];
}

/** The runs of words of a text, broken at placeholders (`{name}` or `${}`). */
function runs(text) {
  return text.split(/\$?\{[a-z_]*\}/).map((part) => part.toLowerCase().match(/[a-z0-9']+/g) ?? []);
}

/** How many words in a row make a copy: fewer are phrases any English message may share. */
const RUN = 6;

/** Every {@link RUN} words in a row of `text`, joined by spaces. */
function runsOf(text) {
  return runs(text).flatMap((words) => words.slice(0, Math.max(0, words.length - RUN + 1)).map((_, i) => words.slice(i, i + RUN).join(" ")));
}

/** Whether the literal at `at` of `code` is the message of a programmer's exception or a log line. */
function operatorFacing(code, at) {
  const statement = code.slice(Math.max(0, at - 600), at);
  const m = statement.match(/(?:new\s+(\w+)|\b(warn))\s*\([^;{}]*$/);
  return m !== null && (m[2] === "warn" || !MODEL_ERRORS.test(m[1]));
}

/** Whether a literal reads like the texts a model is answered with. */
function sentence(text) {
  const words = text.match(/[A-Za-z']+/g) ?? [];
  if (words.length < 4) return false;
  return /^\s*[A-Z][a-z']*[ :,]+[a-z]/.test(text) || /[a-z)`]\.\s+[A-Z]/.test(text);
}

/** The model-facing wording of `files` that is not `templates`': `file:line: text` each. */
function ownWording(files, templates, root) {
  const copied = new Set(Object.values(templates).flatMap(runsOf));
  const found = [];
  for (const file of files) {
    const { found: strings, code } = literals(fs.readFileSync(file, "utf8"));
    for (const { at, text, line } of strings) {
      if (operatorFacing(code, at)) continue;
      const copy = runsOf(text).find((run) => copied.has(run));
      const where = `${path.relative(root, file)}:${line}`;
      if (copy !== undefined) found.push(`${where}: copies "${copy}": ${text}`);
      else if (sentence(text)) found.push(`${where}: a sentence of its own: ${text}`);
    }
  }
  return found;
}

/** The TypeScript and JavaScript files under `dir`, but the generated one. */
function sources(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const file = path.join(dir, e.name);
    if (e.isDirectory()) return sources(file);
    return /\.(ts|js)$/.test(e.name) && e.name !== "artifacts.generated.ts" ? [file] : [];
  });
}

module.exports = { ownWording, sources };
