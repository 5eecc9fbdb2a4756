"""minirl's distillation losses (minirl/distillation.py) vs verl 0.9.1's (verl/trainer/distillation/): every registered
name, the top-k forward KL and its diagnostics, the clamps, supervised and policy-gradient use, and the combination
with the task's PPO loss; loss values, gradients and metrics.

verl's losses read the actor's no-padding layout (one flat row of tokens; `no_padding_2_padding` cuts each response
out of it); the helpers below pack minirl's padded (B, R) tensors into that layout, with noise where verl must not look.
"""

import pytest
import torch
import yaml
from parity import COMPARED, DTYPES, Cfg, assert_close

try:
    from tensordict import TensorDict
    from verl.trainer.distillation import losses as V
    from verl.trainer.distillation.fsdp import losses as VF
    from verl.utils.metric import Metric
    from verl.workers.config import ActorConfig, DistillationConfig, DistillationLossConfig
except ImportError as error:  # a parity run that compares nothing must not pass
    pytest.fail(f"verl 0.9.1 cannot be imported here ({error}); use `make parity`.", pytrace=False)

from minirl import distillation as M
from minirl.config import load_config
from minirl.policy_loss import get_policy_loss_fn

ESTIMATORS = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
B, P, R, V_SIZE, K = 5, 4, 7, 23, 6


def value(metric):
    """A verl metric (a float, a tensor or a Metric) as a float."""
    if isinstance(metric, Metric):
        return float(metric.aggregate())
    return float(metric)


def layout(seed: int):
    """Prompt and response lengths, the (B, R) response mask (holes inside a response, as tool tokens make) and the
    verl TensorDict of the batch's shape."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(1, P + 1, (B,), generator=g)
    response_lens = torch.randint(1, R + 1, (B,), generator=g)
    response_lens[0] = R
    attention = torch.zeros(B, P + R, dtype=torch.int64)
    for i in range(B):
        attention[i, P - prompt_lens[i]:P] = 1  # left-padded prompt
        attention[i, P:P + response_lens[i]] = 1
    response_mask = attention[:, P:].clone()
    response_mask[1, 0] = 0  # a masked token inside a response
    data = TensorDict({"prompts": torch.zeros(B, P, dtype=torch.long), "responses": torch.zeros(B, R, dtype=torch.long),
                       "attention_mask": attention, "response_mask": response_mask}, batch_size=[B])
    return prompt_lens, response_lens, response_mask, data, g


def pack(padded: torch.Tensor, prompt_lens, response_lens, g, nested: bool = False) -> torch.Tensor:
    """(B, R, ...) -> verl's flat (total tokens, ...), or a nested (B, tokens, ...) tensor for a TensorDict field:
    each response value sits where the logits that predict it are (position prompt_len - 1 + t of its sequence);
    every other position holds noise verl must not read."""
    rows = []
    for i in range(B):
        length = int(prompt_lens[i] + response_lens[i])
        row = (torch.randn((length, *padded.shape[2:]), generator=g, dtype=torch.float64) * 50).to(padded.dtype)
        row[prompt_lens[i] - 1: prompt_lens[i] - 1 + response_lens[i]] = padded[i, :response_lens[i]]
        rows.append(row)
    return torch.nested.nested_tensor(rows, layout=torch.jagged) if nested else torch.cat(rows)


def valid(response_lens) -> torch.Tensor:
    """(B, R) True where a response token exists (verl's unpacked tensors are 0 elsewhere)."""
    return torch.arange(R)[None] < response_lens[:, None]


def loss_configs(**settings):
    """verl's DistillationConfig (not enabled: no teacher to resolve) and minirl's distillation_loss, same settings."""
    verl_config = DistillationConfig(distillation_loss=DistillationLossConfig(**settings))
    lines = [f"distillation.distillation_loss.{key}={'null' if v is None else v}" for key, v in settings.items()]
    return verl_config, load_config(lines, announce=False).distillation.distillation_loss


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ESTIMATORS)
def test_reverse_kl_estimators_match_verl(mode, dtype):
    for seed in range(3):
        prompt_lens, response_lens, mask, data, g = layout(seed)
        student = -torch.rand(B, R, generator=g, dtype=dtype) * 4
        teacher = student + torch.randn(B, R, generator=g, dtype=dtype) * (30 if seed == 2 else 1)  # 2: clamps act
        data["teacher_logprobs"] = pack(teacher[..., None], prompt_lens, response_lens, g, nested=True)
        verl_config, ours_config = loss_configs(loss_mode=mode, use_policy_gradient=True)
        theirs, their_metrics = V.compute_distillation_loss_reverse_kl_estimator(
            None, verl_config, {"log_probs": pack(student, prompt_lens, response_lens, g)}, data)
        ours, our_metrics = M.reverse_kl_estimator_loss(
            {"log_probs": student}, {"teacher_logprobs": teacher[..., None]}, mask, ours_config)
        assert_close(f"distillation {mode} per-token loss", ours, theirs, dtype, where=valid(response_lens))
        assert our_metrics.keys() == their_metrics.keys()
        assert_close("distillation/abs_loss", our_metrics["distillation/abs_loss"],
                     value(their_metrics["distillation/abs_loss"]), dtype)


