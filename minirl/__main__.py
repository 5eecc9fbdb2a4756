"""Command line: `python -m minirl train [key=value ...]` (verl's override syntax).

    python -m minirl train                                   # the tiny task, GRPO, from the cached warm start
    python -m minirl train algorithm.adv_estimator=rloo trainer.total_training_steps=50
    python -m minirl config [key=value ...]                  # print the resolved config as YAML and exit
    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m minirl train ...   # 2 CPU processes
    python -m minirl warm-start [tiny|chain|chain-zero|word|tool|teacher] # build (or show) a cached SFT warm start
    python -m minirl plot runs/minirl [--view debug]         # learning curves (or Lab C's checklist) as PNG
    python -m minirl merge RUN/global_step_N/actor OUT       # a LoRA adapter merged into a plain HF directory
    python -m minirl preference-data                         # build (or show) the preference task (Chapters 3, 6)
    python -m minirl train-rm [key=value ...]                # train a Bradley-Terry reward model
    python -m minirl dpo [key=value ...]                     # DPO on fixed comparisons (minirl/dpo.py)
    python -m minirl COMMAND --help                          # a command's usage, keys and an example
"""

from __future__ import annotations

import os
import sys

from minirl.cli_help import COMMANDS, command_help


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code; a process of a multi-process launch exits here instead."""
    code = _run(argv)
    exit_without_teardown_if_distributed(code)
    return code


def exit_without_teardown_if_distributed(code: int) -> None:
    """In a multi-process launch, end this process now, skipping the interpreter's teardown.

    Everything is written by then (metrics, checkpoints, models are closed files). Tearing down gloo's process
    group is what fails, rarely and at random: destroying it while its worker thread still frees the last
    barrier's tensors deadlocks on the GIL (the thread waits for it, the destructor joins the thread), and
    leaving it to interpreter exit can abort ("terminate called without an active exception"). Both were seen
    in CI; `os._exit` runs no destructor, so neither can happen.
    """
    dist = sys.modules.get("torch.distributed")  # never imported: nothing to skip (and no torch import for --help)
    if dist is not None and dist.is_available() and dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _say_error(error: Exception) -> None:
    """Write `error: ...` to stderr as one line in one write: the processes of a launch share the pipe, and
    print's two writes (text, then newline) can interleave so that two ranks' messages land on one line."""
    sys.stderr.write(f"error: {error}\n")
    sys.stderr.flush()


def _run(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command in COMMANDS and {"-h", "--help"} & set(rest):
        print(command_help(command))
        return 0
    if command == "train":
        from minirl.config import load_config

        try:  # a bad key or value is reported before the trainer's imports (transformers: seconds)
            load_config(rest, announce=False)
        except ValueError as error:
            _say_error(error)
            return 2
        from minirl.run_dir import RunDirectoryBusy
        from minirl.trainer import CheckpointError, train

        try:
            train(rest)
        except (ValueError, FileNotFoundError, RunDirectoryBusy, CheckpointError) as error:  # say what to change
            _say_error(error)
            return 2
        return 0
    if command == "config":  # verl/Hydra's `--cfg job`: no model, no data
        from minirl.config import load_config, to_yaml

        try:
            config = load_config(rest)
            trainer = (f"the v1 trainer, {config.trainer.v1.trainer_mode} mode (minirl/v1/trainer.py; verl's "
                       "trainer/ppo/v1/)" if config.trainer.use_v1
                       else "the legacy trainer (minirl/trainer.py; verl's RayPPOTrainer.fit)")
            print(f"# this line trains with {trainer}\n{to_yaml(config)}", end="")
        except ValueError as error:
            _say_error(error)
            return 2
        return 0
    if command == "warm-start":
        from minirl.sft import WARM_STARTS, default_warm_start

        names = rest or ["tiny"]
        unknown = [name for name in names if name not in WARM_STARTS]
        if unknown:
            print(f"warm-start takes names of {', '.join(WARM_STARTS)} (default tiny); got {' '.join(unknown)!r}",
                  file=sys.stderr)
            return 2
        for name in names:  # several in one process: one import of torch and transformers for all of them
            path = default_warm_start(WARM_STARTS[name])
            print(path)
            print((path / "warm_start.json").read_text())
        return 0
    if command == "merge":
        from minirl.lora import merge_adapter_directory

        base = rest[rest.index("--base") + 1] if "--base" in rest[:-1] else None
        paths = [arg for i, arg in enumerate(rest) if arg != "--base" and (i == 0 or rest[i - 1] != "--base")]
        if len(paths) != 2:
            print(command_help("merge"), file=sys.stderr)
            return 2
        try:
            print(merge_adapter_directory(paths[0], paths[1], base))
        except (ValueError, FileNotFoundError) as error:
            _say_error(error)
            return 2
        return 0
    if command == "plot":
        from minirl.plot import main as plot

        return plot(rest)
    if command == "preference-data":
        from minirl.preference import default_preference_task

        path = default_preference_task()
        print(path)
        print((path / "preference.json").read_text())
        return 0
    if command == "train-rm":
        from minirl.reward_model import main as train_rm

        return train_rm(rest)
    if command == "dpo":
        from minirl.dpo import main as dpo

        return dpo(rest)
    print(f"unknown command {command!r}; use one of {', '.join(COMMANDS)} (see python -m minirl --help, or "
          "python -m minirl COMMAND --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
