"""minirl's DPO and reward-model losses against TRL's trainers, number for number (run in .venv-trl).

    make parity-trl          # or: .venv-trl/bin/python -m pytest tests/parity_trl

Each test builds the same tiny model and preference pairs for both libraries, lets TRL's own trainer
tokenise a batch and compute its loss and metrics (`DPOTrainer.compute_loss`, `RewardTrainer.compute_loss`),
and compares them with minirl's functions on minirl's own tokenisation. A batch holds every pair, so the
order TRL's sampler picks does not matter.
"""

from __future__ import annotations

import warnings

import pytest
import torch

trl = pytest.importorskip("trl", reason="the TRL parity tests run in .venv-trl (make parity-trl)")

from datasets import Dataset  # noqa: E402
from trl import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer  # noqa: E402

from minirl import data, dpo, models, reward_model  # noqa: E402

warnings.filterwarnings("ignore")

PAIRS = [  # TRL's conversational preference layout; lengths differ so that ipo's per-token averages matter
    {"prompt": [{"role": "user", "content": "12+7=?"}], "chosen": [{"role": "assistant", "content": "12+7=19 #### 19"}],
     "rejected": [{"role": "assistant", "content": "12+7: 10+0=10, 2+7=9, 10+9=20 #### 20"}]},
    {"prompt": [{"role": "user", "content": "3+30=?"}],
     "chosen": [{"role": "assistant", "content": "3+30: 0+30=30, 3+0=3, 30+3=33 #### 33"}],
     "rejected": [{"role": "assistant", "content": "3+30=34 #### 34"}]},
    {"prompt": [{"role": "user", "content": "25+25=?"}], "chosen": [{"role": "assistant", "content": "#### 50"}],
     "rejected": [{"role": "assistant", "content": "25+25=51 #### 51"}]},
    {"prompt": [{"role": "user", "content": "1+1=?"}], "chosen": [{"role": "assistant", "content": "1+1=2 #### 2"}],
     "rejected": [{"role": "assistant", "content": "1+1=3 #### 3"}]},
]


@pytest.fixture(scope="module")
def policy_and_reference(tmp_path_factory):
    """A tiny reference model and a policy whose weights differ from it (so the log-ratios are not 0)."""
    root = tmp_path_factory.mktemp("models")
    reference_dir = models.save_tiny_model(root / "reference", seed=0)
    policy = models.load_policy(reference_dir)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    policy_dir = root / "policy"
    policy.save_pretrained(policy_dir)
    models.load_tokenizer(reference_dir).save_pretrained(policy_dir)
    return policy_dir, reference_dir


def _trl_batch(trainer):
    batch = next(iter(trainer.get_train_dataloader()))
    return {k: v.to(trainer.accelerator.device) if torch.is_tensor(v) else v for k, v in batch.items()}


@pytest.mark.parametrize("loss_type, label_smoothing", [("sigmoid", 0.0), ("ipo", 0.0), ("robust", 0.1),
                                                        ("robust", 0.3)])
@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_and_metrics_match_trl(policy_and_reference, tmp_path, loss_type, label_smoothing, beta):
    policy_dir, reference_dir = policy_and_reference
    tokenizer = models.load_tokenizer(policy_dir)
    args = DPOConfig(output_dir=str(tmp_path), beta=beta, loss_type=[loss_type], label_smoothing=label_smoothing,
                     per_device_train_batch_size=len(PAIRS), report_to="none", use_cpu=True, bf16=False,
                     max_length=None, seed=0)
    trainer = DPOTrainer(model=models.load_policy(policy_dir), ref_model=models.load_policy(reference_dir), args=args,
                         train_dataset=Dataset.from_list(PAIRS), processing_class=tokenizer)
    trainer.model.train()
    trl_loss = trainer.compute_loss(trainer.model, _trl_batch(trainer)).item()
    trl_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    encoded = dpo.encode_preference_pairs(tokenizer, PAIRS, max_length=128)
    policy_logps = dpo.pair_log_probs(models.load_policy(policy_dir), encoded)
    reference_logps = dpo.pair_log_probs(models.load_policy(reference_dir), encoded)
    chosen_lengths, rejected_lengths = encoded["lengths"].chunk(2)
    losses, chosen_rewards, rejected_rewards = dpo.dpo_loss(
        *policy_logps.chunk(2), *reference_logps.chunk(2), beta=beta, label_smoothing=label_smoothing,
        loss_type=loss_type, chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths)
    ours = dpo.dpo_metrics(chosen_rewards, rejected_rewards, *policy_logps.chunk(2))

    assert losses.mean().item() == pytest.approx(trl_loss, rel=1e-5, abs=1e-6)
    for name, value in ours.items():
        assert value == pytest.approx(trl_metrics[name], rel=1e-5, abs=1e-6), name


@pytest.mark.parametrize("center_rewards_coefficient", [None, 0.01])
def test_reward_model_loss_and_metrics_match_trl(policy_and_reference, tmp_path, center_rewards_coefficient):
    policy_dir, _ = policy_and_reference
    tokenizer = models.load_tokenizer(policy_dir)
    torch.manual_seed(0)
    model = reward_model.load_reward_model(policy_dir, new_head=True)  # backbone + a fresh scalar head
    model.config.pad_token_id = tokenizer.pad_token_id
    args = RewardConfig(output_dir=str(tmp_path), per_device_train_batch_size=len(PAIRS), report_to="none",
                        use_cpu=True, bf16=False, max_length=None, seed=0,
                        center_rewards_coefficient=center_rewards_coefficient)
    trainer = RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(PAIRS),
                            processing_class=tokenizer)
    trainer.model.train()
    trl_loss = trainer.compute_loss(trainer.model, _trl_batch(trainer)).item()
    trl_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    encoded = reward_model.encode_pairs(tokenizer, PAIRS, max_length=128)
    chosen, rejected = reward_model.score_pairs(reward_model.ScoreAtLastToken(model), encoded)
    loss, metrics = reward_model.bradley_terry_loss(chosen, rejected,
                                                    center_rewards_coefficient=center_rewards_coefficient)
    assert loss.item() == pytest.approx(trl_loss, rel=1e-5, abs=1e-6)
    assert metrics["accuracy"] == pytest.approx(trl_metrics["accuracy"])
    assert metrics["margin"] == pytest.approx(trl_metrics["margin"], rel=1e-5, abs=1e-6)
    scores = torch.cat([chosen, rejected])
    for name, value in (("min_reward", scores.min()), ("mean_reward", scores.mean()), ("max_reward", scores.max())):
        assert value.item() == pytest.approx(trl_metrics[name], rel=1e-5, abs=1e-6), name


def test_pairs_parquet_round_trip_is_what_trl_reads(tmp_path):
    """The preference task's files load with `datasets` as TRL's conversational preference layout."""
    path = data.write_parquet(PAIRS, tmp_path / "pairs.parquet")
    rows = Dataset.from_parquet(str(path)).to_list()
    assert [r["chosen"][0]["content"] for r in rows] == [p["chosen"][0]["content"] for p in PAIRS]
    assert data.read_preference_pairs(path, "train_files")[0]["prompt"] == PAIRS[0]["prompt"]
