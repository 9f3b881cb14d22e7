/**
 * The lane for requests the batching engine does not take (grammar-constrained generation,
 * embeddings): at most `concurrency` run at once, at most `queue` more wait in arrival order, and
 * one more is a BusyError (HTTP 429), as a full engine queue is. A waiter whose signal aborts
 * leaves the queue at once.
 */
import { AbortError, BusyError, InvalidArgumentError } from '../errors.js';

interface Waiter {
  grant: (release: () => void) => void;
}

export class RequestLane {
  #running = 0;
  readonly #waiting: Waiter[] = [];

  constructor(readonly concurrency: number, readonly queue: number) {
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new InvalidArgumentError(`maxSideRequests must be an integer >= 1 (got ${concurrency})`, 'maxSideRequests');
    if (!Number.isInteger(queue) || queue < 0) throw new InvalidArgumentError(`maxSideQueue must be an integer >= 0 (got ${queue})`, 'maxSideQueue');
  }

  get running(): number { return this.#running; }
  get waiting(): number { return this.#waiting.length; }

  /** Resolves with a release function once a place is free; call it exactly when the work ends. */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(new AbortError('the request was aborted while it waited'));
    if (this.#running < this.concurrency) {
      this.#running++;
      return Promise.resolve(this.#releaser());
    }
    if (this.#waiting.length >= this.queue) {
      return Promise.reject(new BusyError(`${this.#running} requests of this kind are running and ${this.#waiting.length} wait; try again later`));
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.#waiting.indexOf(w);
        if (i >= 0) this.#waiting.splice(i, 1);
        reject(new AbortError('the request was aborted while it waited'));
      };
      const w: Waiter = {
        grant: (release) => { signal?.removeEventListener('abort', onAbort); resolve(release); },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(w);
    });
  }

  #releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.#waiting.shift();
      if (next) next.grant(this.#releaser());  // the place passes straight on
      else this.#running--;
    };
  }
}
