"""RLHF engine: the preference task, the Bradley-Terry reward model, RM-scored training, and offline DPO.

(Parity with TRL's trainers is in tests/parity_trl, run in its own venv.)
"""

import json
import math
from pathlib import Path

import pytest
import torch
from cli import minirl_cli  # tests/cli.py: `python -m minirl ...`, forked from a process that imported it
from transformers import AutoModelForSequenceClassification

from minirl import data, dpo, models, preference, reward_model
from minirl.config import load_config
from minirl.trainer import train

REPO = Path(__file__).resolve().parents[1]

PAIRS = [
    {"prompt": [{"role": "user", "content": f"{a}+{b}=?"}],
     "chosen": [{"role": "assistant", "content": f"{a}+{b}={a + b} #### {a + b}"}],
     "rejected": [{"role": "assistant", "content": f"{a}+{b}={a + b + 1} #### {a + b + 1}"}]}
    for a, b in [(1, 2), (3, 4), (10, 5), (7, 7), (12, 19), (20, 1), (2, 9), (30, 30)]
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny policy directory and the pairs as parquet."""
    root = tmp_path_factory.mktemp("rlhf")
    model_dir = models.save_tiny_model(root / "model")
    pairs = data.write_parquet(PAIRS, root / "pairs.parquet")
    return root, model_dir, pairs


# ----------------------------------------------------------------------------------------------
# The preference task
# ----------------------------------------------------------------------------------------------


def test_worked_and_direct_answers_score_by_their_final_answer():
    row = {"extra_info": {"a": 12, "b": 19}, "reward_model": {"ground_truth": "31"}}
    direct, worked = data.worked_response(row, False), data.worked_response(row, True)
    assert direct == "12+19=31 #### 31"
    assert worked == "12+19: 10+10=20, 2+9=11, 20+11=31 #### 31"
    assert data.worked_response(row, True, answer=32).endswith("20+11=32 #### 32")
    assert (preference.count_steps(direct), preference.count_steps(worked)) == (1, 3)
    for text, gold in ((direct, 1.0), (worked, 1.0), (worked.replace("31", "30"), 0.0), (worked[:-8], 0.0)):
        assert preference.gold_reward("minirl/arithmetic", text, "31") == gold


def test_bradley_terry_labels():
    assert preference.bradley_terry_probability(1.0, 0.0, 0.5) == pytest.approx(1 / (1 + math.exp(-2)))
    assert preference.bradley_terry_probability(0.0, 0.0, 0.5) == 0.5


def test_sampled_comparisons_use_trls_layout_and_label_by_the_gold(tiny):
    _, model_dir, _ = tiny
    rows = data.arithmetic_rows(12, "train")
    config = preference.PreferenceConfig(response_length=12, label_noise=1e-3)  # a near-noiseless labeller
    pairs = preference.sample_comparisons(model_dir, rows, config)
    assert pairs and all(p["chosen"][0]["role"] == "assistant" for p in pairs)
    assert all(p["chosen_gold"] >= p["rejected_gold"] for p in pairs)
    assert all(p["chosen"][0]["content"] != p["rejected"][0]["content"] for p in pairs)
    assert preference.sample_comparisons(model_dir, rows, config) == pairs  # seeded


# ----------------------------------------------------------------------------------------------
# The reward model
# ----------------------------------------------------------------------------------------------


def test_bradley_terry_loss_by_hand():
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])
    loss, metrics = reward_model.bradley_terry_loss(chosen, rejected)
    expected = -(math.log(1 / (1 + math.exp(-1))) + math.log(1 / (1 + math.exp(1)))) / 2
    assert loss.item() == pytest.approx(expected)
    assert metrics == {"accuracy": 0.5, "margin": 0.0}
    with_margin, _ = reward_model.bradley_terry_loss(chosen, rejected, margin=torch.tensor([1.0, 1.0]))
    assert with_margin.item() == pytest.approx(-(math.log(0.5) + math.log(1 / (1 + math.exp(2)))) / 2)
    centred, _ = reward_model.bradley_terry_loss(chosen, rejected, center_rewards_coefficient=0.1)
    assert centred.item() == pytest.approx(expected + 0.1 * (9 + 1) / 2)
    with pytest.raises(ValueError, match="empty batch"):
        reward_model.bradley_terry_loss(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match=r"must both be \(B,\)"):
        reward_model.bradley_terry_loss(torch.zeros(2), torch.zeros(3))


def test_the_score_is_read_at_the_last_token_even_when_pad_is_eos(tiny):
    _, model_dir, _ = tiny
    tokenizer = models.load_tokenizer(model_dir)
    torch.manual_seed(0)
    model = reward_model.load_reward_model(model_dir, new_head=True)
    prompts, answers = [p["prompt"] for p in PAIRS[:3]], ["1", "a longer answer", "#### 7"]
    encoded = reward_model.encode_conversations(tokenizer, prompts, answers)
    last = encoded["attention_mask"].sum(-1) - 1
    assert (encoded["input_ids"][torch.arange(3), last] == tokenizer.eos_token_id).all()  # the template closes it
    scores = reward_model.reward_scores(model, **encoded)
    alone = torch.cat([reward_model.reward_scores(model, **reward_model.encode_conversations(tokenizer, [p], [a]))
                       for p, a in zip(prompts, answers)])
    assert torch.allclose(scores, alone, atol=1e-5)  # padding changes nothing
    tokenizer.pad_token = tokenizer.eos_token  # Qwen's case: PAD == EOS
    padded = reward_model.encode_conversations(tokenizer, prompts, answers)
    assert torch.allclose(reward_model.reward_scores(model, **padded), scores, atol=1e-5)


def test_a_causal_lm_is_not_a_reward_model(tiny):
    _, model_dir, _ = tiny
    with pytest.raises(ValueError, match="is not a reward model .*train-rm"):
        reward_model.load_reward_model(model_dir)


def test_train_rm_saves_a_loadable_directory_and_learns_the_pairs(tiny):
    root, model_dir, pairs = tiny
    out = root / "rm"
    config = reward_model.RewardModelConfig(model_path=str(model_dir), train_files=str(pairs), val_files=str(pairs),
                                            output_dir=str(out), num_train_epochs=30, per_device_train_batch_size=8,
                                            learning_rate=3e-3, warmup_steps=0)
    summary = reward_model.train_reward_model(config, show_progress=False)
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"]
    assert summary["eval"]["accuracy"] == 1.0  # 8 training pairs, seen 30 times
    loaded = AutoModelForSequenceClassification.from_pretrained(out)
    assert loaded.config.num_labels == 1 and (out / "reward_model.json").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".rm-")]  # the temporary directory is gone


def test_train_rm_cli_names_a_bad_key_and_a_bad_file(tiny, tmp_path):
    _, model_dir, _ = tiny
    for args, message in ((["output_dirr=x"], "unknown key 'output_dirr'. Did you mean output_dir?"),
                          ([f"train_files={tmp_path}/none.parquet", f"model_path={model_dir}", "val_files=null"],
                           "does not exist")):
        cli = minirl_cli("train-rm", *args)
        assert cli.returncode == 2 and message in cli.stderr and "Traceback" not in cli.stderr, cli.stderr[-1500:]


def test_malformed_pairs_are_named(tmp_path):
    path = data.write_parquet([{**PAIRS[0], "chosen": [{"role": "assistant"}]}], tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="train_files: .*bad.parquet row 0: chosen must be a string"):
        data.read_preference_pairs(path, "train_files")


# ----------------------------------------------------------------------------------------------
# RM-scored training
# ----------------------------------------------------------------------------------------------


def test_a_reward_model_needs_its_path():
    config = load_config(["reward.reward_model.enable=true", "reward.reward_model.model_path=/rm"], announce=False)
    assert config.reward.reward_model.model_path == "/rm"
    with pytest.raises(ValueError, match="needs reward.reward_model.model_path"):
        load_config(["reward.reward_model.enable=true"], announce=False)


def test_training_on_a_reward_model_logs_the_proxy_and_the_gold(tiny, tmp_path):
    root, model_dir, _ = tiny
    torch.manual_seed(0)
    rm = reward_model.load_reward_model(model_dir, new_head=True)
    rm_dir = models.save_model_atomically(rm, models.load_tokenizer(model_dir), root / "fresh_rm", "rm.json", {})
    history = train([f"trainer.default_local_dir={tmp_path}", "trainer.logger=[]", "trainer.total_training_steps=2",
                     "trainer.test_freq=2", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                     "actor_rollout_ref.rollout.n=2", "data.val_max_samples=16", "algorithm.use_kl_in_reward=true",
                     "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.kl_coef=0.1",
                     "reward.reward_model.enable=true", f"reward.reward_model.model_path={rm_dir}"],
                    show_progress=False)
    step = history[-1]
    for key in ("critic/score/mean", "minirl/gold_score/mean", "actor/reward_kl_penalty",
                "actor/reward_kl_penalty_coeff", "val-core/minirl/arithmetic/reward/mean@1",
                "val-aux/minirl/arithmetic/gold_score/mean@1"):
        assert key in step, key
    assert "minirl/acc/mean" not in step  # the rule reward is not the training reward any more
    assert step["actor/reward_kl_penalty_coeff"] != 0.1  # the adaptive controller moved beta
    assert 0.0 <= step["minirl/gold_score/mean"] <= 1.0


def test_the_scorer_puts_the_reward_models_score_on_the_last_response_token(tiny):
    root, model_dir, _ = tiny
    tokenizer = models.load_tokenizer(model_dir)
    torch.manual_seed(0)
    rm = reward_model.load_reward_model(model_dir, new_head=True)
    rm_dir = models.save_model_atomically(rm, tokenizer, root / "scorer_rm", "rm.json", {})
    scorer = reward_model.RewardModelScorer(rm_dir, tokenizer)
    answers = ["1+2=3 #### 3", "3+4=8 #### 8"]
    ids = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    responses = torch.full((2, 16), tokenizer.pad_token_id)
    mask = torch.zeros(2, 16, dtype=torch.long)
    for i, row in enumerate(ids):
        responses[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    batch = {"responses": responses, "response_mask": mask, "raw_prompt": [p["prompt"] for p in PAIRS[:2]],
             "data_source": ["minirl/arithmetic"] * 2, "reward_model": [{"ground_truth": "3"}, {"ground_truth": "7"}]}
    scores, extra = scorer(batch)
    expected = reward_model.reward_scores(rm, **reward_model.encode_conversations(
        tokenizer, batch["raw_prompt"], answers))
    lengths = mask.sum(-1)
    assert torch.allclose(scores[torch.arange(2), lengths - 1], expected, atol=1e-5)
    assert scores.sum(-1).allclose(expected, atol=1e-5)  # nothing anywhere else
    assert extra == {"gold_score": [1.0, 0.0]}


def test_the_reward_model_reads_special_tokens_as_verl_does(tiny):
    """verl 0.9.1 decodes an answer for its reward model without skipping special tokens and removes only the EOS
    text (RewardLoopWorker._preprocess_reward_inputs); the rule reward's manager skips them all."""
    _, model_dir, _ = tiny
    tokenizer = models.load_tokenizer(model_dir)
    special = next(token for token in tokenizer.all_special_tokens
                   if token not in (tokenizer.eos_token, tokenizer.pad_token))
    answer = tokenizer("1+2=3 #### 3", add_special_tokens=False)["input_ids"]
    ids = [answer + [tokenizer.convert_tokens_to_ids(special)] + answer + [tokenizer.eos_token_id], answer]
    assert reward_model.decode_for_reward_model(tokenizer, ids) == [
        f"1+2=3 #### 3{special}1+2=3 #### 3", "1+2=3 #### 3"]
    assert tokenizer.batch_decode(ids, skip_special_tokens=True)[0] == "1+2=3 #### 31+2=3 #### 3"  # the rule's view


# ----------------------------------------------------------------------------------------------
# DPO
# ----------------------------------------------------------------------------------------------


def test_robust_and_ipo_losses_by_hand():
    one = torch.tensor
    # h_w = 1, h_l = -1 (h = 2), beta = 0.5, s = 0.2
    args = (one([-1.0]), one([-3.0]), one([-2.0]), one([-2.0]))
    robust, _, _ = dpo.dpo_loss(*args, beta=0.5, label_smoothing=0.2, loss_type="robust")
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert robust.item() == pytest.approx((-0.8 * math.log(sig(1)) + 0.2 * math.log(sig(-1))) / 0.6)
    ipo, _, _ = dpo.dpo_loss(*args, beta=0.5, loss_type="ipo", chosen_lengths=one([2]), rejected_lengths=one([4]))
    assert ipo.item() == pytest.approx((1 / 2 - (-1) / 4 - 1) ** 2)
    with pytest.raises(ValueError, match="pass chosen_lengths and rejected_lengths"):
        dpo.dpo_loss(*args, loss_type="ipo")
    with pytest.raises(ValueError, match="loss_type"):
        dpo.dpo_loss(*args, loss_type="kto")
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo.dpo_loss(*args, beta=0.0)


def test_dpo_metrics_use_trls_names():
    metrics = dpo.dpo_metrics(torch.tensor([0.2, -0.1]), torch.tensor([0.0, 0.1]), torch.tensor([-3.0, -5.0]),
                              torch.tensor([-4.0, -6.0]))
    assert metrics == pytest.approx({"rewards/chosen": 0.05, "rewards/rejected": 0.05, "rewards/accuracies": 0.5,
                                     "rewards/margins": 0.0, "logps/chosen": -4.0, "logps/rejected": -5.0})


def test_dpo_trainer_separates_the_pairs_and_saves_the_policy(tiny):
    root, model_dir, pairs = tiny
    out = root / "dpo"
    config = dpo.DPOConfig(model_path=str(model_dir), train_files=str(pairs), val_files=str(pairs), output_dir=str(out),
                           beta=0.5, learning_rate=3e-3, num_train_epochs=20, per_device_train_batch_size=8,
                           eval_steps=10)
    summary = dpo.train_dpo(config, show_progress=False)
    first, last = summary["history"][0], summary["history"][-1]
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)  # the policy starts as the reference
    assert last["rewards/margins"] > first["rewards/margins"] and last["eval_rewards/accuracies"] == 1.0
    assert {"eval_loss", "eval_logps/chosen"} <= set(summary["history"][9])
    assert json.loads((out / "dpo.json").read_text())["train_pairs"] == len(PAIRS)
    models.load_policy(out)


