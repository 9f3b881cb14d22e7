// Quantized CPU ops on the scalar path (MLXB_CPU caps the features before the addon loads).
import { quantOpsSuite } from './helpers/qmatmul_suite.js';

process.env.MLXB_CPU = 'scalar';
quantOpsSuite('scalar');
