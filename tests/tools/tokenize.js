// Tokenizes a file with a TextMate grammar the way VS Code does
// (vscode-textmate on the Oniguruma regex engine, vscode-oniguruma), and
// prints one JSON array: {line, text, scopes} per token. Used by
// tests/tools/test_editors.py.
//
//   node tokenize.js NODE_MODULES GRAMMAR.json FILE
'use strict';
const fs = require('fs');
const path = require('path');
const [modules, grammarPath, file] = process.argv.slice(2).map((p) => path.resolve(p));
const vsctm = require(path.join(modules, 'vscode-textmate'));
const oniguruma = require(path.join(modules, 'vscode-oniguruma'));

async function main() {
  const wasm = fs.readFileSync(path.join(modules, 'vscode-oniguruma', 'release', 'onig.wasm'));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (sources) => new oniguruma.OnigScanner(sources),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async () => vsctm.parseRawGrammar(fs.readFileSync(grammarPath, 'utf8'), grammarPath),
  });
  const grammar = await registry.loadGrammar('source.shd');
  if (!grammar) throw new Error('the grammar did not load');
  const out = [];
  let state = vsctm.INITIAL;
  fs.readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
    const r = grammar.tokenizeLine(line, state);
    for (const t of r.tokens)
      out.push({ line: i + 1, text: line.substring(t.startIndex, t.endIndex), scopes: t.scopes });
    state = r.ruleStack;
  });
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