def test_dpo_cli_refuses_a_bad_loss_type(tiny):
    cli = minirl_cli("dpo", "loss_type=kto")
    assert cli.returncode == 2 and "loss_type" in cli.stderr and "Traceback" not in cli.stderr, cli.stderr[-1500:]


def test_the_cached_reward_model_is_keyed_by_its_settings(tmp_path, monkeypatch):
    """default_reward_model trains into the cache once per settings: other settings (or other training code) get
    another directory, and nothing reaches the cache until training wrote reward_model.json there."""
    monkeypatch.setenv("MINIRL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(reward_model, "resolve_tiny_paths", lambda config: ("model", "train.parquet", None))
    trained = []

    def fake_train(config, show_progress=None):
        trained.append(config)
        (Path(config.output_dir) / "reward_model.json").write_text("{}")

    monkeypatch.setattr(reward_model, "train_reward_model", fake_train)
    first = reward_model.default_reward_model(reward_model.RewardModelConfig(num_train_epochs=4))
    again = reward_model.default_reward_model(reward_model.RewardModelConfig(num_train_epochs=4, output_dir="x"))
    other = reward_model.default_reward_model(reward_model.RewardModelConfig(num_train_epochs=5))
    assert first == again != other and first.parent == other.parent == tmp_path
    assert [c.num_train_epochs for c in trained] == [4, 5]  # trained once per settings, into a temporary sibling
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted([first.name, other.name])
