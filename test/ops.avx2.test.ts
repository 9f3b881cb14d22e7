// CPU ops with AVX-512 kernels switched off (MLXB_CPU=avx2 caps the dispatch; this file runs in
// its own forked process, and the cap is read when the addon first asks for the CPU features).
process.env.MLXB_CPU = 'avx2';
const { opSuite } = await import('./ops-suite.js');
opSuite('avx2');
