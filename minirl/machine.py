"""Where a run computes: the CPU, torch's kernel dispatch, threads. Recorded in config.yaml and atop every notebook.

A float32 sum depends on the order of its additions, and torch's CPU kernels pick that order by the CPU: ATen
dispatches each kernel to the widest vector unit it finds (`ATEN_CPU_CAPABILITY`: AVX-512 on many Intel Xeons,
AVX2 on AMD EPYC), MKL picks a matrix-multiply code path per processor. A seeded training run feeds every
rounding back into the next step's sampling, so the same seed ends elsewhere on another CPU. No setting of these
libraries makes runs identical across Intel and AMD at a bearable cost (`bench/reproducibility.py`, the table
in `minirl/README.md`), so the book states results as ranges over seeds and names the machine of every output.
"""

from __future__ import annotations

import os
import platform

import torch

PINS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")
"""Environment variables that change which code path torch's CPU libraries take (shown when set)."""


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux; the platform's processor string elsewhere)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, str]:
    """CPU model, ATen's capability (AVX512, AVX2, DEFAULT), torch version, intra-op threads, numeric pins set."""
    pins = " ".join(f"{key}={os.environ[key]}" for key in PINS if key in os.environ)
    return {"cpu": cpu_model(), "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "threads": str(torch.get_num_threads()), "pins": pins or "(none)"}
