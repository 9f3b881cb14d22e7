/**
 * Stop strings over streamed text: text is released only once it cannot be the beginning of a
 * stop string; when one appears, the text before it is released and everything after is dropped.
 */
export class StopStringFilter {
  readonly #stops: readonly string[];
  #pending = '';
  /** The stop string that matched, once one has. */
  stopped: string | undefined;

  constructor(stops: readonly string[]) {
    this.#stops = stops;
  }

  /** Adds text; returns what can be released now. */
  push(text: string): string {
    if (this.stopped !== undefined) return '';
    if (this.#stops.length === 0) return text;
    this.#pending += text;
    const p = this.#pending;
    let at = -1;
    for (const s of this.#stops) {
      const i = p.indexOf(s);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        this.stopped = s;
      }
    }
    if (at >= 0) {
      this.#pending = '';
      return p.slice(0, at);
    }
    let hold = 0;
    for (const s of this.#stops) {
      for (let k = Math.min(s.length - 1, p.length); k > hold; k--) {
        if (p.endsWith(s.slice(0, k))) { hold = k; break; }
      }
    }
    this.#pending = p.slice(p.length - hold);
    return p.slice(0, p.length - hold);
  }

  /** Adds the final text and releases everything held (unless a stop string matches). */
  flush(text = ''): string {
    const out = this.push(text);
    if (this.stopped !== undefined) return out;
    const rest = this.#pending;
    this.#pending = '';
    return out + rest;
  }
}
