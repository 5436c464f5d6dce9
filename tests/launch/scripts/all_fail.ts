/** Test rank script: every rank fails with the same error (a dataset missing everywhere). */
await new Promise((r) => setTimeout(r, 200));
throw new Error("the dataset is missing on purpose");
