"""Run a recipe end to end: plan, set up the output folder, resume or start, synthesise, write
the outputs. `Run` is what `dpsynth run` and `dpsynth.synthesize` both execute.

Outputs in `output.dir`: `synthetic.<format>`, `privacy.json` (the ledger, every figure
recomputed from its events), `metrics.jsonl` (per-iteration diagnostics), `usage.json`
(generator and embedder calls, tokens, failures, cost), `config.json` (the resolved config),
`run.log`, and `checkpoints/`: the recipe's checkpoints and `releases.jsonl`, the write-ahead
journal of every release ever made for the folder (docs/privacy.md, "Crashes and resume").

- `runner`: `Run`, the order of the steps;
- `folder`: the output folder's set-up, and a finished run found there;
- `resume`: journal ↔ checkpoint ↔ ledger replay, and the noise stream's position;
- `models`: the generator and embedder, built and checked before any release;
- `outputs`: the synthetic set, privacy.json (complete, or incomplete for a stopped run).
"""

from dpsynth.run.folder import prepare_output_dir, released_anything
from dpsynth.run.outputs import NOT_PRIVATE, NOT_PRIVATE_COLUMN, RunOutputs, stopped_summary
from dpsynth.run.runner import Run, run

__all__ = ["NOT_PRIVATE", "NOT_PRIVATE_COLUMN", "Run", "RunOutputs", "prepare_output_dir",
           "released_anything", "run", "stopped_summary"]
