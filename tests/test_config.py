"""The config speaks verl 0.9.1: its launch scripts pass unchanged, its keys and defaults, its schedules."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from cli import minirl_cli  # tests/cli.py: `python -m minirl ...`, forked from a process that imported it
from omegaconf import OmegaConf

from minirl import config as config_lib
from minirl.optim import lr_factor
from minirl.trainer import train

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "data" / "verl_scripts"
SCRIPT_NAMES = ["grpo_trainer", "ppo_trainer", "rloo_trainer", "remax_trainer", "reinforce_plus_plus_trainer"]
MINIRL_ONLY = {"trainer.progress_bar", "trainer.use_ray",  # no verl 0.9.1 equivalent
               "actor_rollout_ref.rollout.weight_sync_interval",
               "actor_rollout_ref.rollout.multi_turn.train_on_tool_responses"}
# Keys verl 0.9.1 reads but does not declare: its DAPO scripts add them with Hydra's `+`
# (experimental/reward_loop/reward_manager/dapo.py reads them from config.reward.reward_kwargs).
# GDPO's keys likewise (verl/trainer/config/algorithm.py::AlgoConfig declares them, the yaml does not).
VERL_PLUS_KEYS = {"reward.reward_kwargs.max_resp_len", *(f"reward.reward_kwargs.overlong_buffer_cfg.{key}"
                                                          for key in ("enable", "len", "penalty_factor", "log")),
                  "algorithm.gdpo_reward_keys", "algorithm.gdpo_reward_weights"}


def script_overrides(name: str) -> list[str]:
    return (SCRIPTS / f"{name}.txt").read_text().splitlines()


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_verl_launch_script_passes_config_unchanged(name):
    lines = script_overrides(name)
    proc = minirl_cli("config", *lines, timeout=120)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)
    for line in lines:  # every key minirl implements took the script's value
        key, value = line.split("=", 1)
        node = OmegaConf.select(OmegaConf.create(resolved), key, default="<absent>")
        if node != "<absent>" and key != "trainer.logger":
            given = OmegaConf.select(OmegaConf.from_dotlist([line]), key)
            same = float(node) == float(given) if isinstance(node, int | float) else node == given
            assert same, (key, node, value)
    assert resolved["actor_rollout_ref"]["rollout"]["n"] == int(dict(line.split("=", 1) for line in lines)[
        "actor_rollout_ref.rollout.n"])
    # the keys of verl's distributed machinery are listed once, with why they have no effect
    assert "accepted, no effect in minirl" in proc.stderr
    assert "actor_rollout_ref.rollout.gpu_memory_utilization: inference-engine setting" in proc.stderr
    assert "fsdp_config.param_offload: FSDP" in proc.stderr


def test_config_command_loads_no_model_and_no_data(tmp_path):
    proc = minirl_cli("config", "actor_rollout_ref.model.path=/does/not/exist", "data.train_files=/nor/this.parquet",
                      timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "path: /does/not/exist" in proc.stdout


def test_warm_start_names_an_unknown_task_and_builds_nothing(tmp_path):
    proc = minirl_cli("warm-start", "tiny", "chian", timeout=120, env={**os.environ, "MINIRL_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "got 'chian'" in proc.stderr and "chain-zero" in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["train", "config", "warm-start", "plot", "preference-data", "train-rm", "dpo"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_answers_help_and_starts_no_work(command, flag, tmp_path):
    """`--help` prints the usage, the keys and an example, exits 0, and builds nothing: it does not even import
    torch (an empty cache directory stays empty)."""
    code = ("import runpy, sys; sys.argv = ['minirl', %r, %r]\ntry:\n    runpy.run_module('minirl', run_name="
            "'__main__')\nexcept SystemExit as e:\n    assert e.code == 0, e.code\nassert 'torch' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code % (command, flag)], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MINIRL_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: python -m minirl {command}") and "example: python -m minirl" in proc.stdout
    if command in ("train", "config", "train-rm", "dpo"):
        assert "Keys (" in proc.stdout or "Common keys (" in proc.stdout
        assert "=" in proc.stdout.split("eys (")[1]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["grpo_trainer", "ppo_trainer"])
def test_tiny_run_with_every_key_of_a_verl_script(tmp_path, name):
    """Every override of the script, then the model, data, sizes and world size pointed at the tiny setting."""
    tiny = ["actor_rollout_ref.model.path=tiny", "critic.model.path=tiny", "data.train_files=tiny",
            "data.val_files=tiny",
            "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "data.max_prompt_length=32",
            "data.max_response_length=20", "data.val_max_samples=16", "actor_rollout_ref.actor.optim.lr=1e-4",
            "trainer.n_gpus_per_node=1", "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.save_freq=2",
            "trainer.logger=[console]", f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.resume_mode=disable",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=120"]  # small enough to cut several micro-batches
    if name == "grpo_trainer":
        tiny.append("actor_rollout_ref.rollout.n=4")
    history = train([*script_overrides(name), *tiny], show_progress=False)
    assert [record["step"] for record in history] == [0, 1, 2]
    assert (tmp_path / "run" / "global_step_2" / "actor" / "config.json").exists()
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["actor_rollout_ref"]["actor"]["use_dynamic_bsz"] is True
    assert config["actor_rollout_ref"]["model"]["enable_gradient_checkpointing"] is True
    assert config["data"]["filter_overlong_prompts"] is True and config["trainer"]["total_epochs"] == 15
    machine = config["minirl_machine"]  # where it ran: seeded numbers differ between CPUs (minirl/machine.py)
    assert machine["aten_capability"] and machine["torch"] == torch.__version__ and machine["threads"].isdigit()
    if name == "ppo_trainer":
        assert "critic/vf_loss" in history[-1]


def test_world_size_must_match_n_gpus_per_node(tmp_path):
    with pytest.raises(ValueError, match=r"n_gpus_per_node \* trainer.nnodes = 8 \* 1"):
        train(["trainer.n_gpus_per_node=8", f"trainer.default_local_dir={tmp_path}"], show_progress=False)


def test_every_minirl_key_is_a_verl_key():
    schema = OmegaConf.structured(config_lib.Config)
    keys = [key for key in config_lib._all_keys(schema) if not OmegaConf.is_dict(OmegaConf.select(schema, key))]
    assert len(keys) > 80
    assert sorted(set(keys) - config_lib.verl_keys()) == sorted(MINIRL_ONLY | VERL_PLUS_KEYS)


def test_deprecated_spellings_move_to_verl_keys_with_a_notice(capsys):
    config = config_lib.load_config(["trainer.seed=7", "actor_rollout_ref.actor.grad_clip=0.5",
                                     "actor_rollout_ref.actor.optim.warmup_style=cosine"])
    assert config.data.seed == 7 and config.actor_rollout_ref.actor.optim.clip_grad == 0.5
    assert config.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"
    err = capsys.readouterr().err
    assert "trainer.seed is deprecated" in err and "using data.seed" in err and "optim.clip_grad" in err


def test_dapo_overlong_keys_take_verls_spellings():
    """verl 0.9.1's DAPO scripts add the keys with `+reward.reward_kwargs...`."""
    kwargs = "+reward.reward_kwargs"
    config = config_lib.load_config(["reward.reward_manager.name=dapo", f"{kwargs}.overlong_buffer_cfg.enable=True",
                                     f"{kwargs}.overlong_buffer_cfg.len=8", f"{kwargs}.max_resp_len=20",
                                     f"{kwargs}.overlong_buffer_cfg.penalty_factor=1.0"], announce=False)
    assert config.reward.reward_manager.name == "dapo" and config.reward.reward_kwargs.overlong_buffer_cfg.len == 8


