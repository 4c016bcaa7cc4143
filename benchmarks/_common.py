"""What the benchmarks that drive the ``hf-plm-ext`` command line share: where things are, and one runner that
prints each command, times it, skips it when its output is already there, and logs it."""

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("HF_PLM_EXT_SHARED_DATA", ROOT.parent / "shared" / "data"))
RESULTS = ROOT / "benchmarks" / "results"
CLI = [str(Path(sys.executable).with_name("hf-plm-ext"))]


def run_cli(args, log: dict, output=None, done_file: str | None = "eval_results.json") -> None:
    """Runs ``hf-plm-ext ARGS`` unless ``output`` already holds its results (``done_file`` in it; None: ``output``
    exists), so that a benchmark split over several invocations resumes. ``log`` (kept in the work folder by the
    caller) maps the output, or the command when there is none, to the command and its seconds."""
    printable = "hf-plm-ext " + shlex.join(str(arg) for arg in args)
    key = printable if output is None else str(output)
    marker = None if output is None else Path(output) / done_file if done_file else Path(output)
    if marker is not None and marker.exists():
        print(f"(done before) $ {printable}", flush=True)
        log.setdefault(key, {"command": printable, "seconds": None})
        return
    print(f"$ {printable}", flush=True)
    start = time.perf_counter()
    subprocess.run(CLI + [str(arg) for arg in args], check=True)
    log[key] = {"command": printable, "seconds": round(time.perf_counter() - start, 1)}
