/** One bad-input case for the native loader, run by artifacts-corpus-child.ts. */
export type ExpectedError = 'InvalidFileError' | 'ConfigError' | 'UnsupportedError' | 'IoError';

export interface CorpusCase {
  id: string;
  group: string;
  /** weights: inspectWeights(path); tensor: readTensor(path, name); config: readConfig(path). */
  op: 'weights' | 'tensor' | 'config';
  path: string;
  name?: string;
  /** null = must succeed. */
  error: ExpectedError | null;
  /** Required `field` of the error: one value, or any of several. Absent = not checked. */
  field?: string | string[];
  /** For successful weights cases: number of tensors. */
  tensors?: number;
}

export interface CorpusResult {
  id: string;
  ok: boolean;
  error?: string;
  code?: string;
  field?: string;
  message?: string;
  tensors?: number;
}