def topk_inputs(seed: int, dtype):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, R, V_SIZE, generator=g, dtype=dtype) * 3
    teacher_full = torch.log_softmax(logits + torch.randn(B, R, V_SIZE, generator=g, dtype=dtype) * 2, -1)
    top = teacher_full.topk(K, dim=-1)
    return logits, top.values, top.indices


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("clamp", [None, -2.0])
def test_forward_kl_topk_terms_match_verl(clamp, dtype):
    """The per-token terms (fsdp/losses.py::compute_forward_kl_topk) on verl's flat layout: losses, both top-k
    masses, the overlap count and the overlap advantage; and the gradient with respect to the student's logits."""
    for seed in range(3):
        logits, teacher_lp, teacher_ids = topk_inputs(seed, dtype)
        flat = logits.reshape(1, B * R, V_SIZE)
        nested = {name: torch.nested.nested_tensor(list(t.reshape(B * R, K).split([R] * B)), layout=torch.jagged)
                  for name, t in (("lp", teacher_lp), ("ids", teacher_ids))}
        config = Cfg(distillation_loss=Cfg(log_prob_min_clamp=clamp, use_chunked_topk=False))
        leaf_theirs = flat.clone().requires_grad_(True)
        theirs = VF.compute_forward_kl_topk(leaf_theirs, nested["lp"], nested["ids"], config, "thd")
        leaf_ours = flat.clone().requires_grad_(True)
        ours = M.forward_kl_topk_terms(leaf_ours, teacher_lp.reshape(1, B * R, K), teacher_ids.reshape(1, B * R, K),
                                       clamp)
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert_close(f"forward_kl_topk {key}", ours[key], theirs[key], dtype)
        (grad_theirs,) = torch.autograd.grad(theirs["distillation_losses"].sum(), leaf_theirs)
        (grad_ours,) = torch.autograd.grad(ours["distillation_losses"].sum(), leaf_ours)
        assert_close("forward_kl_topk grad", grad_ours, grad_theirs, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_kl_topk_loss_and_metrics_match_verl(dtype):
    """losses.py::compute_forward_kl_topk: the clamp at 0 and the distillation/*mass*, overlap metrics."""
    for seed in range(3):
        prompt_lens, response_lens, mask, data, g = layout(seed)
        logits, teacher_lp, teacher_ids = topk_inputs(seed, dtype)
        _, ours_config = loss_configs(loss_mode="forward_kl_topk", topk=K)
        verl_config, _ = loss_configs(loss_mode="forward_kl_topk", topk=K)
        terms = M.forward_kl_topk_terms(logits, teacher_lp, teacher_ids, None)
        model_output = {key: pack(terms[key], prompt_lens, response_lens, g) for key in terms}
        theirs, their_metrics = V.compute_forward_kl_topk(None, verl_config, model_output, data)
        ours, our_metrics = M.forward_kl_topk_loss({"logits": logits}, {"teacher_logprobs": teacher_lp,
                                                                        "teacher_ids": teacher_ids}, mask, ours_config)
        assert_close("forward_kl_topk loss", ours, theirs, dtype, where=valid(response_lens))
        assert our_metrics.keys() == their_metrics.keys()
        for key, ours_value in our_metrics.items():
            assert_close(key, ours_value, value(their_metrics[key]), dtype)


def verl_actor(mode: str, info: dict) -> ActorConfig:
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                         loss_agg_mode=mode)
    config.global_batch_info.update(info)
    return config