@pytest.mark.parametrize("legacy, new", [
    ("custom_reward_function.path=/r.py", "reward.custom_reward_function.path"),
    ("custom_reward_function.name=score", "reward.custom_reward_function.name"),
    ("reward_model.enable=true", "reward.reward_model.enable"),
    ("reward_model.model.path=/rm", "reward.reward_model.model_path"),
    ("reward_model.reward_manager=dapo", "reward.reward_manager.name"),
    ("+reward_model.reward_kwargs.overlong_buffer_cfg.len=8", "reward.reward_kwargs.overlong_buffer_cfg.len"),
    ("reward_model.rollout.name=vllm", "under reward.*"),
])
def test_legacy_reward_keys_are_refused_as_verl_ignores_them(legacy, new):
    """verl 0.9.1's main_ppo never migrates the top-level legacy reward block (only fully_async_main does): the keys
    stay null and verl scores with default_compute_score. A line that worked here would silently change the reward
    there, so minirl refuses the key and names the one to write."""
    with pytest.raises(ValueError, match="main_ppo ignores this legacy key") as error:
        config_lib.load_config([legacy], announce=False)
    assert new in str(error.value)


def test_critic_follows_the_actor_unless_set():
    config = config_lib.load_config(["actor_rollout_ref.actor.ppo_epochs=3", "actor_rollout_ref.actor.shuffle=true",
                                     "actor_rollout_ref.actor.ppo_mini_batch_size=8"], announce=False)
    assert (config.critic.ppo_epochs, config.critic.shuffle, config.critic.ppo_mini_batch_size) == (3, True, 8)
    config = config_lib.load_config(["actor_rollout_ref.actor.ppo_epochs=3", "critic.ppo_epochs=2"], announce=False)
    assert config.critic.ppo_epochs == 2
    assert config.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu == 16384


