"""minirl's trainer-level pieces vs verl 0.9.1: metrics of a batch, validation metrics, lr schedules,
balance_batch's order, and the list of config keys minirl accepts.

Runs in .venv-verl (see test_verl_parity.py).
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from parity import COMPARED

from minirl import metrics as M
from minirl.config import OptimConfig
from minirl.optim import lr_factor
from minirl.protocol import DataProto as MiniDataProto
from minirl.seqlen_balancing import balance_order, calculate_workload

try:
    from verl import DataProto
    from verl.trainer.ppo import metric_utils as VM
    from verl.utils import torch_functional as VF
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.seqlen_balancing import calculate_workload as verl_workload
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions
except ImportError:  # pragma: no cover - the parity environment always has verl
    pytest.skip("verl 0.9.1 is not installed (run make parity)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]


def random_batch(seed: int, rows: int = 16, prompt: int = 6, response: int = 8, use_critic: bool = True):
    g = torch.Generator().manual_seed(seed)
    prompt_len = torch.randint(1, prompt + 1, (rows,), generator=g)
    response_len = torch.randint(0, response + 1, (rows,), generator=g)
    response_len[0] = response  # one row hits the length limit
    prompt_mask = (torch.arange(prompt)[None] >= prompt - prompt_len[:, None]).long()
    response_mask = (torch.arange(response)[None] < response_len[:, None]).long()
    tensors = {
        "prompts": torch.randint(0, 50, (rows, prompt), generator=g),
        "responses": torch.randint(0, 50, (rows, response), generator=g),
        "attention_mask": torch.cat([prompt_mask, response_mask], 1), "response_mask": response_mask,
        "token_level_scores": torch.randn(rows, response, generator=g) * response_mask,
        "token_level_rewards": torch.randn(rows, response, generator=g) * response_mask,
        "advantages": torch.randn(rows, response, generator=g), "returns": torch.randn(rows, response, generator=g),
        "old_log_probs": -torch.rand(rows, response, generator=g) * 3,
        "rollout_log_probs": -torch.rand(rows, response, generator=g) * 3,
    }
    if use_critic:
        tensors["values"] = torch.randn(rows, response, generator=g)
    return tensors


def close(ours: dict, theirs: dict, keys) -> None:
    for key in keys:
        a, b = float(ours[key]), float(theirs[key])
        assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, rel=1e-5, abs=1e-6), (key, a, b)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("use_critic", [True, False])
def test_data_timing_throughput_and_debug_metrics(seed, use_critic):
    tensors = random_batch(seed, use_critic=use_critic)
    verl_batch = DataProto.from_dict(tensors={k: v.clone() for k, v in tensors.items()})
    verl_batch.meta_info["global_token_num"] = tensors["attention_mask"].sum(-1).tolist()
    mini_batch = MiniDataProto(batch=tensors)
    theirs = VM.compute_data_metrics(verl_batch, use_critic=use_critic)
    ours = M.compute_data_metrics(mini_batch, use_critic, max_prompt_length=6, max_response_length=8)
    shared = set(theirs) & set(ours)
    assert set(ours) - set(theirs) == set(), set(ours) - set(theirs)
    assert set(theirs) - shared <= {"num_turns/min", "num_turns/max", "num_turns/mean"}
    close(ours, theirs, shared)
    timing = {"gen": 1.5, "ref": 0.25, "values": 0.5, "adv": 0.01, "update_critic": 2.0, "update_actor": 3.0,
              "step": 8.0, "old_log_prob": 0.7, "reward": 0.1, "testing": 4.0}
    theirs_t, ours_t = VM.compute_timing_metrics(verl_batch, timing), M.compute_timing_metrics(mini_batch, timing)
    assert ours_t.keys() == theirs_t.keys()
    close(ours_t, theirs_t, theirs_t)
    theirs_p = VM.compute_throughout_metrics(verl_batch, timing, n_gpus=4)
    close(M.compute_throughput_metrics(mini_batch, timing, 4), theirs_p, theirs_p)
    theirs_d = calculate_debug_metrics(verl_batch)
    ours_d = M.compute_debug_metrics(mini_batch)
    assert ours_d.keys() == theirs_d.keys()
    close(ours_d, theirs_d, theirs_d)
    COMPARED["metrics.compute_data/timing/throughput/debug_metrics"] += 1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("with_pred", [False, True])
def test_validation_metrics(n, with_pred):
    rng = np.random.default_rng(n)
    prompts = 7
    sources = ["a/b" if i % 3 else "c" for i in range(prompts) for _ in range(n)]
    uids = [str(i) for i in range(prompts) for _ in range(n)]
    infos = {"reward": rng.integers(0, 2, prompts * n).astype(float).tolist(),
             "acc": rng.integers(0, 2, prompts * n).astype(bool).tolist(),
             "score": rng.normal(size=prompts * n).tolist()}
    if with_pred:
        infos["pred"] = [str(v) for v in rng.integers(0, 3, prompts * n)]
    ours = M.process_validation_metrics(sources, uids, infos)
    nested = VM.process_validation_metrics(sources, uids, infos)
    theirs = {}  # verl's RayPPOTrainer._val_metrics_update naming, written out
    for source, var2metric in nested.items():
        core_var = "acc" if "acc" in var2metric else "reward"
        for var, metric2val in var2metric.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric2val)
            for metric, value in metric2val.items():
                core = var == core_var and metric.startswith(("mean", "maj", "best")) and f"@{n_max}" in metric
                theirs[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{metric}"] = value
    assert ours.keys() == theirs.keys()
    close(ours, theirs, theirs)
    COMPARED["metrics.process_validation_metrics"] += len(theirs)


@pytest.mark.parametrize("kind, warmup, ratio, min_lr, cycles", [
    ("constant", -1, 0.0, 0.0, 0.5), ("constant", 5, 0.0, 0.0, 0.5), ("constant", 0, 0.3, 0.0, 0.5),
    ("cosine", -1, 0.1, 0.0, 0.5), ("cosine", 3, 0.0, 0.2, 0.5), ("cosine", 0, 0.25, 0.1, 1.0)])
def test_lr_schedules(kind, warmup, ratio, min_lr, cycles):
    total = 20
    optim = OptimConfig(lr=1.0, lr_warmup_steps=warmup, lr_warmup_steps_ratio=ratio, lr_scheduler_type=kind,
                        min_lr_ratio=min_lr, num_cycles=cycles)
    num_warmup = warmup if warmup > 0 else int(ratio * total)  # FSDPEngine._build_lr_scheduler
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = (VF.get_constant_schedule_with_warmup(opt, num_warmup) if kind == "constant" else
                 VF.get_cosine_schedule_with_warmup(opt, num_warmup, total, min_lr_ratio=min_lr, num_cycles=cycles))
    for step in range(total + 1):
        assert lr_factor(step, optim, total) == pytest.approx(scheduler.get_last_lr()[0], abs=1e-12), step
        opt.step()
        scheduler.step()
    COMPARED["optim.lr_factor"] += total + 1


@pytest.mark.parametrize("seed", range(5))
def test_balance_order_is_verls_single_partition_order(seed):
    lengths = torch.randint(1, 60, (24,), generator=torch.Generator().manual_seed(seed))
    workload = verl_workload(lengths)
    assert torch.equal(calculate_workload(lengths), workload.long())
    partition = get_seqlen_balanced_partitions(workload.tolist(), k_partitions=1, equal_size=True)[0]
    partition.sort(key=lambda x: (workload[x], x))  # RayPPOTrainer._balance_batch, verbatim in effect
    assert balance_order(lengths) == partition[::2] + partition[1::2][::-1]
    COMPARED["seqlen_balancing.balance_order"] += 1


def flattened_verl_keys() -> list[str]:
    root = Path(importlib.util.find_spec("verl").origin).parent
    tree = yaml.safe_load((root / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())
    keys = []

    def walk(prefix, node):
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            keys.append(prefix)

    walk("", tree)
    return sorted(k for k in keys if not k.endswith("._target_") and k != "_target_")


def test_minirl_key_list_is_verls(request):
    """minirl/verl_keys.txt (the keys `python -m minirl config` accepts) equals verl 0.9.1's generated config."""
    listed = [line for line in (REPO / "minirl" / "verl_keys.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    assert listed == flattened_verl_keys(), "regenerate: .venv-verl/bin/python tests/parity/test_trainer_parity.py " \
                                            "--write"


def test_the_refused_keys_defaults_are_verls():
    """A key of MINIRL_LACKS is accepted only at verl's default: that default must be verl 0.9.1's (a default that
    follows another key, `${...}`, is listed as null)."""
    from minirl.config import MINIRL_LACKS

    root = Path(importlib.util.find_spec("verl").origin).parent
    tree = yaml.safe_load((root / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())
    for key, (default, _why) in MINIRL_LACKS.items():
        node = tree
        for part in key.split("."):
            node = node[part]
        if isinstance(node, str) and node.startswith("${"):
            node = None
        assert node == default, f"{key}: minirl says verl's default is {default!r}, verl 0.9.1 has {node!r}"
        COMPARED["config.MINIRL_LACKS defaults"] += 1


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        path = REPO / "minirl" / "verl_keys.txt"
        header = [line for line in path.read_text().splitlines() if line.startswith("#")]
        path.write_text("\n".join(header + flattened_verl_keys()) + "\n")
