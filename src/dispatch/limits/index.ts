/** Concurrency-limit algorithms behind one `Limit` contract. */
export type { Limit, RandomSource } from './limit.js';
export { seededRandom } from './limit.js';
export { FixedLimit } from './fixed-limit.js';
export { AimdLimit, AIMD_LIMIT_DEFAULTS, type AimdLimitOptions } from './aimd-limit.js';
export { VegasLimit, VEGAS_LIMIT_DEFAULTS, type VegasLimitOptions } from './vegas-limit.js';
export { Gradient2Limit, GRADIENT2_LIMIT_DEFAULTS, type Gradient2LimitOptions } from './gradient2-limit.js';
export { GradientLimit, GRADIENT_LIMIT_DEFAULTS, type GradientLimitOptions } from './gradient-limit.js';
