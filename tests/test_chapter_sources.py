"""Every chapter is a pair: chapters/NN_*.py (the text people edit and review) and chapters/NN_*.ipynb
(the same cells with the outputs of a full run, which the site shows). The two must hold the same cells."""

from pathlib import Path

import jupytext
import nbformat
import pytest

from minirl.book import pages

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
NOTEBOOKS = pages(CHAPTERS, ".ipynb")


def cells(notebook) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def test_every_notebook_has_a_text_source_and_back():
    assert NOTEBOOKS
    assert [p.stem for p in pages(CHAPTERS, ".py")] == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_text_source_and_notebook_are_in_sync(notebook):
    text = jupytext.read(notebook.with_suffix(".py"))
    executed = nbformat.read(notebook, as_version=4)
    assert cells(text) == cells(executed), (
        f"{notebook.name} and {notebook.stem}.py differ. Edit the .py, then run "
        f"`.venv/bin/jupytext --sync chapters/{notebook.stem}.py` and re-execute the notebook "
        "(README, For contributors).")
    assert executed.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"


@pytest.mark.parametrize("page", NOTEBOOKS + sorted(CHAPTERS.glob("*.md")), ids=lambda p: p.name)
def test_no_control_characters_in_the_text(page):
    """A tab or other control character in prose is almost always a TeX command written through a Python string
    ("\tfrac" with "\t" read as a tab): it shows as "frac" on the page."""
    text = "\n".join(source for kind, source in cells(nbformat.read(page, as_version=4)) if kind == "markdown") \
        if page.suffix == ".ipynb" else page.read_text()
    bad = sorted({repr(ch) for ch in text if ord(ch) < 32 and ch != "\n"})
    assert not bad, f"{page.name}: control characters {bad} in the text (a backslash lost: write \\t, not a tab)"


# The library functions whose code answers a chapter's exercises: a chapter shows them only after its
# exercises, collapsed (README, "The chapter skeleton").
ANSWERS = {
    "00_tensors": ["core.masked_mean", "core.masked_whiten", "core.logprobs_from_logits", "core.get_response_mask",
                   "core.place_scores_on_last_token"],
    "01_ppo": ["ppo.compute_policy_loss", "core.agg_loss"],
    "02_gae": ["gae.compute_gae_advantage_return", "core.masked_whiten"],
    "03_rlhf": ["reward_model.bradley_terry_loss", "kl.apply_kl_penalty", "kl.kl_penalty_forward"],
    "04_grpo": ["grpo.compute_grpo_outcome_advantage", "core.group_mean_std"],
    "05_dapo": ["dapo.compute_overlong_penalty", "dapo.filter_groups"],
    "06_dpo": ["dpo.dpo_loss", "dpo.dpo_metrics"],
    "07_baselines": ["rloo.compute_rloo_outcome_advantage", "remax.compute_remax_outcome_advantage"],
    "08_r1": ["rewards.think_format", "rewards.extract_solution", "metrics.pass_at_k"],
    "09_rollout_corr": ["rollout_correction.compute_rollout_correction_weights",
                        "rollout_correction.compute_rollout_rejection_mask"],
    "10_hybridflow": ["single_controller.dispatch_dp_compute_data_proto",
                      "single_controller.collect_dp_compute_data_proto"],
    "11_policy_losses": ["sequence_ratio.compute_policy_loss_gspo", "entropy_cov.clip_cov_selection",
                         "opo.compute_opo_outcome_advantage"],
    "12_v1_trainer": ["replay_buffer.dapo_evictions", "replay_buffer.stale_evictions"],
    "13_agentic_tools": ["parse_hermes", "ToolAgentLoop.run"],
    "lab_a_gsm8k": ["data.gsm8k_rows", "rewards.compute_gsm8k_score"],
    "lab_d_grpo_config": ["batch_math.step_arithmetic"],
}


@pytest.mark.parametrize("chapter", sorted(ANSWERS))
def test_answers_are_shown_only_after_the_exercises_and_collapsed(chapter):
    source = (CHAPTERS / f"{chapter}.py").read_text()
    exercises_at = source.index("Exercises\n")
    for function in ANSWERS[chapter]:
        inline = f"show_source({function})"
        assert inline not in source, f"{chapter}: {inline} prints an exercise's answer; use collapsed=True after " \
                                     "the exercises"
        later = source.find(function, exercises_at)
        assert later > 0, f"{chapter}: {function} is not shown after the exercises"
    assert "show_source(function, collapsed=True)" in source[exercises_at:]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_first_output_names_the_machine(notebook):
    """Seeded numbers differ between CPUs (minirl/machine.py): a notebook's first output says where its outputs
    were computed (CPU, ATen capability, torch, threads), so a reader can tell a different machine from a bug."""
    executed = nbformat.read(notebook, as_version=4)
    outputs = [output for cell in executed.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    first = outputs[0].get("text", "") if outputs else ""
    assert first.startswith("Outputs computed on: ") and " | ATen " in first and " thread(s)" in first, (
        f"{notebook.name}: the first output should be where_this_ran()'s line (call it in the first code cell, "
        f"then re-execute the notebook), not {first[:80]!r}")
