"""`python -m minirl ...` for the tests, in a process of its own, without paying the imports on every call.

A test of what a reader sees on the command line (the exit code, stderr, the files left behind) runs the command in
a process of its own. Starting `python -m minirl` spends about 4.5 s on two cores importing torch, transformers and
minirl before the command does anything, and the suite runs such commands a few dozen times. `minirl_cli` instead
forks the process from a server process that imported them once (multiprocessing's forkserver, one per test
worker: it starts no threads, so forking it is safe), and runs minirl/__main__.py's `main` there with the
command's arguments, working directory and environment, stdout and stderr going to files. Its exit code is main's
(or SystemExit's); an exception exits 1 with its traceback on stderr, as the interpreter would. One test,
tests/test_trainer.py::test_cli_reports_config_errors_without_a_traceback, still starts the real `python -m minirl`.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRELOAD = ["minirl.__main__", "minirl.trainer", "minirl.dpo", "minirl.reward_model", "minirl.lora", __name__]
"""What the server imports once: the command line and what its commands import."""

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _run_main(args: list[str], cwd: str, env: dict[str, str], stdout_path: str, stderr_path: str) -> None:
    """The forked process: `python -m minirl ARGS` in `cwd` with environment `env`; exits with its code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)
    sys.argv = [str(REPO / "minirl" / "__main__.py"), *args]
    try:
        from minirl.__main__ import main

        code = main(args)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if isinstance(stop.code, str):
            sys.stderr.write(stop.code + "\n")
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)  # multiprocessing's exit: its finalizers run (tqdm's lock is released), then os._exit


def minirl_cli(*args: str, cwd: str | Path = REPO, env: dict[str, str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m minirl ARGS` in a forked process; returns what `subprocess.run(..., capture_output=True,
    text=True)` would (args, returncode, stdout, stderr). Raises subprocess.TimeoutExpired after `timeout` s."""
    with tempfile.TemporaryDirectory(prefix="minirl-cli-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        process = _context.Process(target=_run_main, args=(list(args), str(cwd), dict(os.environ if env is None
                                                                                     else env), str(out), str(err)))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["python", "-m", "minirl", *args], timeout, out.read_text(),
                                            err.read_text())
        return subprocess.CompletedProcess(["python", "-m", "minirl", *args], process.exitcode, out.read_text(),
                                           err.read_text())
