/**
 * Test rank script: every rank fails with the same error (a dataset missing everywhere), all at
 * once after a store barrier.
 */
import { storeBarrier } from "../../../distributed/control/rank_runtime.ts";

await storeBarrier("about to fail");
throw new Error("the dataset is missing on purpose");
