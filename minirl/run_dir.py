"""The run directory: one run at a time, and nothing an earlier run wrote is ever deleted.

`trainer.default_local_dir` holds a run's `config.yaml`, `metrics.jsonl` and checkpoints. Two rules:

    RunLock        a second run on the same directory is refused while the first is alive (an OS file
                   lock, released by the kernel even when the run is killed with kill -9)
    set_aside      a run that starts fresh in a directory that holds an earlier run moves the earlier
                   run's files into <dir>/previous/<UTC time>/ instead of overwriting them

verl has neither: a second run on one directory interleaves its logs and checkpoints, and a fresh run
overwrites `global_step_*`. minirl's notebooks re-run into the same directories, so the earlier files
pile up under `previous/` (small: metrics and configs; delete them when you like).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, the rest works
    fcntl = None

CHECKPOINT_PREFIX = "global_step_"
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's name
LOCK_FILE = ".minirl.lock"
RUN_FILES = ("config.yaml", "metrics.jsonl", LATEST_FILE)


class RunDirectoryBusy(RuntimeError):
    """Another live process holds the run directory's lock."""


class RunLock:
    """An exclusive, non-blocking lock on `<run_dir>/.minirl.lock`, held while the run lives.

    Use as a context manager. The file keeps the holder's pid, so the error can name it.
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.handle = None

    def __enter__(self) -> RunLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, "a+")
        except OSError as error:
            raise ValueError(f"cannot write to the run directory {self.path.parent} ({error.strerror}): choose a "
                             "writable trainer.default_local_dir.") from error
        if fcntl is not None:
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.handle.seek(0)
                holder = self.handle.read().strip() or "unknown"
                self.handle.close()
                raise RunDirectoryBusy(
                    f"another minirl run (pid {holder}) is using {self.path.parent}. Wait for it to finish, or "
                    "give this run its own trainer.default_local_dir.") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(str(os.getpid()))
        self.handle.flush()
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.close()  # closing releases the lock
            self.handle = None


def set_aside(run_dir: str | Path) -> Path | None:
    """Move an earlier run's files (config, metrics, checkpoints) into `<run_dir>/previous/<UTC time>/`.

    Returns the new folder, or None when the directory held no run. Moves are renames on one file
    system, so nothing is copied and nothing is lost if the process dies halfway.
    """
    run_dir = Path(run_dir)
    earlier = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    earlier += sorted(p for p in run_dir.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir())
    earlier += sorted(p for p in run_dir.glob(f".tmp-{CHECKPOINT_PREFIX}*") if p.is_dir())
    if not earlier:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = run_dir / "previous" / stamp
    suffix = 1
    while target.exists():
        target = run_dir / "previous" / f"{stamp}-{suffix}"
        suffix += 1
    target.mkdir(parents=True)
    for path in earlier:
        os.replace(path, target / path.name)
    return target
