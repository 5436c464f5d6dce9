/**
 * The parity comparisons as an entry of the device bundle's scripts
 * (scripts/gpu_bundle.ts): there no module is the main one, so this runs
 * scripts/parity.ts's main with the command line.
 */
import { parityMain } from "../parity.ts";

Deno.exit(await parityMain(Deno.args));
