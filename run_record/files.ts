/**
 * The names of the files a run directory holds, apart from their schemas (run_record/format.ts), so that
 * the launcher can look for them without loading the schema library.
 */

/** File names inside a run directory. */
export const RUN_FILES = {
  run: "run.json",
  config: "config.json",
  metrics: "metrics.jsonl",
  dataOrder: "data_order.jsonl",
} as const;
