// How client-wasm/package/build.mjs writes the wasm's bytes into the
// package's module: pure ASCII text, so that no bundler or minifier has a
// reason to rewrite it (esbuild escapes every non-ASCII character of a
// string as \xNN, which made the bytes written as Latin-1 characters grow
// by 900 bytes brotli inside an app's bundle: docs/BENCHMARKS-JOURNAL.md, "The wasm
// in ASCII").
//
// The alphabet is the 93 printable ASCII characters but `"` and `\`, so the
// text needs no escape in a double-quoted string literal (which minifiers
// keep, having no cheaper quote). Bytes 0 to 90, the most frequent in wasm
// code (opcodes, locals, small LEB128 numbers), are one character each; the
// 165 others are the alphabet's first or second character (by the byte's
// parity) followed by one more. The same byte is always written the same
// way, so brotli finds the module's repeats as they are: 135 bytes more
// than the Latin-1 literal, base64 would be 3.9 KB more and hex 750 bytes.

const ALPHABET = [...Array(95).keys()]
  .map((i) => String.fromCharCode(32 + i))
  .filter((c) => c !== '"' && c !== "\\")
  .join("");
const SINGLE = ALPHABET.length - 2;

/** The bytes as text of the alphabet. */
export function encode(bytes) {
  let out = "";
  for (const b of bytes) {
    out += b < SINGLE ? ALPHABET[2 + b] : ALPHABET[(b - SINGLE) % 2] + ALPHABET[(b - SINGLE) >> 1];
  }
  return out;
}

/**
 * The module `wasm_bytes.js` of the bundle: `wasmBytes()` decodes the text
 * (at `placeholder`, replaced by the text after bundling) into `length`
 * bytes. A character's index in the alphabet is its code less 32, less one
 * past `"` (34) and one more past `\` (92).
 */
export const decoder = (length, placeholder) => `export function wasmBytes() {
  const text = "${placeholder}";
  let i = 0;
  const next = () => {
    const c = text.charCodeAt(i++);
    return c - 32 - (c > 34) - (c > 92);
  };
  const bytes = new Uint8Array(${length});
  for (let j = 0; j < ${length}; j++) {
    const c = next();
    bytes[j] = c > 1 ? c - 2 : ${SINGLE} + c + 2 * next();
  }
  return bytes;
}
`;
