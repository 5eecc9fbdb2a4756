"""The policy-loss registry: each loss's defining property on a hand-made batch, the config keys that choose and tune
a loss, and the actor training with a loss chosen by name. (Number-for-number agreement with verl 0.9.1 is
tests/parity/test_policy_loss_parity.py.)"""

import math
from types import SimpleNamespace

import pytest
import torch

from minirl.config import load_config
from minirl.policy_loss import POLICY_LOSS_REGISTRY, get_policy_loss_fn, policy_loss_view, register_policy_loss
from minirl.soft_clip import sapo_gate

VERL_NAMES = {"vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo",
              "bypass_mode"}  # verl/trainer/ppo/core_algos.py, verl 0.9.1


def actor(**overrides):
    lines = [f"actor_rollout_ref.actor.{key}={value}" for key, value in overrides.items()]
    return policy_loss_view(load_config(lines, announce=False).actor_rollout_ref.actor, {})


def grad_wrt_log_prob(name, old, new, adv, mask, config, mode="token-mean"):
    leaf = new.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn(name)(old, leaf, adv, mask, loss_agg_mode=mode, config=config)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def test_the_registry_has_verl_s_names_and_refuses_a_second_function_under_one():
    assert set(POLICY_LOSS_REGISTRY) == VERL_NAMES
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("gspo")(lambda *args, **kwargs: None)
    with pytest.raises(ValueError, match="unknown policy loss 'gsop'.*registered: bypass_mode, cispo"):
        get_policy_loss_fn("gsop")


def test_gspo_clips_whole_answers_and_gives_each_token_the_sequence_ratio():
    """Two answers: the first moved a lot on one token, the second barely. GSPO's ratio is per answer (the geometric
    mean), so the first answer is clipped on every token and the second on none; under token-mean each unclipped
    token's gradient is -A s_1 / 6 (6 tokens in the batch), the same for every token of the answer."""
    old = torch.zeros(2, 3).log_softmax(-1)
    new = old.clone()
    new[0, 0] += 0.9                           # s_0 = exp(0.9 / 3) = 1.35: outside 1 +- 0.2
    new[1, 1] += 0.03                          # s_1 = exp(0.01) = 1.01: inside
    adv, mask = torch.ones(2, 3), torch.ones(2, 3)
    _, grad, metrics = grad_wrt_log_prob("gspo", old, new, adv, mask, actor())
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)        # 3 of 6 tokens: all of answer 0
    assert torch.all(grad[0] == 0)                                   # clipped together
    assert torch.allclose(grad[1], torch.full((3,), -math.exp(0.01) / 6))   # -A s_1 / (6 tokens), every token


def test_cispo_keeps_the_gradient_of_a_token_ppo_drops():
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    new = torch.log(torch.tensor([[0.9, 0.5]]))                       # r = 1.8 on token 0
    adv, mask = torch.ones(1, 2), torch.ones(1, 2)
    _, ppo_grad, _ = grad_wrt_log_prob("vanilla", old, new, adv, mask, actor())
    _, cispo_grad, metrics = grad_wrt_log_prob("cispo", old, new, adv, mask, actor())
    assert ppo_grad[0, 0] == 0                                       # PPO: clipped, no gradient
    assert cispo_grad[0, 0] == pytest.approx(-1.2 / 2)                # CISPO: weight clip(1.8) = 1.2, kept
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)


def test_sapo_gate_has_ppo_s_slope_at_one_and_fades():
    ratio = torch.tensor([1.0], requires_grad=True)
    sapo_gate(ratio, 1.0).backward()
    assert ratio.grad.item() == pytest.approx(1.0)                  # d f / d r = 4 sigma (1 - sigma) = 1 at r = 1
    far = torch.tensor([6.0], requires_grad=True)
    sapo_gate(far, 1.0).backward()
    assert 0 < far.grad.item() < 0.03                                # smooth, never exactly 0


def test_sapo_ignores_loss_agg_mode_as_verl_does_and_says_so(capsys):
    old, new = torch.zeros(2, 4), torch.zeros(2, 4)
    adv, mask = torch.ones(2, 4), torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    losses = {mode: get_policy_loss_fn("sapo")(old, new, adv, mask, loss_agg_mode=mode, config=actor())[0]
              for mode in ("token-mean", "seq-mean-token-sum")}
    assert losses["token-mean"] == losses["seq-mean-token-sum"]
    load_config(["actor_rollout_ref.actor.policy_loss.loss_mode=sapo"])
    assert "aggregates its policy loss with seq-mean-token-mean" in capsys.readouterr().err


def test_dppo_tv_trusts_a_region_of_probability_not_of_ratio():
    """A rare token doubling (0.001 -> 0.002, r = 2) stays inside a TV region of 0.2; a common one moving 0.5 -> 0.8
    (r = 1.6) leaves it. PPO's ratio clip judges them the other way round."""
    old = torch.log(torch.tensor([[0.001, 0.5]]))
    new = torch.log(torch.tensor([[0.002, 0.8]]))
    adv, mask = torch.ones(1, 2), torch.ones(1, 2)
    _, grad, metrics = grad_wrt_log_prob("dppo_tv", old, new, adv, mask, actor())
    assert grad[0, 0] != 0 and grad[0, 1] == 0
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    _, ppo_grad, _ = grad_wrt_log_prob("vanilla", old, new, adv, mask, actor())
    assert ppo_grad[0, 0] == 0 and ppo_grad[0, 1] == 0               # both ratios are above 1.2


