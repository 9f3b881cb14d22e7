/**
 * Typed errors of @mlx-bun/inference. Every failure the library raises — from the facade's
 * validation or from the native core — is an `MlxbError` subclass with a stable `code` and, where
 * it applies, the `field` (config key, option name, tensor name) it is about.
 */

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'INVALID_FILE'
  | 'INVALID_CONFIG'
  | 'UNSUPPORTED'
  | 'OUT_OF_MEMORY'
  | 'NOT_BUILT'
  | 'IO'
  | 'ABORTED'
  | 'BUSY'
  | 'INTERNAL';

export class MlxbError extends Error {
  readonly code: ErrorCode;
  readonly field?: string;
  constructor(code: ErrorCode, message: string, field?: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    if (field !== undefined) this.field = field;
  }
}

/** A caller-supplied option or argument is invalid; `field` names it. */
export class InvalidArgumentError extends MlxbError {
  constructor(message: string, field?: string) { super('INVALID_ARGUMENT', message, field); }
}
/** A checkpoint file (safetensors, index) is malformed. */
export class InvalidFileError extends MlxbError {
  constructor(message: string, field?: string) { super('INVALID_FILE', message, field); }
}
/** config.json lacks a field or holds an impossible value; `field` names it. */
export class ConfigError extends MlxbError {
  constructor(message: string, field?: string) { super('INVALID_CONFIG', message, field); }
}
/** Well-formed input this build does not run (model family, rope type, dtype). */
export class UnsupportedError extends MlxbError {
  constructor(message: string, field?: string) { super('UNSUPPORTED', message, field); }
}
export class OutOfMemoryError extends MlxbError {
  constructor(message: string, field?: string) { super('OUT_OF_MEMORY', message, field); }
}
/** The requested backend was not compiled into this binary. */
export class NotBuiltError extends MlxbError {
  constructor(message: string, field?: string) { super('NOT_BUILT', message, field); }
}
export class IoError extends MlxbError {
  constructor(message: string, field?: string) { super('IO', message, field); }
}
export class AbortError extends MlxbError {
  constructor(message = 'the operation was aborted', field?: string) { super('ABORTED', message, field); }
}
/** A bounded queue is full; retry later. */
export class BusyError extends MlxbError {
  constructor(message: string, field?: string) { super('BUSY', message, field); }
}
export class InternalError extends MlxbError {
  constructor(message: string, field?: string) { super('INTERNAL', message, field); }
}

const byCode: Record<ErrorCode, new (message: string, field?: string) => MlxbError> = {
  INVALID_ARGUMENT: InvalidArgumentError,
  INVALID_FILE: InvalidFileError,
  INVALID_CONFIG: ConfigError,
  UNSUPPORTED: UnsupportedError,
  OUT_OF_MEMORY: OutOfMemoryError,
  NOT_BUILT: NotBuiltError,
  IO: IoError,
  ABORTED: AbortError,
  BUSY: BusyError,
  INTERNAL: InternalError,
};

/** Builds the typed error for a code (used by the native loader for errors raised in C++). */
export function errorFromCode(code: string, message: string, field?: string): MlxbError {
  const Ctor = byCode[code as ErrorCode] ?? InternalError;
  return new Ctor(message, field);
}
