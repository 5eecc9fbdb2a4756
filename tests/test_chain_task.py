"""The chain task of Chapters 5 and 8: sums of 3-4 small numbers, answered directly or with running sums."""

import pytest

from minirl import data, rewards

ROW = {"data_source": data.CHAIN_SOURCE, "extra_info": {"terms": [7, 5, 8, 6]},
       "reward_model": {"ground_truth": "26"}}


def test_direct_and_worked_answers_by_hand():
    assert data.chain_response(ROW, worked=False) == "#### 26"
    assert data.chain_response(ROW, worked=True) == "<think>7+5=12, 12+8=20, 20+6=26</think> #### 26"
    # a slip at step 1 carries on: 12+8=21, then 21+6=27
    assert data.chain_response(ROW, worked=True, slip=(1, 1)) == "<think>7+5=12, 12+8=21, 21+6=27</think> #### 27"
    assert data.chain_response(ROW, worked=False, slip=(0, -2)) == "#### 24"
    for text, score, form, worked in (("<think>7+5=12, 12+8=20, 20+6=26</think> #### 26", 1.0, 1.0, 1.0),
                                      ("#### 26", 1.0, 0.0, 0.0), ("#### 27", 0.0, 0.0, 0.0),
                                      ("<think>7+5=12</think>", 0.0, 0.0, 1.0),
                                      ("7+5=12, 12+14=26 #### 26", 1.0, 0.0, 1.0),
                                      ("<think>7+5=12</think> #### 12 <think>x</think> #### 26", 1.0, 0.0, 1.0)):
        result = rewards.default_compute_score(data.CHAIN_SOURCE, text, "26")
        assert (result["score"], result["format"], result["worked"]) == (score, form, worked), text


def test_rows_are_seeded_verl_rows_with_the_right_sums():
    rows = data.chain_rows(50, "train", seed=3)
    assert rows == data.chain_rows(50, "train", seed=3) != data.chain_rows(50, "test", seed=3)
    for row in rows:
        terms = row["extra_info"]["terms"]
        assert 3 <= len(terms) <= 4 and all(1 <= t <= 9 for t in terms)
        assert row["prompt"][0]["content"] == "+".join(map(str, terms)) + "=?"
        assert row["reward_model"]["ground_truth"] == str(sum(terms))
        data.check_rl_row(row, "row")


def test_demonstrations_mix_styles_and_mark_their_mistakes():
    rows = data.chain_rows(400, "train")
    demos = data.chain_sft_rows(rows, worked_fraction=0.3, wrong_fraction=0.4, seed=0)
    worked = sum(d["worked"] for d in demos) / len(demos)
    wrong = sum(not d["correct"] for d in demos) / len(demos)
    assert 0.25 < worked < 0.35 and 0.35 < wrong < 0.45
    for demo, row in zip(demos, rows):
        result = rewards.default_compute_score(data.CHAIN_SOURCE, demo["response"], row["reward_model"]["ground_truth"])
        assert result["score"] == float(demo["correct"]) and result["format"] == float(demo["worked"])
    with pytest.raises(ValueError, match="worked_fraction must be in"):
        data.chain_sft_rows(rows, worked_fraction=1.5)


def test_r1_and_lenient_rewards_by_hand():
    worked = "<think>7+5=12, 12+8=20, 20+6=26</think> #### 26"
    assert rewards.r1_score(data.CHAIN_SOURCE, worked, "26")["score"] == pytest.approx(1.1)
    assert rewards.r1_score(data.CHAIN_SOURCE, "#### 26", "26")["score"] == 1.0
    assert rewards.r1_score(data.CHAIN_SOURCE, "<think>7+5=13</think> #### 27", "26")["score"] == pytest.approx(0.1)
    listing = "#### 24 25 26 27"  # the hack the lenient rule invites
    assert rewards.lenient_score(data.CHAIN_SOURCE, listing, "26")["score"] == 1.0
    assert rewards.lenient_score(data.CHAIN_SOURCE, listing, "26")["acc"] is False
    assert rewards.lenient_score(data.CHAIN_SOURCE, "#### 261", "26")["score"] == 0.0  # whole numbers only


def test_a_custom_reward_function_can_be_loaded_from_the_library_file():
    from pathlib import Path

    path = Path(rewards.__file__)
    assert rewards.load_custom_reward_function(str(path), "r1_score")(data.CHAIN_SOURCE, "#### 26", "26")["score"] == 1
