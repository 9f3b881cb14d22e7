// CPU ops on the plain reference paths only (MLXB_CPU=scalar; own forked process).
process.env.MLXB_CPU = 'scalar';
const { opSuite } = await import('./ops-suite.js');
opSuite('scalar');
