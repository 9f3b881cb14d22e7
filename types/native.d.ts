// The C++ <-> TypeScript contract: everything the addon exports, one interface per area
// (types/native/*.d.ts). lib/native/ is the only module that loads the addon and it hands out
// this type; nothing else in lib/ touches the .node file.
import type { NativeCore } from './native/core.js';
import type { NativeModels } from './native/models.js';
import type { NativeOps } from './native/ops.js';
import type { NativeGeneration } from './native/generation.js';
import type { NativeArtifacts } from './native/artifacts.js';
import type { NativeQuant } from './native/quant.js';
import type { NativeExecution } from './native/engine.js';

export interface NativeBinding extends NativeCore, NativeModels, NativeOps, NativeGeneration, NativeArtifacts, NativeQuant, NativeExecution {}
