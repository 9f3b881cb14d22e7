// Quantized CPU ops on the avx2 path (MLXB_CPU caps the features before the addon loads).
import { quantOpsSuite } from './helpers/qmatmul_suite.js';

process.env.MLXB_CPU = 'avx2';
quantOpsSuite('avx2');
