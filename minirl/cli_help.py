"""What `python -m minirl <command> --help` prints: usage, keys and an example, read from the source.

The keys and their one-line descriptions come from the config dataclasses' field docstrings, parsed with `ast`,
so `--help` imports neither torch nor the command's module and starts no work.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent


def dataclass_keys(source: Path, root: str) -> list[tuple[str, str, str]]:
    """(dotted key, default as written, first sentence of its docstring) for every field of the dataclass `root`
    in the file `source`, nested dataclass fields flattened to dotted keys (`actor_rollout_ref.actor.optim.lr`)."""
    tree = ast.parse(source.read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    constants = {node.targets[0].id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant)}
    keys = []

    def walk(class_name: str, prefix: str):
        body = classes[class_name].body
        for i, statement in enumerate(body):
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            annotation = ast.unparse(statement.annotation)
            if annotation in classes:
                walk(annotation, f"{prefix}{statement.target.id}.")
                continue
            following = body[i + 1] if i + 1 < len(body) else None
            doc = (str(following.value.value) if isinstance(following, ast.Expr)
                   and isinstance(following.value, ast.Constant) else "")
            value = statement.value
            if isinstance(value, ast.Name) and value.id in constants:
                value = ast.Constant(constants[value.id])
            default = (str(value.value) if isinstance(value, ast.Constant) and value.value is not None
                       else "null" if isinstance(value, ast.Constant) else ast.unparse(value) if value else "")
            if default.startswith("${"):  # an interpolation: the key follows another one
                default = "(follows " + default.strip("${}").replace("oc.select:", "").split(",")[0] + ")"
            sentence = re.split(r"(?<!e\.g)(?<!i\.e)\. ", " ".join(doc.split()))[0].rstrip(".")
            keys.append((f"{prefix}{statement.target.id}", default, sentence))

    walk(root, "")
    return keys


def _key_table(keys: list[tuple[str, str, str]]) -> str:
    return "\n".join(f"  {key}={default}\n      {doc}" for key, default, doc in keys)


# The keys a first run changes; `python -m minirl config` prints all of them with their values.
TRAIN_KEYS = ("algorithm.adv_estimator", "data.train_files", "data.val_files", "data.train_batch_size",
              "data.max_response_length", "actor_rollout_ref.model.path", "actor_rollout_ref.rollout.n",
              "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.ppo_mini_batch_size",
              "actor_rollout_ref.actor.policy_loss.loss_mode", "actor_rollout_ref.actor.use_kl_loss",
              "trainer.total_training_steps", "trainer.test_freq",
              "trainer.default_local_dir", "trainer.resume_mode", "data.seed")

COMMANDS = {
    "train": ("python -m minirl train [key=value ...]",
              "Train with verl's PPO trainer loop (legacy RayPPOTrainer.fit): the tiny task, GRPO, from the cached "
              "SFT warm start by default.\nKeys are verl 0.9.1's (Hydra's key=value, +key=value); a verl key that "
              "minirl lacks is refused or listed\nas 'no effect' with the reason. `python -m minirl config` prints "
              "every key with its value.",
              "python -m minirl train algorithm.adv_estimator=rloo trainer.total_training_steps=50"),
    "config": ("python -m minirl config [key=value ...]",
               "Print the resolved config as YAML and exit (verl/Hydra's --cfg job): no model, no data.",
               "python -m minirl config algorithm.adv_estimator=gae | grep -A3 critic:"),
    "warm-start": ("python -m minirl warm-start [tiny|chain|chain-zero|word|tool|teacher ...]",
                   "Build (the first time, about a minute of SFT) or show each named cached SFT warm start and print "
                   "its directory and its\nwarm_start.json (accuracy, seed, settings). The cache is $MINIRL_CACHE_DIR, "
                   "else ~/.cache/minirl.\n  tiny        the arithmetic task of `make demo` and most chapters\n"
                   "  chain       the chain task of Chapters 5 and 8\n  chain-zero  R1-Zero's start for Chapter 8\n"
                   "  word        Lab A's GSM8K-format word problems\n  tool        Chapter 13's sums with a "
                   "calculator tool\n  teacher     Chapter 14's teacher for distillation (1.6M parameters)",
                   "python -m minirl warm-start chain"),
    "merge": ("python -m minirl merge ADAPTER_DIR OUT_DIR [--base MODEL_DIR]",
              "Merge a LoRA adapter (a LoRA run's checkpoint: RUN_DIR/global_step_N/actor) into its base model and "
              "save a plain\nHugging Face directory with the tokenizer (verl: python -m verl.model_merger merge). "
              "The base defaults to the\nmodel the adapter was trained on (adapter_config.json).",
              "python -m minirl merge runs/lora/global_step_20/actor runs/lora/merged"),
    "plot": ("python -m minirl plot RUN_DIR [RUN_DIR ...] [--view curves|debug] [--out PNG]",
             "Plot the learning curves of one or more runs (their metrics.jsonl) and save a PNG in the first "
             "run's directory.\n--view debug draws Lab C's checklist (ppo_kl, pg_clipfrac, entropy, grad_norm, the "
             "zero-spread share, ...).",
             "python -m minirl plot runs/demo --view debug"),
    "preference-data": ("python -m minirl preference-data",
                        "Build (the first time: an SFT warm start, then sampled and labelled comparisons; minutes) "
                        "or show the\npreference task of Chapters 3 and 6, and print its directory and "
                        "preference.json.",
                        "python -m minirl preference-data"),
    "train-rm": ("python -m minirl train-rm [key=value ...]",
                 "Train a Bradley-Terry reward model on comparisons (minirl/reward_model.py; TRL's RewardConfig "
                 "names).",
                 "python -m minirl train-rm num_train_epochs=2 output_dir=runs/rm"),
    "dpo": ("python -m minirl dpo [key=value ...]",
            "DPO on fixed comparisons (minirl/dpo.py; TRL's DPOConfig names).",
            "python -m minirl dpo beta=0.1 loss_type=ipo output_dir=runs/dpo_ipo"),
}

KEY_SOURCES = {"train-rm": ("reward_model.py", "RewardModelConfig"), "dpo": ("dpo.py", "DPOConfig")}


def command_help(command: str) -> str:
    """The help text of one command (usage, what it does, its keys, an example)."""
    usage, what, example = COMMANDS[command]
    text = [f"usage: {usage}", "", what]
    if command in ("train", "config"):
        keys = {key: (key, default, doc) for key, default, doc in dataclass_keys(LIBRARY / "config.py", "Config")}
        text += ["", f"Common keys (of {len(keys)}; default, then what it does):",
                 _key_table([keys[key] for key in TRAIN_KEYS])]
    if command in KEY_SOURCES:
        file, root = KEY_SOURCES[command]
        text += ["", "Keys (default, then what it does):", _key_table(dataclass_keys(LIBRARY / file, root))]
    text += ["", f"example: {example}"]
    return "\n".join(text)
