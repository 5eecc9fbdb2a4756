"""LoRA (minirl/lora.py through PEFT): verl's two spellings of the keys, the adapter's parameter and optimizer-state
counts, the merged weights the rollout samples with, the reference as the actor with its adapter off, checkpoints
that hold the adapter, resuming, continuing from a saved adapter, and `python -m minirl merge`."""

import pytest
import torch
from cli import minirl_cli  # tests/cli.py: `python -m minirl ...`, forked from a process that imported it

from minirl import lora, models, sft
from minirl.config import load_config
from minirl.plot import load_metrics
from minirl.trainer import PPOTrainer, train

QUIET = ["trainer.logger=[]", "trainer.progress_bar=false"]
ARM = "actor_rollout_ref.model"


@pytest.fixture(scope="module")
def base_dir():
    return sft.default_warm_start(show_progress=False)


def test_both_spellings_are_applied_and_the_rest_refused_with_the_fix():
    flat = lora.lora_settings(load_config([f"{ARM}.lora_rank=8", f"{ARM}.lora_alpha=32",
                                           f"{ARM}.target_modules=[q_proj,v_proj]"], announce=False)
                              .actor_rollout_ref.model)
    assert (flat.rank, flat.scaling, flat.target_modules, flat.init_a) == (8, 4.0, ["q_proj", "v_proj"], "kaiming")
    megatron = lora.lora_settings(load_config([f"{ARM}.lora.rank=4", f"{ARM}.lora.target_modules=[linear_qkv]",
                                               f"{ARM}.lora.merge=true"], announce=False).actor_rollout_ref.model)
    assert (megatron.rank, megatron.alpha, megatron.init_a) == (4, 32, "xavier")
    assert megatron.target_modules == ["q_proj", "k_proj", "v_proj"]  # Megatron's fused qkv, unfused
    assert lora.lora_settings(load_config([], announce=False).actor_rollout_ref.model) is None
    refusals = {(f"{ARM}.lora_rank=4", f"{ARM}.lora.rank=4"): "keep one",
                (f"{ARM}.lora_adapter_path=/a",): "set lora_rank too",
                ("critic.model.lora_rank=4", "algorithm.adv_estimator=gae"): "cannot train a LoRA critic",
                (f"{ARM}.lora_rank=4", "trainer.use_ray=true"): "not implemented in minirl's Ray workers",
                (f"{ARM}.lora.type=dora",): "adapter types other than LoRA",
                (f"{ARM}.lora.lora_A_init_method=gaussian",): "not one of xavier, kaiming"}
    for overrides, message in refusals.items():
        with pytest.raises(ValueError, match=message):
            load_config(list(overrides), announce=False)


def test_the_adapter_starts_as_the_identity_and_trains_r_times_din_plus_dout_per_matrix(base_dir):
    base = models.load_policy(base_dir)
    config = base.config
    x = torch.randint(7, 200, (3, 11))
    before = base(input_ids=x).logits
    model = lora.apply_lora(models.load_policy(base_dir), lora.LoraSettings(rank=4, alpha=16,
                                                                           target_modules="all-linear"))
    assert torch.equal(model(input_ids=x).logits, before)  # B = 0: W' = W
    h, kv, inter = config.hidden_size, config.num_key_value_heads * config.hidden_size // config.num_attention_heads, \
        config.intermediate_size
    per_layer = [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)]  # q k v o gate up down
    expected = config.num_hidden_layers * sum(4 * (d_in + d_out) for d_in, d_out in per_layer)
    trained, total = lora.count_parameters(model)
    assert trained == expected and total == sum(p.numel() for p in base.parameters()) + expected
    from minirl.config import OptimConfig
    from minirl.optim import build_optimizer

    optimizer = build_optimizer(model, OptimConfig())
    model(input_ids=x).logits.mean().backward()
    optimizer.step()
    # AdamW: two float32 moments per trained parameter (and a one-number step count per tensor)
    tensors = sum(1 for p in model.parameters() if p.requires_grad)
    assert lora.optimizer_state_bytes(optimizer) == 2 * 4 * expected + 4 * tensors


