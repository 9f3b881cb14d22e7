/**
 * The grammar worker's code (a CommonJS worker_threads script, run with `eval: true`). It loads
 * @mlc-ai/web-xgrammar, whose lib/index.js is a UMD bundle in a "type": "module" package, by
 * evaluating the file as CommonJS. Requests: { id, op, ... } -> { id, ok, value } or
 * { id, ok: false, error, fatal }. A WebAssembly abort (the library's C++ checks end in abort(), after
 * which the module is unusable) is reported, then the worker exits; the client starts a new one.
 */
export const WORKER_SOURCE = String.raw`
'use strict';
const { parentPort } = require('node:worker_threads');
const { readFileSync } = require('node:fs');
const { createRequire } = require('node:module');
const { dirname } = require('node:path');

// The library prints a failed check ("[FATAL] file:line: message") before it aborts: keep the
// last one for the error reply, and print nothing into the host's streams.
let lastFatal = '';
const quiet = (...args) => {
  const m = /\[FATAL\][^:]*:\d+: ([^\n]*)/.exec(args.join(' '));
  if (m) lastFatal = m[1].trim();
};
console.log = quiet;
console.error = quiet;
console.warn = quiet;

function loadXGrammar(file) {
  const mod = { exports: {} };
  new Function('exports', 'module', 'require', '__filename', '__dirname', readFileSync(file, 'utf8'))(
    mod.exports, mod, createRequire(file), file, dirname(file));
  return mod.exports;
}

let xg;
let compiler;
let stopIds = [];
const grammars = new Map();
const matchers = new Map();
let next = 1;

async function handle(m) {
  switch (m.op) {
    case 'init': {
      xg = loadXGrammar(m.file);
      stopIds = m.stopIds;
      const info = await xg.TokenizerInfo.createTokenizerInfo(m.vocab, m.vocabType, m.prependSpace, m.vocabSize, m.stopIds);
      compiler = await xg.GrammarCompiler.createGrammarCompiler(info, true);
      return true;
    }
    case 'compile': {
      let g;
      if (m.kind === 'json') g = await compiler.compileBuiltinJSONGrammar();
      else if (m.kind === 'json_schema') g = await compiler.compileJSONSchema(m.source, false, -1, [', ', ': '], true);
      else g = await compiler.compileGrammar(m.source, 'root');
      const id = next++;
      grammars.set(id, g);
      return id;
    }
    case 'matcher': {
      const g = grammars.get(m.grammar);
      if (!g) throw new Error('unknown grammar ' + m.grammar);
      const mt = await xg.GrammarMatcher.createGrammarMatcher(g, stopIds, false);
      const id = next++;
      matchers.set(id, { mt, done: false });
      return id;
    }
    case 'mask': {
      const s = matchers.get(m.matcher);
      if (!s) throw new Error('unknown matcher ' + m.matcher);
      if (s.done) return null;
      return await s.mt.getNextTokenBitmask();
    }
    case 'accept': {
      const s = matchers.get(m.matcher);
      if (!s) throw new Error('unknown matcher ' + m.matcher);
      if (s.done) return false;
      const ok = s.mt.acceptToken(m.token);
      if (ok && s.mt.isTerminated()) s.done = true;
      return ok;
    }
    case 'free': {
      const s = matchers.get(m.matcher);
      if (s) { s.mt.dispose(); matchers.delete(m.matcher); }
      const g = grammars.get(m.grammar);
      if (g) { g.dispose(); grammars.delete(m.grammar); }
      return true;
    }
  }
  throw new Error('unknown op ' + m.op);
}

// One request at a time, in arrival order: the library's calls are async, and a matcher freed
// while a mask of it is being computed would be used after its release.
let chain = Promise.resolve();
parentPort.on('message', (m) => {
  chain = chain.then(async () => {
    try {
      const value = await handle(m);
      parentPort.postMessage({ id: m.id, ok: true, value });
    } catch (e) {
      const message = e && e.message ? String(e.message) : String(e);
      const fatal = /Aborted\(|RuntimeError|unreachable/.test(message) || (e && e.name === 'RuntimeError');
      const error = (fatal && lastFatal) || message.split('\n')[0];
      parentPort.postMessage({ id: m.id, ok: false, error: error.slice(0, 500), fatal });
      if (fatal) process.exit(1);
    }
  });
});
`;
