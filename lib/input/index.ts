/**
 * @mlx-bun/inference/input — text in: the checkpoint's tokenizer, its chat template, and the
 * streaming detokenizer that turns generated ids back into text chunks.
 */
export { Tokenizer, loadTokenizer, type DecodeOptions, type EncodeOptions, type SpecialToken, type TextSegment } from './tokenizer.js';
export { ChatTemplate, type ChatContentPart, type ChatMessage, type ChatRole, type RenderOptions } from './chat_template.js';
export { StreamingDetokenizer } from './detokenizer.js';