@pytest.mark.parametrize("overrides, message", [
    (["no.such.key=1"], "unknown config key"),
    (["actor_rollout_ref.actor.optim.clip_grad=-1"], "clip_grad must be > 0"),
    (["actor_rollout_ref.actor.kl_loss_coef=-0.1"], "KL coefficients must be >= 0"),
    (["algorithm.lam=1.5"], "algorithm.lam must be in [0, 1]"),
    (["algorithm.gamma=-0.1"], "algorithm.gamma must be in [0, 1]"),
    (["data.val_max_samples=0"], "val_max_samples=0 is ambiguous"),
    (["data.val_max_samples=0", "trainer.test_freq=-1"], "trainer.val_before_train=false"),  # step 0 validates
    (["actor_rollout_ref.rollout.do_sample=false"], "grpo's advantages are all 0"),
    (["data.truncation=cut"], "error, left, right, middle"),
    (["actor_rollout_ref.actor.optim.lr_scheduler_type=linear"], "constant, cosine"),
    (["critic.ppo_mini_batch_size=5"], "critic.ppo_mini_batch_size=5 must divide"),
    (["data.train_files=[]"], "data.train_files must be a file path or a non-empty list"),
    (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=0"], "ppo_micro_batch_size_per_gpu must be >= 1"),
    (["reward.reward_manager.name=prime"], "naive, dapo"),
    (["actor_rollout_ref.rollout.val_kwargs.n=8", "actor_rollout_ref.rollout.val_kwargs.do_sample=true"],
     "gives 8 identical answers per prompt"),
    (["reward.reward_manager.name=dapo", "reward.reward_kwargs.overlong_buffer_cfg.enable=true",
      "reward.reward_kwargs.max_resp_len=20", "reward.reward_kwargs.overlong_buffer_cfg.len=4"],
     "needs overlong_buffer_cfg.penalty_factor > 0"),
    (["reward.reward_manager.name=dapo", "reward.reward_model.enable=true", "reward.reward_model.model_path=rm"],
     "scores with the reward model alone"),
    (["+reward.reward_kwargs.overlong_buffer_cfg.enable=true", "+reward.reward_kwargs.max_resp_len=20",
      "+reward.reward_kwargs.overlong_buffer_cfg.len=4"], "also set reward.reward_manager.name=dapo"),
    (["reward.reward_manager.name=dapo", "reward.reward_kwargs.overlong_buffer_cfg.enable=true",
      "reward.reward_kwargs.overlong_buffer_cfg.len=4"], "needs reward.reward_kwargs.max_resp_len"),
    (["reward.reward_manager.name=dapo", "reward.reward_kwargs.overlong_buffer_cfg.enable=true",
      "reward.reward_kwargs.max_resp_len=20"], "to switch the penalty off set overlong_buffer_cfg.enable=false"),
])
def test_bad_values_say_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_lib.load_config(overrides, announce=False)


def test_lr_schedules_follow_verls_formulas():
    optim = config_lib.OptimConfig(lr_warmup_steps=4)
    assert [lr_factor(s, optim, 10) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    optim = config_lib.OptimConfig(lr_warmup_steps_ratio=0.2, lr_scheduler_type="cosine", min_lr_ratio=0.1)
    assert lr_factor(0, optim, 10) == 0.0 and lr_factor(2, optim, 10) == pytest.approx(1.0)
    assert lr_factor(10, optim, 10) == pytest.approx(0.1)  # decays to min_lr_ratio at the end
    assert lr_factor(6, optim, 10) == pytest.approx(0.55)  # half-way: (1 + 0.1) / 2


def test_total_epochs_critic_warmup_and_epochs_as_verl(tmp_path):
    """64 prompts, batches of 32, 2 epochs -> 4 steps; critic_warmup=2 skips the actor at step 1 only."""
    history = train([f"trainer.default_local_dir={tmp_path}", "trainer.logger=[]", "trainer.resume_mode=disable",
                     "algorithm.adv_estimator=gae", "data.train_max_samples=64", "data.train_batch_size=32",
                     "trainer.total_epochs=2", "trainer.total_training_steps=null", "trainer.critic_warmup=2",
                     "trainer.test_freq=-1", "trainer.val_before_train=false"], show_progress=False)
    assert [r["step"] for r in history] == [1, 2, 3, 4]
    assert [r["training/epoch"] for r in history] == [0, 0, 1, 1]
    assert "actor/pg_loss" not in history[0] and "critic/vf_loss" in history[0]
    assert all("actor/pg_loss" in r for r in history[1:])


def test_list_of_train_files_filter_overlong_prompts_and_truncation(tmp_path, capsys):
    from minirl import data, models

    tokenizer = models.build_tokenizer()
    short = data.arithmetic_rows(6, "train")
    long = [{**row, "prompt": [{"role": "user", "content": "please add: " * 5 + row["prompt"][0]["content"]}]}
            for row in data.arithmetic_rows(4, "train", seed=1)]
    files = [str(data.write_parquet(short, tmp_path / "a.parquet")),
             str(data.write_parquet(long, tmp_path / "b.parquet"))]
    assert len(data.load_rl_rows(files, tokenizer, 32)) == 10  # lists are concatenated
    kept = data.load_rl_rows(files, tokenizer, 32, filter_overlong_prompts=True)
    assert [row["prompt"] for row in kept] == [row["prompt"] for row in short]
    assert len(data.load_rl_rows(files, tokenizer, 32, max_samples=3, shuffle=True, seed=0)) == 3
    ids = list(range(10))
    assert data.truncate_prompt(ids, 4, "left") == [6, 7, 8, 9]
    assert data.truncate_prompt(ids, 4, "right") == [0, 1, 2, 3]
    assert data.truncate_prompt(ids, 4, "middle") == [0, 1, 8, 9]
    with pytest.raises(ValueError, match="filter_overlong_prompts=true"):
        data.truncate_prompt(ids, 4, "error")
    encoded = data.encode_prompts(tokenizer, [long[0]["prompt"]], 32, truncation="left")
    assert encoded["input_ids"].shape == (1, 32)


def test_a_step_must_split_evenly_over_the_ranks():
    """verl 0.9.1 splits a batch over its ranks without padding (utils/config.py asserts train_batch_size * n
    % n_gpus == 0): moving a 64 x 5 job from 8 to 6 ranks fails at start-up, naming the keys."""
    check_split_over_ranks = config_lib.check_split_over_ranks
    config = config_lib.load_config(["data.train_batch_size=64", "actor_rollout_ref.rollout.n=5",
                                     "actor_rollout_ref.actor.ppo_mini_batch_size=16"], announce=False)
    check_split_over_ranks(config, 8)
    with pytest.raises(ValueError, match=r"train_batch_size \* actor_rollout_ref.rollout.n = 320 responses per step"):
        check_split_over_ranks(config, 6)
    config = config_lib.load_config(["data.train_batch_size=64", "actor_rollout_ref.rollout.n=3",
                                     "actor_rollout_ref.actor.ppo_mini_batch_size=16"], announce=False)
    with pytest.raises(ValueError, match="ppo_mini_batch_size \\* rollout.n = 48 responses per mini-batch"):
        check_split_over_ranks(config, 32)  # 192 splits over 32 ranks, a mini-batch of 48 does not


def test_every_verl_key_has_a_fate():
    """Each of verl 0.9.1's keys is applied, refused unless at verl's default (MINIRL_LACKS: it changes what is
    trained), moved (an old spelling), refused as legacy, or accepted with a specific reason that it changes nothing
    here: none falls through to the generic "a verl 0.9.1 feature minirl does not implement"."""
    minirl_keys = set(config_lib._all_keys(OmegaConf.structured(config_lib.Config)))
    generic = config_lib.NO_EFFECT_REASONS[-1][1]
    unsorted = [key for key in sorted(config_lib.verl_keys()) if key not in minirl_keys
                and key not in config_lib.ALIASES and not key.startswith(config_lib.LEGACY_REWARD_GROUPS)
                and key not in config_lib.MINIRL_LACKS and config_lib.no_effect_reason(key) == generic]
    assert not unsorted, f"decide these keys' fate in minirl/config.py (MINIRL_LACKS or NO_EFFECT_REASONS): {unsorted}"
    assert set(config_lib.MINIRL_LACKS) <= config_lib.verl_keys()


@pytest.mark.parametrize("override, message", [
    ("actor_rollout_ref.model.lora.type=canonical_lora", "minirl lacks adapter types other than LoRA"),
    ("trainer.v1.separate_async.hybrid_rollout.enable_switch=true", "set verl's default trainer.v1.separate_async"),
    ("actor_rollout_ref.model.override_config.attention_dropout=0.1", "Remove the key."),
    ("algorithm.use_pf_ppo=true", "compute_pf_ppo_reweight_data"),
    ("actor_rollout_ref.rollout.agent.agent_loop_config_path=loops.yaml", "agent loops declared in a YAML file"),
    ("data.prompt_key=question", "data.prompt_key=prompt"),
    ("actor_rollout_ref.actor.optim.optimizer=SGD", "optimizers other than torch.optim.AdamW"),
])
def test_a_verl_key_that_changes_the_maths_is_refused_unless_at_verls_default(override, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_lib.load_config([override])
    key = override.split("=")[0]
    if key in config_lib.MINIRL_LACKS:  # at verl's default it changes nothing, and says so
        default = config_lib._yaml(config_lib.MINIRL_LACKS[key][0])
        assert "the only value minirl implements" in config_lib.parse_overrides([f"{key}={default}"]).no_effect[key]
