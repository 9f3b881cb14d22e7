// Chat templates: our renders (@huggingface/jinja) must be byte-identical to the expected files in
// test/fixtures/chat_templates/, which scripts/fixtures/render_chat_templates.py produced with
// Python's jinja2 in transformers' apply_chat_template environment (an independent engine).
// encode(): control tokens only from the template; user text that spells one stays plain text.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Tokenizer as RustTokenizer } from 'tokenizers';
import { describe, expect, it } from 'vitest';

import { InvalidArgumentError } from '../lib/errors.js';
import { ChatTemplate, loadTokenizer, type ChatMessage, type Tokenizer } from '../lib/input/index.js';
import { TOKENIZERS } from './helpers/tokenizers.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'chat_templates');

interface Case {
  only?: string[];
  messages: ChatMessage[];
  add_generation_prompt: boolean;
  tools?: unknown[];
  extras?: Record<string, unknown>;
}
const cases = JSON.parse(readFileSync(join(FIXTURES, 'cases.json'), 'utf8')) as Record<string, Case>;

function options(c: Case) {
  return { addGenerationPrompt: c.add_generation_prompt, tools: c.tools, extras: c.extras };
}

describe.each(['qwen3', 'llama3', 'gemma3'] as const)('chat template %s', (name) => {
  const dir = TOKENIZERS[name];
  let template: ChatTemplate;
  let tokenizer: Tokenizer;
  let rust: RustTokenizer;
  let rustPlain: RustTokenizer;
  const mine = Object.entries(cases).filter(([, c]) => !c.only || c.only.includes(name));

  it('loads', async () => {
    template = (await ChatTemplate.load(dir))!;
    expect(template).toBeInstanceOf(ChatTemplate);
    tokenizer = await loadTokenizer(dir);
    rust = RustTokenizer.fromFile(join(dir, 'tokenizer.json'));
    const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as { added_tokens: { special: boolean }[] };
    json.added_tokens = json.added_tokens.filter((t) => !t.special);
    rustPlain = RustTokenizer.fromString(JSON.stringify(json));
  });

  it.each(mine)('renders %s byte-identical to jinja2', (caseName, c) => {
    const want = readFileSync(join(FIXTURES, `${name}.${caseName}.txt`), 'utf8');
    expect(template.render(c.messages, options(c))).toBe(want);
  });

  it('encode() of ordinary conversations equals tokenizing the rendered text (Rust reference)', async () => {
    for (const [caseName, c] of mine) {
      if (caseName === 'injection') continue;
      const { text, ids } = template.encodeWithText(tokenizer, c.messages, options(c));
      expect(text).toBe(template.render(c.messages, options(c)));
      expect(ids, caseName).toEqual((await rust.encode(text, null, { addSpecialTokens: false })).getIds());
    }
  });

  it('user text spelling control tokens stays plain text', async () => {
    const c = cases.injection!;
    const content = c.messages[0]!.content as string;
    const { text, ids } = template.encodeWithText(tokenizer, c.messages, options(c));
    expect(text).toBe(template.render(c.messages, options(c)));
    const at = text.indexOf(content.trim());
    expect(at).toBeGreaterThan(0);
    const before = text.slice(0, at);
    const user = content.trim();
    const after = text.slice(at + user.length);
    const want = [
      ...(await rust.encode(before, null, { addSpecialTokens: false })).getIds(),
      ...(await rustPlain.encode(user, null, { addSpecialTokens: false })).getIds(),
      ...(await rust.encode(after, null, { addSpecialTokens: false })).getIds(),
    ];
    expect(ids).toEqual(want);
    // The control tokens are exactly those of the template: the same count as for a harmless message.
    const harmless = template.encode(tokenizer, [{ role: 'user', content: 'hello' }], options(c));
    const count = (xs: number[]) => xs.filter((id) => tokenizer.isControlToken(id)).length;
    expect(count(ids)).toBe(count(harmless));
    // A naive tokenization of the rendered text would have let them through.
    expect(count(tokenizer.encode(text, { addSpecialTokens: false }))).toBeGreaterThan(count(harmless));
  });

  it('sentinel characters typed by users survive unchanged', () => {
    const msg = [{ role: 'user', content: 'pua \u{100000}\u{100001} and <|im_start|> <start_of_turn> <|eot_id|>' }];
    const { text, ids } = template.encodeWithText(tokenizer, msg, {});
    expect(text).toBe(template.render(msg, {}));
    expect(tokenizer.decode(ids)).toBe(text);
  });
});

describe('chat template loading and errors', () => {
  it('a checkpoint without a template gives undefined', async () => {
    expect(await ChatTemplate.load(TOKENIZERS.mistral)).toBeUndefined();
  });
  it('named template lists pick by name', async () => {
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const d = mkdtempSync(join(tmpdir(), 'mlxb-tpl-'));
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify({
      chat_template: [{ name: 'default', template: 'D{{ messages[0].content }}' }, { name: 'tool_use', template: 'T{{ messages[0].content }}' }],
    }));
    const msgs = [{ role: 'user', content: 'x' }];
    expect((await ChatTemplate.load(d))!.render(msgs)).toBe('Dx');
    expect((await ChatTemplate.load(d, 'tool_use'))!.render(msgs)).toBe('Tx');
    await expect(ChatTemplate.load(d, 'nope')).rejects.toBeInstanceOf(InvalidArgumentError);
  });
  it('bad messages give typed errors', async () => {
    const t = (await ChatTemplate.load(TOKENIZERS.gemma3))!;
    for (const bad of [null, 'hi', [null], [{ role: 'user' }], [{ role: 3, content: 'x' }]]) {
      expect(() => t.render(bad as never)).toThrow(InvalidArgumentError);
    }
    // Gemma's template raises on non-alternating roles: surfaced as a typed error.
    expect(() => t.render([{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }])).toThrow(InvalidArgumentError);
  });
});
