/** Concurrency-limit algorithms behind one `Limit` contract. */
export type { Limit, RandomSource } from './limit.js';
export { FixedLimit } from './fixed-limit.js';
export { AimdLimit } from './aimd-limit.js';
export { VegasLimit } from './vegas-limit.js';
export { Gradient2Limit } from './gradient2-limit.js';
export { GradientLimit } from './gradient-limit.js';
export { WindowedLimit } from './windowed-limit.js';
