/**
 * Reading the small JSON side files of a checkpoint directory (tokenizer.json,
 * tokenizer_config.json, generation_config.json) with typed errors: a missing directory or file
 * is an IoError, unparsable JSON an InvalidFileError naming the file.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';

import { InvalidArgumentError, InvalidFileError, IoError } from '../errors.js';

export type JsonObject = Record<string, unknown>;

export async function assertDirectory(dir: unknown, what = 'directory'): Promise<string> {
  if (typeof dir !== 'string' || dir.length === 0) throw new InvalidArgumentError(`${what} must be a non-empty path string`, what);
  let s;
  try {
    s = await stat(dir);
  } catch {
    throw new IoError(`${dir}: no such directory`, what);
  }
  if (!s.isDirectory()) throw new IoError(`${dir}: not a directory`, what);
  return dir;
}

/** Reads `dir/name` as text, or undefined when the file does not exist. */
export async function readOptionalText(dir: string, name: string): Promise<string | undefined> {
  try {
    return await readFile(join(dir, name), 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new IoError(`${join(dir, name)}: ${(e as Error).message}`, name);
  }
}

/** Parses `dir/name` as JSON (any value), or undefined when the file does not exist. */
export async function readOptionalJsonValue(dir: string, name: string): Promise<unknown> {
  const text = await readOptionalText(dir, name);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new InvalidFileError(`${join(dir, name)}: invalid JSON (${(e as Error).message})`, name);
  }
}

/** Parses `dir/name` as a JSON object, or undefined when the file does not exist. */
export async function readOptionalJson(dir: string, name: string): Promise<JsonObject | undefined> {
  const v = await readOptionalJsonValue(dir, name);
  if (v === undefined) return undefined;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new InvalidFileError(`${join(dir, name)}: expected a JSON object`, name);
  return v as JsonObject;
}

/** A special-token entry of tokenizer_config.json: a string or an AddedToken dict `{content}`. */
export function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && v !== null && typeof (v as JsonObject).content === 'string') return (v as JsonObject).content as string;
  return undefined;
}
