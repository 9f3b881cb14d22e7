// Quantized CPU ops on the avx512 path (MLXB_CPU caps the features before the addon loads).
import { quantOpsSuite } from './helpers/qmatmul_suite.js';

process.env.MLXB_CPU = 'avx512';
quantOpsSuite('avx512');
