/**
 * A rank's worker thread touching the rank's GPU (as the NCCL watchdog does):
 * the process computes on emulated GPU 2 (LOCAL_RANK=2 of 4), records an
 * event and fills device memory on the main thread, then a Deno worker — a
 * host thread of its own, whose CUDA current device starts at 0 — queries
 * the event and copies the memory back through the same library. Prints one
 * JSON line: what the worker saw.
 *
 *   DTRAIN_CUDA_EMU_DEVICES=4 LOCAL_RANK=2 deno run -A tests/cuda/scripts/thread_device.ts
 */
import { openCudaBackend } from "../../../tensor/cuda_backend.ts";
import { CudaRuntime, openedCudaKernels } from "../../../ffi/cuda.ts";

if (import.meta.main) {
  const b = openCudaBackend("cuda-emu");
  const k = openedCudaKernels()!;
  const rt = new CudaRuntime(k);
  const event = rt.createEvent();
  const bytes = Uint8Array.from({ length: 64 }, (_, i) => i);
  const dev = k.symbols.dt_alloc(64n)!;
  k.check(k.symbols.dt_memcpy(dev, Deno.UnsafePointer.of(bytes), 64n, 1, null), "dt_memcpy");
  rt.record(event, null);
  const worker = new Worker(import.meta.resolve("./thread_device_worker.ts"), { type: "module" });
  const seen = await new Promise<unknown>((resolve) => {
    worker.onmessage = (e) => resolve(e.data);
    worker.postMessage({
      path: k.path,
      event: String(Deno.UnsafePointer.value(event)),
      dev: String(Deno.UnsafePointer.value(dev)),
    });
  });
  worker.terminate();
  console.log(JSON.stringify({ device: b.index, worker: seen }));
}
