// What cannot be keyed exactly, and why, in words for the caller: every object that is not a
// plain object or an array. JSON.stringify would write a Map, a Set or a RegExp as {}, a Date
// or a Buffer through its toJSON, a class instance as its fields, a boxed number as the number:
// distinct calls would share one key and get another call's result, or a key would stand for a
// value the tool never received. The canonical text (canonical.ts) refuses each, with this
// reason; no silent conversion, so an experienced user finds out at once.

/** Why `object` cannot be keyed, or undefined when it is a plain object or an array. */
export function unkeyable(object: object): string | undefined {
  const proto: unknown = Object.getPrototypeOf(object);
  if (proto === Object.prototype || proto === null || proto === Array.prototype) {
    return typeof (object as { toJSON?: unknown }).toJSON === "function" ? WITH_TO_JSON : undefined;
  }
  return unusual(object, proto);
}

const WITH_TO_JSON = "an object with a toJSON method cannot be keyed exactly; pass what toJSON returns";

/** The reason for an object of another prototype: another realm's plain object or array is fine. */
function unusual(object: object, proto: unknown): string | undefined {
  const tag = Object.prototype.toString.call(object).slice(8, -1);
  switch (tag) {
    case "Date":
      return "a Date cannot be keyed exactly; pass an ISO string";
    case "Map":
      return "a Map cannot be keyed exactly (JSON.stringify writes {}); pass a plain object or an array of pairs";
    case "Set":
      return "a Set cannot be keyed exactly (JSON.stringify writes {}); pass an array";
    case "RegExp":
      return "a RegExp cannot be keyed exactly (JSON.stringify writes {}); pass its source as a string";
    case "Number":
    case "String":
    case "Boolean":
    case "BigInt":
    case "Symbol":
      return `a ${tag} object cannot be keyed exactly; pass the primitive value`;
  }
  if (ArrayBuffer.isView(object) || tag === "ArrayBuffer" || tag === "SharedArrayBuffer") {
    return `${article(className(object) ?? tag)} cannot be keyed exactly; pass a string (base64 or hex) or an array of numbers`;
  }
  if (typeof (object as { toJSON?: unknown }).toJSON === "function") return WITH_TO_JSON;
  // An array of another realm or of a subclass is an array; an object whose prototype has no
  // prototype of its own is another realm's plain object (or one made on a null-prototype one).
  if (Array.isArray(object)) return undefined;
  if (proto !== null && typeof proto === "object" && Object.getPrototypeOf(proto) === null) return undefined;
  const name = className(object);
  return `${name === undefined ? "an object of a class" : `an instance of ${name}`} cannot be keyed exactly; pass a plain object of its fields`;
}

function className(object: object): string | undefined {
  const name: unknown = (object as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === "string" && name !== "" ? name : undefined;
}

function article(name: string): string {
  // "a Uint8Array", "an Int8Array", "an ArrayBuffer".
  return (/^[AEIO]/.test(name) ? "an " : "a ") + name;
}