def compare_distillation_loss(loss_mode: str, use_policy_gradient: bool, agg: str, seed: int) -> None:
    dtype = torch.float64
    prompt_lens, response_lens, mask, data, g = layout(seed)
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()) + 3 * seed, "global_batch_size": B + seed}
    for key, v in info.items():
        data.set_non_tensor(key, v)
    data.set_non_tensor("max_response_len", R)
    logits, teacher_lp, teacher_ids = topk_inputs(seed, dtype)
    student_lp = torch.log_softmax(logits, -1).gather(-1, teacher_ids[..., :1]).squeeze(-1)
    old = student_lp.detach() + torch.randn(B, R, generator=g, dtype=dtype) * 0.3
    data["old_log_probs"] = old
    topk = loss_mode == "forward_kl_topk"
    settings = {"loss_mode": loss_mode, "use_policy_gradient": use_policy_gradient, "loss_max_clamp": 0.5,
                "clip_ratio_high": 0.28, **({"topk": K} if topk else {})}
    verl_config, ours_config = loss_configs(**settings)
    teacher = {"teacher_logprobs": teacher_lp, "teacher_ids": teacher_ids} if topk else \
        {"teacher_logprobs": teacher_lp[..., :1] - 0.7}
    if not topk:
        data["teacher_logprobs"] = pack(teacher["teacher_logprobs"], prompt_lens, response_lens, g, nested=True)

    def student(leaf):
        return torch.log_softmax(leaf, -1).gather(-1, teacher_ids[..., :1]).squeeze(-1)

    leaf = logits.clone().requires_grad_(True)
    ours = M.distillation_loss({"log_probs": student(leaf), "logits": leaf}, teacher, mask, ours_config, agg,
                               {**info, "loss_scale_factor": None}, old_log_prob=old)
    ours_grad = torch.autograd.grad(ours[0], leaf)[0]
    leaf = logits.clone().requires_grad_(True)
    model_output = {"log_probs": pack(student(leaf), prompt_lens, response_lens, g)}
    if topk:
        terms = M.forward_kl_topk_terms(leaf, teacher_lp, teacher_ids, None)  # compared with verl's above
        model_output.update({key: pack(terms[key], prompt_lens, response_lens, g) for key in terms})
    theirs = V.distillation_loss(verl_actor(agg, {}), verl_config, model_output, data)
    theirs_grad = torch.autograd.grad(theirs[0], leaf)[0]
    name = f"distillation_loss {loss_mode} pg={use_policy_gradient} {agg}"
    assert_close(name, ours[0], theirs[0], dtype)
    assert_close(f"{name} grad", ours_grad, theirs_grad, dtype)
    assert ours[1].keys() == theirs[1].keys(), f"{sorted(ours[1])} vs verl {sorted(theirs[1])}"
    for key, ours_value in ours[1].items():
        assert_close(f"{name} {key}", ours_value, value(theirs[1][key]), dtype)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("use_policy_gradient", [False, True])
