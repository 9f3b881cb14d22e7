/**
 * A language model ready for generate(): the loaded weights (lib/models) plus the checkpoint's
 * text side (tokenizer, chat template, generation_config.json). `loadLanguageModel(dir)` is the
 * one call most users need; `dispose()` (or `await using`) frees the weights.
 */
import { ChatTemplate } from '../input/chat_template.js';
import { loadTokenizer, type Tokenizer } from '../input/tokenizer.js';
import { InvalidFileError } from '../errors.js';
import { loadModel, Model, type LoadModelOptions } from '../models/index.js';
import { nativeModel } from '../models/model.js';
import { loadGenerationConfig, type GenerationConfig } from './config.js';
import { generate, type Generation, type GenerationInput, type GenerationTarget } from './generate.js';
import type { GenerateOptions } from './options.js';

export interface LoadLanguageModelOptions extends LoadModelOptions {
  /** Pick a named chat template when tokenizer_config.json lists several. */
  chatTemplateName?: string;
}

export class LanguageModel implements GenerationTarget, Disposable, AsyncDisposable {
  readonly model: Model;
  /** Absent when the checkpoint has no tokenizer.json (token ids in, token ids out). */
  readonly tokenizer?: Tokenizer;
  readonly chatTemplate?: ChatTemplate;
  readonly generationConfig: GenerationConfig;
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];

  /** @internal use loadLanguageModel() */
  constructor(model: Model, tokenizer: Tokenizer | undefined, chatTemplate: ChatTemplate | undefined, generationConfig: GenerationConfig) {
    this.model = model;
    if (tokenizer) this.tokenizer = tokenizer;
    if (chatTemplate) this.chatTemplate = chatTemplate;
    this.generationConfig = generationConfig;
    this.vocabSize = model.config.vocabSize;
    this.eosTokenIds = model.config.eosTokenIds;
  }

  /** The native model handle (throws InvalidArgumentError once disposed). */
  get nativeHandle(): object {
    return nativeModel(this.model);
  }

  generate(input: GenerationInput, options?: GenerateOptions): Generation {
    return generate(this, input, options);
  }

  dispose(): void {
    this.model.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}

/** Loads weights, tokenizer, chat template and generation config of a checkpoint directory. */
export async function loadLanguageModel(dir: string, options: LoadLanguageModelOptions = {}): Promise<LanguageModel> {
  const { chatTemplateName, ...modelOptions } = options ?? {};
  // Text side first: it is quick and fails fast on a directory that is not a checkpoint.
  const tokenizer = await loadTokenizer(dir).catch((e: unknown) => {
    if (e instanceof InvalidFileError && e.field === 'tokenizer.json' && /no tokenizer\.json/.test(e.message)) return undefined;
    throw e;
  });
  const chatTemplate = await ChatTemplate.load(dir, chatTemplateName);
  const generationConfig = await loadGenerationConfig(dir);
  const model = await loadModel(dir, modelOptions);
  return new LanguageModel(model, tokenizer, chatTemplate, generationConfig);
}
