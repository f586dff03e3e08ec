"""Issue 13's exit race, fast: import torch once, then fork N children that each run training_step.py's step and
leave through the interpreter's normal exit (Py_FinalizeEx, then the libraries' destructors). Counts the children
killed by SIGABRT. Run under `fakegpu run --devices a100:2 [--report-dir DIR]` with the cores kept busy:
    fakegpu run --devices a100:2 -- python tests/native_cuda/scripts/exit_race_fork.py 200
The parent never initialises CUDA or autograd, so each child starts as a fresh process would."""

import os
import runpy
import signal
import sys
from pathlib import Path

import torch  # noqa: F401  (imported once here, so every forked child starts with torch loaded)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
aborts = ok = other = 0
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        break
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGABRT:
        aborts += 1
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        ok += 1
    else:
        other += 1
else:
    print(f"runs={n} ok={ok} aborts={aborts} other={other}", flush=True)
    sys.exit(0)

# the child: training_step.py's step, then off the end of the script like any program
runpy.run_path(str(Path(__file__).with_name("training_step.py")), run_name="__main__")
