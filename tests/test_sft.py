"""SFT warm start: the loss mask, a seeded run that learns, and the atomic cache."""

import json
import threading

import pytest
import torch

from minirl import data, models, sft

SMALL = sft.SFTConfig(num_train=200, num_test=40, steps=40, batch_size=32, lr=3e-3)


def test_loss_mask_covers_the_response_and_its_eos_only():
    tokenizer = models.build_tokenizer()
    demo = {"prompt": [{"role": "user", "content": "1+2=?"}], "response": "1+2=3 #### 3"}
    out = sft.tokenize_demonstrations(tokenizer, [demo], max_length=64)
    ids, mask = out["input_ids"][0], out["loss_mask"][0]
    targets = ids[1:][mask[:-1].bool()]  # the tokens the masked logits predict
    assert tokenizer.decode(targets) == "1+2=3 #### 3</s>"
    with pytest.raises(ValueError, match="max_length"):
        sft.tokenize_demonstrations(tokenizer, [demo], max_length=10)


def test_short_sft_run_lowers_the_loss(tmp_path):
    models.save_tiny_model(tmp_path)
    tokenizer, model = models.load_tokenizer(tmp_path), models.load_policy(tmp_path)
    demos = data.sft_rows(data.arithmetic_rows(200, "train"), wrong_fraction=0.4)
    _, losses = sft.train_sft(model, tokenizer, demos, SMALL, show_progress=False)
    assert len(losses) == SMALL.steps
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses


def test_default_warm_start_learns_into_the_target_range():
    """The book's default warm start: from no right answers to greedy accuracy in [0.2, 0.9] on held-out questions.

    The bounds come from the spread, not from one machine: seeds 0-4 gave 0.41-0.765 on an Intel Xeon, seeds 0-2
    0.37-0.69 on an AMD EPYC, and seed 0 under other numeric settings 0.255-0.65 (minirl/README.md, "The same seed
    on another CPU"). It checks the cached build, which `make test` makes before the suite: on a fresh clone (as
    in CI) that is this code's build; a cache from older code is reused while the SFT config is unchanged."""
    warm = sft.default_warm_start(show_progress=False)
    summary = json.loads((warm / "warm_start.json").read_text())
    assert summary["greedy_acc_before"] < 0.05
    assert 0.2 <= summary["greedy_acc"] <= 0.9, summary
    assert models.load_policy(warm) is not None


def test_warm_start_cache_is_reused_and_interrupted_builds_leave_nothing(tmp_path, monkeypatch):
    first = sft.default_warm_start(SMALL, cache_dir=tmp_path, show_progress=False)
    stamp = (first / "warm_start.json").stat().st_mtime_ns
    assert sft.default_warm_start(SMALL, cache_dir=tmp_path, show_progress=False) == first
    assert (first / "warm_start.json").stat().st_mtime_ns == stamp  # not rebuilt

    other = sft.SFTConfig(**{**SMALL.__dict__, "seed": 1})

    def interrupted(out_dir, config, show_progress):
        (out_dir / "half-written").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "build_warm_start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sft.default_warm_start(other, cache_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [first.name]
    assert other.key() != SMALL.key()


def test_different_cached_targets_build_at_the_same_time(tmp_path):
    """Each target has its own lock: while one build is under way, another target builds (make test builds its
    warm starts two at a time), and the same target waits for the first builder instead of building twice."""
    started, release, built = threading.Event(), threading.Event(), []

    def slow(building):
        started.set()
        assert release.wait(30), "the test never released the first build"
        built.append("a")
        (building / "done").write_text("ok")

    def quick(building):
        built.append("b")
        (building / "done").write_text("ok")

    first = threading.Thread(target=sft.build_once, args=(tmp_path / "a", "done", slow))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=sft.build_once, args=(tmp_path / "b", "done", quick))
    second.start()
    second.join(10)
    assert not second.is_alive() and built == ["b"], "target b waited for target a's lock"
    same = threading.Thread(target=sft.build_once, args=(tmp_path / "a", "done", quick))
    same.start()
    same.join(0.5)
    assert same.is_alive(), "a second builder of target a did not wait for the first"
    release.set()
    first.join(10)
    same.join(10)
    assert built == ["b", "a"], built  # target a built once
    assert (tmp_path / "a" / "done").exists() and (tmp_path / "b" / "done").exists()


def test_sft_is_seeded(tmp_path):
    demos = data.sft_rows(data.arithmetic_rows(100, "train"))
    config = sft.SFTConfig(steps=5, batch_size=16)
    results = []
    for run in range(2):
        models.save_tiny_model(tmp_path / str(run))
        model = models.load_policy(tmp_path / str(run))
        _, losses = sft.train_sft(model, models.load_tokenizer(tmp_path / str(run)), demos, config, show_progress=False)
        results.append((losses, next(model.parameters()).detach().clone()))
    assert results[0][0] == results[1][0] and torch.equal(results[0][1], results[1][1])