def test_megatron_spelling_starts_a_from_xavier(base_dir):
    model = lora.apply_lora(models.load_policy(base_dir), lora.LoraSettings(4, 32, ["q_proj"], init_a="xavier"))
    for name, parameter in model.named_parameters():
        if ".lora_A." in name:
            d_out, d_in = parameter.shape
            assert parameter.abs().max() <= (6 / (d_in + d_out)) ** 0.5  # Xavier-uniform's bound
        if ".lora_B." in name:
            assert not parameter.any()


def test_the_rollout_samples_with_merged_weights_and_the_reference_is_the_base(tmp_path, base_dir):
    """After training steps the engine's plain model holds W + (alpha/r) B A (the same logits as the adapter), and
    the reference's log-probs are the untouched base model's."""
    overrides = [*QUIET, f"trainer.default_local_dir={tmp_path}", "trainer.total_training_steps=2",
                 "trainer.test_freq=-1", "trainer.val_before_train=false", f"{ARM}.lora_rank=4",
                 "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.optim.lr=1e-2"]
    trainer = PPOTrainer(load_config(overrides, announce=False), show_progress=False)
    trainer.fit()
    actor = trainer.actor.unwrapped_model
    engine = trainer.rollout.engine_model
    assert not lora.is_lora(engine) and lora.is_lora(actor)
    x = torch.randint(7, 200, (3, 11))
    with torch.no_grad():
        assert torch.allclose(engine(input_ids=x).logits, actor(input_ids=x).logits, atol=1e-5)
        base = models.load_policy(base_dir)
        assert not torch.allclose(base(input_ids=x).logits, actor(input_ids=x).logits, atol=1e-3)  # it trained
        with actor.disable_adapter():
            assert torch.equal(base(input_ids=x).logits, actor(input_ids=x).logits)
    assert trainer.reference.model is actor and trainer.reference.adapter_off  # no second copy


def test_a_lora_run_checkpoints_the_adapter_resumes_and_merges(tmp_path, base_dir):
    common = [*QUIET, f"{ARM}.lora_rank=4", "trainer.test_freq=-1", "trainer.val_before_train=false",
              "trainer.save_freq=2", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
              "actor_rollout_ref.actor.optim.lr=1e-3"]
    full = train([*common, f"trainer.default_local_dir={tmp_path / 'full'}", "trainer.total_training_steps=3",
                  "trainer.resume_mode=disable"], show_progress=False)
    run = tmp_path / "cut"
    command = ["train", *common, f"trainer.default_local_dir={run}"]
    first = minirl_cli(*command, "trainer.total_training_steps=2", "trainer.resume_mode=disable")
    assert first.returncode == 0, first.stderr[-2000:]
    adapter = run / "global_step_2" / "actor"
    assert (adapter / "adapter_model.safetensors").exists() and not (adapter / "model.safetensors").exists()
    assert not (run / "global_step_2" / "rollout").exists()  # the merged engine copy is rebuilt from the adapter
    resumed = minirl_cli(*command, "trainer.total_training_steps=3")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "processes in one group" not in resumed.stderr  # one process (the trainer announces a group of several)
    assert "resumed from" in resumed.stderr and "LoRA (lora_rank=4" in resumed.stderr
    metrics = load_metrics(run)
    assert [row["step"] for row in metrics] == [1, 2, 3]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert metrics[-1][key] == pytest.approx(full[-1][key], rel=1e-5, abs=1e-7), key
    merged = tmp_path / "merged"
    done = minirl_cli("merge", str(run / "global_step_2" / "actor"), str(merged))
    assert done.returncode == 0, done.stderr
    plain, x = models.load_policy(merged), torch.randint(7, 200, (2, 9))
    with_adapter = lora.apply_lora(models.load_policy(base_dir), lora.LoraSettings(
        4, 16, "all-linear", adapter_path=str(run / "global_step_2" / "actor")))
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=x).logits, with_adapter(input_ids=x).logits, atol=1e-5)
    refused = minirl_cli("merge", str(run), str(tmp_path / "x"))
    assert refused.returncode == 2 and "holds no adapter_config.json" in refused.stderr
