"""`python -m minirl ...` and `python -m pytest ...` for the tests, each in a process of its own, without paying
the imports on every call.

A test of what a reader sees on the command line (the exit code, stderr, the files left behind) runs the command in
a process of its own, and the exercise harness grades answers the way `make grade` does, in a pytest process of its
own. Starting either spends about 4.5-6.5 s on two cores importing torch, transformers and minirl before it does
anything, and the suite starts such processes a few dozen times. `minirl_cli` and `pytest_cli` instead fork the
process from a server process that imported them once (multiprocessing's forkserver, one per test worker: it starts
no threads, so forking it is safe), and call minirl/__main__.py's `main` or `pytest.main` there with the command's
arguments, working directory and environment, stdout and stderr going to files. The exit code is main's (or
SystemExit's); an exception exits 1 with its traceback on stderr, as the interpreter would. One test,
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
PRELOAD = ["minirl.__main__", "minirl.trainer", "minirl.dpo", "minirl.reward_model", "minirl.lora", "pytest",
           "hypothesis", __name__]
"""What the server imports once: the command line, what its commands import, and pytest for the graders."""

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _run_main(program: str, args: list[str], cwd: str, env: dict[str, str], stdout_path: str,
              stderr_path: str) -> None:
    """The forked process: `python -m PROGRAM ARGS` (minirl or pytest) in `cwd` with environment `env`; exits with
    its code."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)
    try:
        if program == "minirl":
            from minirl.__main__ import main

            sys.argv = [str(REPO / "minirl" / "__main__.py"), *args]
            code = main(args)
        else:
            import pytest

            sys.argv = ["pytest", *args]
            code = int(pytest.main(args))
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


def _run_forked(program: str, args: tuple[str, ...], cwd: str | Path, env: dict[str, str] | None,
                timeout: float) -> subprocess.CompletedProcess:
    command = ["python", "-m", program, *args]
    with tempfile.TemporaryDirectory(prefix=f"{program}-forked-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        process = _context.Process(target=_run_main, args=(program, list(args), str(cwd),
                                                           dict(os.environ if env is None else env), str(out),
                                                           str(err)))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(command, process.exitcode, out.read_text(), err.read_text())


def minirl_cli(*args: str, cwd: str | Path = REPO, env: dict[str, str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m minirl ARGS` in a forked process; returns what `subprocess.run(..., capture_output=True,
    text=True)` would (args, returncode, stdout, stderr). Raises subprocess.TimeoutExpired after `timeout` s."""
    return _run_forked("minirl", args, cwd, env, timeout)


def pytest_cli(*args: str, cwd: str | Path = REPO, env: dict[str, str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m pytest ARGS` in a forked process, as `minirl_cli` runs minirl."""
    return _run_forked("pytest", args, cwd, env, timeout)