def test_clip_cov_detaches_only_high_covariance_candidates():
    """cov_t = (A_t - mean A)(log pi_t - mean log pi): +1.9 for the confident rewarded token 0 and for the unlikely
    penalised token 2 (both moves sharpen the policy), -1.9 for tokens 1 and 3."""
    torch.manual_seed(0)
    adv = torch.tensor([[3.0, 3.0, -1.0, -1.0]])
    log_prob = torch.tensor([[-0.1, -2.0, -2.0, -0.1]])
    config = actor(**{"policy_loss.clip_cov_ratio": 0.5, "policy_loss.clip_cov_lb": 0.5})   # budget: 2 tokens
    _, grad, metrics = grad_wrt_log_prob("clip_cov", log_prob, log_prob, adv, torch.ones(1, 4), config)
    assert grad[0, 0] == 0 and grad[0, 2] == 0 and grad[0, 1] != 0 and grad[0, 3] != 0
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)


def test_kl_cov_penalises_the_top_covariance_token():
    adv = torch.tensor([[3.0, 3.0, -1.0, -1.0]])
    old = torch.tensor([[-0.1, -2.0, -2.0, -0.1]])
    new = old + 0.1
    config = actor(**{"policy_loss.kl_cov_ratio": 0.25, "policy_loss.ppo_kl_coef": 1.0})
    loss, _, _ = grad_wrt_log_prob("kl_cov", old, new, adv, torch.ones(1, 4), config)
    plain = -(adv * math.exp(0.1)).mean()
    assert loss.item() == pytest.approx(plain.item() + 0.1 / 4)      # |log r| = 0.1 on 1 of 4 tokens


def test_dro_needs_its_beta_and_gpg_ignores_the_old_policy():
    old, new, adv, mask = torch.zeros(1, 2), torch.full((1, 2), -0.5), torch.ones(1, 2), torch.ones(1, 2)
    with pytest.raises(ValueError, match="positive actor_rollout_ref.actor.policy_loss.dro_beta"):
        get_policy_loss_fn("dro")(old, new, adv, mask, config=actor())
    loss, metrics = get_policy_loss_fn("gpg")(old + 5, new, adv, mask, config=actor())
    assert loss.item() == pytest.approx(0.5) and metrics == {}


@pytest.mark.parametrize("overrides, message", [
    (["actor_rollout_ref.actor.policy_loss.loss_mode=gsop"], "is not one of bypass_mode, cispo"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=dro"], "needs a positive"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"], "set by algorithm.rollout_correction.bypass_mode"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "algorithm.rollout_correction.bypass_mode=true"],
     "overwrites it silently"),
    (["actor_rollout_ref.actor.tau_neg=0"], "SAPO's gate divides"),
    (["actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0"], "kl_cov_ratio must be > 0"),
])
def test_a_policy_loss_setting_that_cannot_train_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(overrides)


def test_clip_ratio_is_the_fallback_of_a_null_low_or_high():
    config = actor(clip_ratio=0.3, clip_ratio_low="null")
    old, new = torch.zeros(1, 1), torch.log(torch.tensor([[0.6]]))   # r = 0.6: clipped at 0.7, not at 0.8
    adv, mask = -torch.ones(1, 1), torch.ones(1, 1)
    loss, _ = get_policy_loss_fn("vanilla")(old, new, adv, mask, config=config)
    assert loss.item() == pytest.approx(0.7)


def test_a_view_of_the_actor_config_carries_the_batch_counts_and_the_correction():
    cfg = load_config([], announce=False).actor_rollout_ref.actor
    correction = SimpleNamespace(loss_type="reinforce")
    view = policy_loss_view(cfg, {"dp_size": 2}, correction)
    assert view.global_batch_info == {"dp_size": 2} and view.policy_loss.rollout_correction is correction
    assert view.clip_ratio_c == cfg.clip_ratio_c and view.policy_loss.loss_mode == "vanilla"


def test_a_run_trains_with_the_loss_its_config_names(tmp_path):
    """`policy_loss.loss_mode=gspo` is applied, not accepted without effect: a 2-step run logs GSPO's metrics (whole
    answers clipped at the paper's range, no dual clip), and SAPO's run logs no clipping at all."""
    from minirl.trainer import train

    common = ["trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.val_before_train=false",
              "trainer.logger=[]", "trainer.resume_mode=disable", "data.train_batch_size=8",
              "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
    gspo = train([f"trainer.default_local_dir={tmp_path / 'gspo'}", *common,
                  "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.clip_ratio_low=3e-4",
                  "actor_rollout_ref.actor.clip_ratio_high=4e-4"], show_progress=False)
    sapo = train([f"trainer.default_local_dir={tmp_path / 'sapo'}", *common,
                  "actor_rollout_ref.actor.policy_loss.loss_mode=sapo"], show_progress=False)
    assert gspo[-1]["actor/pg_clipfrac"] > 0.1 and gspo[-1]["actor/pg_clipfrac_lower"] == 0.0, gspo[-1]
    assert sapo[-1]["actor/pg_clipfrac"] == 0.0 and sapo[-1]["actor/pg_clipfrac_lower"] == 0.0
    assert gspo[-1]["actor/pg_loss"] != sapo[-1]["actor/pg_loss"]


def test_a_clip_cov_run_repeats(tmp_path):
    """Clip-Cov draws its tokens from torch's global generator (as verl); the trainer seeds it from data.seed, so
    the same line trains the same run (an import seeds that generator at random)."""
    from minirl.trainer import train

    def run(name):
        return train([f"trainer.default_local_dir={tmp_path / name}", "trainer.total_training_steps=1",
                      "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.logger=[]",
                      "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                      "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
                      "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.05",
                      "actor_rollout_ref.actor.policy_loss.clip_cov_lb=0.01"], show_progress=False)[-1]

    torch.manual_seed(123)
    first = run("a")
    torch.seed()  # a different global state before the second run
    second = run("b")
    assert first["actor/pg_clipfrac"] > 0 and first["actor/pg_loss"] == second["actor/pg_loss"]
