// CPU ops at the widest SIMD level this CPU has (see ops-suite.ts).
import { opSuite } from './ops-suite.js';

opSuite('default');
