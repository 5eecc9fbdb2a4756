"""Helpers for graded tests: load the reader's chapter file, call it safely, explain mistakes.

A graded test should fail with a sentence a learner can act on ("the EOS token itself is masked
out: ..."), never with a bare `assert False`.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import traceback
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
CALL_TIMEOUT_S = int(os.environ.get("MINIRL_GRADING_TIMEOUT_S", "10"))  # the harness tests use 2 s


class NotStarted(BaseException):
    """The exercise still raises NotImplementedError (shown as 'todo' in the progress table).

    A BaseException, like pytest's own outcomes, not an AssertionError: Hypothesis then ends a property test at the
    first example instead of shrinking a failure that every input has (seconds per check on an unsolved file)."""


def target_dir(config) -> Path:
    """The folder whose chapter files are graded, from the --target option."""
    target = config.getoption("--target")
    path = REPO_ROOT / target if target in ("exercises", "solutions") else Path(target)
    if not path.is_dir():
        raise pytest.UsageError(f"--target {target!r}: no such folder ({path})")
    return path


def load_chapter(config, name: str):
    """Import `<target>/<name>.py` fresh, under a private module name."""
    path = target_dir(config) / f"{name}.py"
    if not path.exists():
        pytest.fail(f"{path} does not exist: the chapter file to grade is missing.", pytrace=False)
    spec = importlib.util.spec_from_file_location(f"graded_{path.parent.name}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        pytest.fail(f"could not import {path}:\n{traceback.format_exc(limit=-1)}", pytrace=False)
    return module


def _on_alarm(signum, frame):
    raise TimeoutError


def call(fn, *args, **kwargs):
    """Call the reader's function; turn 'not written', crashes and hangs into clear messages."""
    name = getattr(fn, "__name__", str(fn))
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(CALL_TIMEOUT_S)
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotStarted(f"{name} is not written yet: it still raises NotImplementedError.") from None
    except TimeoutError:
        pytest.fail(f"{name} did not return within {CALL_TIMEOUT_S} s: is there an endless loop?", pytrace=False)
    except Exception as error:
        where = traceback.format_exception(type(error), error, error.__traceback__, limit=-2)
        pytest.fail(f"{name} raised {type(error).__name__}: {error}\n{''.join(where)}", pytrace=False)
    finally:
        if use_alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


def raised(fn, *args, **kwargs) -> Exception | None:
    """Call the reader's function where it SHOULD raise; return the exception (None if it returned).

    'Not written yet' and hangs are reported as by `call`.
    """

    def attempt(*a, **k):
        try:
            fn(*a, **k)
        except NotImplementedError:
            raise
        except Exception as error:
            return error
        return None

    attempt.__name__ = getattr(fn, "__name__", str(fn))
    return call(attempt, *args, **kwargs)


def expect_tensor(out, shape: tuple, what: str) -> torch.Tensor:
    """Fail unless `out` is a tensor of `shape`."""
    if not isinstance(out, torch.Tensor):
        pytest.fail(f"{what} should be a torch.Tensor, got {type(out).__name__}.", pytrace=False)
    if tuple(out.shape) != tuple(shape):
        pytest.fail(f"{what} should have shape {tuple(shape)}, got {tuple(out.shape)}.", pytrace=False)
    return out


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> bool:
    """True if a and b have the same shape and values (NaN never matches)."""
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=rtol))


def fail(message: str):
    """Fail the test with a message for the learner (no Python traceback of the test itself)."""
    pytest.fail(message, pytrace=False)


