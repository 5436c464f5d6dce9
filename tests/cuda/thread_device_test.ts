/**
 * Every host thread that touches the GPU works on the rank's device: CUDA's
 * current device is per thread, a new thread (a Deno worker such as the NCCL
 * watchdog's) starts on device 0, and the emulated device refuses a thread
 * that touches another device's stream, event or memory (a real GPU fails
 * too, or makes a context on GPU 0). The CUDA library makes its device
 * current on each thread that calls it (kernels/cuda/runtime.cu,
 * dt_bind_thread_), so the rank's worker on GPU 2 queries its event and
 * copies its memory; the emulator's own check is shown refusing a thread
 * that did not.
 */
import assert from "node:assert/strict";
import { HAVE_EMU } from "../gpu/_emu.ts";

const REPO = new URL("../..", import.meta.url).pathname;

Deno.test({
  name:
    "a worker thread of a rank on GPU 2 touches the rank's event and memory through the library",
  ignore: !HAVE_EMU,
  async fn() {
    const r = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--config",
        `${REPO}deno.json`,
        `${REPO}tests/cuda/scripts/thread_device.ts`,
      ],
      env: { DTRAIN_CUDA_EMU_DEVICES: "4", LOCAL_RANK: "2" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const out = new TextDecoder().decode(r.stdout);
    assert.equal(r.code, 0, out + new TextDecoder().decode(r.stderr));
    const seen = JSON.parse(out.trim().split("\n").at(-1)!);
    assert.equal(seen.device, 2);
    assert.deepEqual(seen.worker, { query: "ok", copy: "ok" });
  },
});