@pytest.mark.parametrize("loss_mode", ["k3", "k1", "k2", "forward_kl_topk"])
def test_distillation_loss_matches_verl(loss_mode, use_policy_gradient, agg):
    """losses.py::distillation_loss: the range metrics, the clamp, then agg_loss or the PPO loss with A_t = -l_t."""
    if loss_mode == "k1" and not use_policy_gradient:
        pytest.skip("refused by both (a gradient that does not depend on the teacher)")
    for seed in range(2):
        compare_distillation_loss(loss_mode, use_policy_gradient, agg, seed)


@pytest.mark.parametrize("use_task_rewards", [False, True])
@pytest.mark.parametrize("use_policy_gradient", [False, True])
def test_the_combination_with_the_task_loss_matches_verl(use_task_rewards, use_policy_gradient):
    """losses.py::distillation_ppo_loss: PPO loss + coef x distillation loss, or the distillation loss alone."""
    dtype = torch.float64
    prompt_lens, response_lens, mask, data, g = layout(0)
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": B}
    for key, v in info.items():
        data.set_non_tensor(key, v)
    student = -torch.rand(B, R, generator=g, dtype=dtype) * 3
    old = student + torch.randn(B, R, generator=g, dtype=dtype) * 0.2
    advantages = torch.randn(B, R, generator=g, dtype=dtype)
    teacher = student + torch.randn(B, R, generator=g, dtype=dtype)
    data["old_log_probs"], data["advantages"] = old, advantages
    data["teacher_logprobs"] = pack(teacher[..., None], prompt_lens, response_lens, g, nested=True)
    settings = {"loss_mode": "k1" if use_policy_gradient else "k3", "use_policy_gradient": use_policy_gradient,
                "use_task_rewards": use_task_rewards, "distillation_loss_coef": 0.3}
    verl_config, ours_config = loss_configs(**settings)
    leaf = student.clone().requires_grad_(True)
    actor = verl_actor("token-mean", {})
    theirs, _ = V.distillation_ppo_loss(actor, verl_config, {"log_probs": pack(leaf, prompt_lens, response_lens, g)},
                                        data)
    leaf_ours = student.clone().requires_grad_(True)
    full_info = {**info, "loss_scale_factor": None}
    policy = None
    if M.needs_policy_loss(ours_config):
        policy, _ = get_policy_loss_fn("vanilla")(old, leaf_ours, advantages, mask, "token-mean",
                                                  Cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2,
                                                      global_batch_info=full_info))
    distill, _ = M.distillation_loss({"log_probs": leaf_ours}, {"teacher_logprobs": teacher[..., None]}, mask,
                                     ours_config, "token-mean", full_info, old_log_prob=old)
    ours = M.combine_with_policy_loss(policy, distill, ours_config)
    name = f"distillation_ppo_loss task={use_task_rewards} pg={use_policy_gradient}"
    assert_close(name, ours, theirs, dtype)
    assert_close(f"{name} grad", torch.autograd.grad(ours, leaf_ours)[0], torch.autograd.grad(theirs, leaf)[0], dtype)


def test_the_registry_and_the_defaults_are_verls():
    """The same loss names (each top-k or estimator alike), and distillation_loss's defaults as verl 0.9.1's
    generated config has them (the yaml, which differs from DistillationLossConfig's own defaults)."""
    assert sorted(M.DISTILLATION_LOSS_REGISTRY) == sorted(V.DISTILLATION_LOSS_REGISTRY)
    for name in M.DISTILLATION_LOSS_REGISTRY:
        assert M.uses_topk(name) == V.get_distillation_loss_settings(name).use_topk
    from importlib.util import find_spec
    from pathlib import Path

    root = Path(find_spec("verl").origin).parent
    tree = yaml.safe_load((root / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())["distillation"]
    ours = load_config([], announce=False).distillation
    assert ours.enabled == tree["enabled"]
    for key, default in tree["distillation_loss"].items():
        if key != "_target_":
            assert getattr(ours.distillation_loss, key) == default, key
            COMPARED["config distillation defaults"] += 1
    assert ours.teacher_models["teacher_model"].model_path == tree["teacher_models"]["teacher_model"]["model_path"]
