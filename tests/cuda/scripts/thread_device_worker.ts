/// <reference lib="deno.worker" />
/** The worker of thread_device.ts: queries the event and reads the memory, reporting each status. */
import { CUDA_EXTRA_SYMBOLS } from "../../../ffi/cuda.ts";

const SYMBOLS = {
  dt_cuda_event_query: CUDA_EXTRA_SYMBOLS.dt_cuda_event_query,
  dt_memcpy: { parameters: ["pointer", "pointer", "i64", "i32", "pointer"], result: "i32" },
  dt_last_error: { parameters: [], result: "pointer" },
} as const;

self.onmessage = (e: MessageEvent<{ path: string; event: string; dev: string }>) => {
  const lib = Deno.dlopen(e.data.path, SYMBOLS);
  const text = () => Deno.UnsafePointerView.getCString(lib.symbols.dt_last_error()!);
  const done = new Int32Array(1);
  const q = lib.symbols.dt_cuda_event_query(Deno.UnsafePointer.create(BigInt(e.data.event)), done);
  const back = new Uint8Array(64);
  const c = lib.symbols.dt_memcpy(
    Deno.UnsafePointer.of(back),
    Deno.UnsafePointer.create(BigInt(e.data.dev)),
    64n,
    2,
    null,
  );
  self.postMessage({
    query: q === 0 ? "ok" : text(),
    copy: c === 0 ? (back.every((v, i) => v === i) ? "ok" : "wrong bytes") : text(),
  });
};
