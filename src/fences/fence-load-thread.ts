/** Worker entry of `loadFenceStoreOffThread` (fence-file.ts): loads one fence file and answers once. */
import { parentPort, workerData } from 'node:worker_threads';
import { failedLoad, loadFenceStore, type FenceLoadAnswer, type FenceLoadRequest } from './fence-file.js';

const request = workerData as FenceLoadRequest;
let answer: FenceLoadAnswer;
try {
  answer = { ok: true, ...loadFenceStore(request) };
} catch (err) {
  answer = failedLoad(err);
}
parentPort!.postMessage(answer);
