/**
 * Worker that runs fuzz cases for tests/io/fuzz_test.ts. It announces each
 * case before running it, so the test can terminate it and name the case if
 * one ever hangs (a synchronous loop cannot be interrupted any other way).
 */
/// <reference lib="deno.worker" />
import { type FuzzFixtures, type FuzzTarget, prepareBases, runCase } from "./_fuzz_cases.ts";

/** The job the test posts. */
export interface FuzzJob {
  target: FuzzTarget;
  seed: number;
  cases: number;
  fixtures: FuzzFixtures;
}

/** What the worker posts back. */
export type FuzzMessage =
  | { type: "start"; index: number }
  | { type: "fail"; index: number; message: string }
  | { type: "done"; parsed: number; rejected: number; ms: number };

function send(message: FuzzMessage): void {
  self.postMessage(message);
}

self.onmessage = (event: MessageEvent<FuzzJob>) => {
  const { target, seed, cases, fixtures } = event.data;
  const bases = prepareBases(fixtures);
  const counts = { parsed: 0, rejected: 0 };
  const started = performance.now();
  for (let index = 0; index < cases; index++) {
    send({ type: "start", index });
    try {
      counts[runCase(target, bases, seed, index)]++;
    } catch (e) {
      send({
        type: "fail",
        index,
        message: e instanceof Error ? `${e.message}\n${e.stack}` : String(e),
      });
      return;
    }
  }
  send({ type: "done", ...counts, ms: performance.now() - started });
};
