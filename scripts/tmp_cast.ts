import { cpuCalls } from "../ffi/cpu.ts";
const calls = cpuCalls() as unknown as Record<string, (...a: unknown[]) => void>;
const plain = calls.dt_cast!;
const seen = new Map<string, number>();
let on = false;
(globalThis as any).__castOn = (v: boolean) => { on = v; };
calls.dt_cast = (...args: unknown[]) => {
  if (on) {
    const st = new Error().stack!.split("\n").slice(3, 7).map((l) => l.trim().replace(/file:\/\/\/work\/main\//, "")).join(" < ");
    const key = `${args[3]}->${args[1]} n=${args[4]} :: ${st}`;
    seen.set(key, (seen.get(key) ?? 0) + 1);
  }
  plain(...args);
};
(globalThis as any).__castReport = () => { for (const [k, v] of seen) console.log(v, k); };
