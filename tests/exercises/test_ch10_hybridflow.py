"""Grades exercises/ch10_hybridflow.py (or solutions/ with --target solutions)."""

import copy
import functools

import numpy as np
import pytest
import torch
from grading import call, fail, load_chapter, raised
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.config import load_config
from minirl.protocol import DataProto
from minirl.single_controller import collect_dp_compute_data_proto as minirl_collect
from minirl.single_controller import dispatch_dp_compute_data_proto as minirl_dispatch


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch10_hybridflow")


# Every fuzz test sees the same cases on every run (derandomize): a grade does not change between runs.
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ----------------------------------------------------------------------------------------------
# 10.1 dp_dispatch, dp_collect
# ----------------------------------------------------------------------------------------------

LENGTH = 3  # tokens per row of the test batches
META = {"temperature": 0.7, "do_sample": True, "global_steps": 4}


def make_batch(rows: int, meta: dict | None = None) -> DataProto:
    """A batch like the trainer's: row i's input_ids start at 100 + 3 i, so every row is recognisable.

    Two responses per prompt share a uid, as after rollout.n=2; each row has its own ground truth.
    """
    g = torch.Generator().manual_seed(rows)
    ids = 100 + torch.arange(rows * LENGTH).reshape(rows, LENGTH)
    mask = (torch.rand(rows, LENGTH, generator=g) > 0.3).float()
    scores = torch.arange(rows, dtype=torch.float32) / 2
    uids = [f"uid-{i // 2}" for i in range(rows)]
    truths = [{"ground_truth": str(7 * i)} for i in range(rows)]
    return DataProto({"input_ids": ids, "response_mask": mask, "scores": scores},
                     {"uid": uids, "reward_model": truths},
                     dict(META if meta is None else meta))


def copy_of(data: DataProto) -> DataProto:
    return DataProto({k: v.clone() for k, v in data.batch.items()},
                     {k: v.copy() for k, v in data.non_tensor_batch.items()}, copy.deepcopy(data.meta_info))


def rows_of(chunk: DataProto) -> list[int]:
    """The row numbers in a chunk of a make_batch batch (read from its input_ids)."""
    return [(int(v) - 100) // LENGTH for v in chunk.batch["input_ids"][:, 0]] if "input_ids" in chunk.batch else []


def difference(got: DataProto, want: DataProto) -> str:
    """'' if the two DataProtos are equal field by field, else the first difference, in words."""
    if set(got.batch) != set(want.batch):
        return f"its tensor fields (batch) are {sorted(got.batch)}, expected {sorted(want.batch)}"
    for key, w in want.batch.items():
        v = got.batch[key]
        if not isinstance(v, torch.Tensor):
            return f"batch[{key!r}] is a {type(v).__name__}, expected a torch.Tensor"
        if v.dtype != w.dtype or v.shape != w.shape:
            return (f"batch[{key!r}] is {v.dtype} of shape {tuple(v.shape)}, expected {w.dtype} of shape "
                    f"{tuple(w.shape)}")
        if not torch.equal(v, w):
            return f"batch[{key!r}] holds other values than the same rows of the input"
    if set(got.non_tensor_batch) != set(want.non_tensor_batch):
        return (f"its non_tensor_batch fields are {sorted(got.non_tensor_batch)}, expected "
                f"{sorted(want.non_tensor_batch)}")
    for key, w in want.non_tensor_batch.items():
        v = got.non_tensor_batch[key]
        if len(v) != len(w) or list(v) != list(w):
            return (f"non_tensor_batch[{key!r}] is {list(v)[:6]}{'...' if len(v) > 6 else ''}, expected "
                    f"{list(w)[:6]}{'...' if len(w) > 6 else ''}: the non-tensor fields must follow their rows")
    if got.meta_info != want.meta_info:
        return f"its meta_info is {got.meta_info!r}, expected {want.meta_info!r}"
    return ""


def sizes_of(chunks) -> list[int]:
    return [len(c) for c in chunks]


def want_sizes(n: int, world: int) -> list[int]:
    """numpy's array_split sizes (checked against minirl below)."""
    return [len(part) for part in np.array_split(np.arange(n), world)]


def why_sizes(n: int, world: int, sizes: list[int]) -> str:
    """The classic mistake that gives exactly these chunk sizes, in a sentence, or ''."""
    want = want_sizes(n, world)
    base, ceil = n // world, -(-n // world)
    mistakes = [
        ([base] * world, f"you dropped the last {n % world} row(s): with n // world_size rows per chunk the "
                         "remainder is lost. The first n % world_size chunks get one row more."),
        (want[::-1], "the extra rows went to the LAST chunks: numpy's array_split (and minirl) give them to the "
                     "FIRST ones. Rank r gets one row more when r < n % world_size."),
        ([base] * (world - 1) + [n - base * (world - 1)] if n % world > 1 else None,
         "the last chunk took all the rest: the first n % world_size chunks get one row more each, so that no "
         "two chunks differ by more than one row."),
        ([min(ceil, n - i * ceil) for i in range(world) if n - i * ceil > 0],
         "you cut chunks of ceil(n / world_size) rows (torch.chunk, or data.split): the last ranks get fewer "
         "rows, or none. Use base = n // world_size, plus one row for each of the first n % world_size chunks."),
    ]
    hints = [hint for wrong, hint in mistakes if sizes == wrong and wrong != want]
    hints = list(dict.fromkeys(hints))[:2]
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


def dispatch_text(data: DataProto, world: int) -> str:
    return f"dp_dispatch(<a batch of {len(data)} rows>, world_size={world})"


def dispatched(ch, data: DataProto, world: int) -> list[DataProto]:
    """Call the reader's dp_dispatch; check that it returned a list of DataProtos and left its input alone."""
    text = dispatch_text(data, world)
    given_data = copy_of(data)
    out = call(ch.dp_dispatch, given_data, world)
    if not isinstance(out, list | tuple):
        fail(f"{text} returned a {type(out).__name__}; return a list of DataProtos, one per rank.")
    for rank, chunk in enumerate(out):
        if not isinstance(chunk, DataProto):
            fail(f"{text}: item {rank} of the list is a {type(chunk).__name__}, not a DataProto. Cut the batch "
                 "with data.slice(start, end), which keeps all three parts.")
    if difference(given_data, data):
        fail(f"{text} changed its input batch in place ({difference(given_data, data)}). The driver keeps "
             "using that batch: build new chunks, e.g. with data.slice(start, end).")
    return list(out)


def expect_dispatch(ch, data: DataProto, world: int, found_by: str = "") -> list[DataProto]:
    """Fail, naming the first wrong rank and the likely mistake, unless the reader agrees with minirl (verl)."""
    text = dispatch_text(data, world)
    got = dispatched(ch, data, world)
    want = minirl_dispatch(data, world)
    n = len(data)
    assert sizes_of(want) == want_sizes(n, world)  # the grader's own rule agrees with minirl
    if len(got) != world:
        fail(f"{text} returned {len(got)} chunks, expected {world}: one per rank, chunk sizes "
             f"{want_sizes(n, world)}.{why_sizes(n, world, sizes_of(got))}{found_by}")
    if sizes_of(got) != sizes_of(want):
        fail(f"{text}: chunk sizes {sizes_of(got)}, expected {sizes_of(want)} (near-equal, the first n % world_size "
             f"chunks one row longer).{why_sizes(n, world, sizes_of(got))}{found_by}")
    all_rows = [rows_of(chunk) for chunk in got]
    for rank, (chunk, wanted) in enumerate(zip(got, want)):
        if all_rows[rank] != rows_of(wanted):
            hint = ""
            if all_rows == [list(range(r, n, world)) for r in range(world)]:
                hint = (" You dealt the rows round-robin (rank r got rows r, r + world_size, ...). DP_COMPUTE_PROTO "
                        "gives each rank one contiguous block, so that joining the chunks in rank order gives back "
                        "the original order.")
            elif sorted(sum(all_rows, [])) != list(range(n)):
                hint = " Every row must go to exactly one rank, once."
            fail(f"{text}: rank {rank} got rows {all_rows[rank]}, expected {rows_of(wanted)} (contiguous blocks "
                 f"in row order).{hint}{found_by}")
        problem = difference(chunk, wanted)
        if problem:
            hint = ""
            if chunk.meta_info != wanted.meta_info:
                hint = (" Every chunk carries the whole meta_info: it holds the settings of the call (temperature, "
                        "...), and each rank needs them. data.slice keeps it.")
            elif difference(DataProto(chunk.batch), DataProto(wanted.batch)) == "":
                hint = (" Cut the non-tensor fields with the same rows as the tensors: a uid or a ground truth "
                        "belongs to its row. data.slice(start, end) cuts both.")
            fail(f"{text}: rank {rank} got the right rows {all_rows[rank]}, but {problem}.{hint}{found_by}")
    return got


def why_collect(chunks: list[DataProto], got: DataProto) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    sizes = sizes_of(chunks)
    starts = [sum(sizes[:rank]) for rank in range(len(chunks))]
    dealt = [starts[rank] + i for i in range(max(sizes, default=0)) for rank in range(len(chunks)) if i < sizes[rank]]
    joined = minirl_collect(chunks)
    mistakes = [
        (minirl_collect(chunks[::-1]), "you joined the chunks from the last rank to the first."),
        (joined.select_idxs(dealt), "you took one row from each rank in turn: join the chunks one after the other, "
                                    "in rank order."),
        (DataProto(joined.batch, joined.non_tensor_batch), "keep the meta_info of outputs[0] (DataProto.concat "
                                                            "does)."),
    ]
    hints = [hint for wrong, hint in mistakes if not difference(got, wrong) and difference(wrong, joined)]
    return "".join(" " + hint[0].upper() + hint[1:] for hint in hints[:1])


def expect_collect(ch, chunks: list[DataProto], want: DataProto, found_by: str = "") -> DataProto:
    """Fail unless the reader's dp_collect joins `chunks` into `want`, field by field."""
    text = f"dp_collect(<{len(chunks)} chunks of sizes {sizes_of(chunks)}>)"
    given_chunks = [copy_of(chunk) for chunk in chunks]
    out = call(ch.dp_collect, given_chunks)
    if not isinstance(out, DataProto):
        fail(f"{text} returned a {type(out).__name__}; return one DataProto (DataProto.concat(outputs)).")
    if len(out) != len(want):
        fail(f"{text} returned {len(out)} rows, expected {len(want)}: every rank's rows, all of them.{found_by}")
    got_rows, want_rows = rows_of(out), rows_of(want)
    if got_rows != want_rows:
        fail(f"{text} gave the rows in the order {got_rows}, expected {want_rows}: the rows come back in the "
             f"order they were sent, rank 0's chunk first.{why_collect(chunks, out)}{found_by}")
    problem = difference(out, want)
    if problem:
        fail(f"{text}: {problem}. Join the rows of every field, rank 0's chunk first."
             f"{why_collect(chunks, out)}{found_by}")
    return out


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_dispatch_toy(ch):
    # 7 rows over 3 ranks: sizes [3, 2, 2], the rows [0, 1, 2], [3, 4], [5, 6]
    data = make_batch(7)
    chunks = expect_dispatch(ch, data, 3)
    assert [rows_of(c) for c in chunks] == [[0, 1, 2], [3, 4], [5, 6]]
    expect_collect(ch, minirl_dispatch(data, 3), data)


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_dispatch_sizes_when_the_world_does_not_divide_the_batch(ch):
    # (rows, ranks): 10 over 4 gives [3, 3, 2, 2]; 9 over 4 gives [3, 2, 2, 2]; 8 over 4 gives [2, 2, 2, 2]
    for rows, world in ((10, 4), (9, 4), (8, 4), (11, 8), (5, 5), (16, 3)):
        expect_dispatch(ch, make_batch(rows), world)


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_dispatch_one_rank_gets_everything(ch):
    data = make_batch(6)
    chunks = expect_dispatch(ch, data, 1)
    problem = difference(chunks[0], data)
    if problem:
        fail(f"{dispatch_text(data, 1)}: the only chunk must equal the whole batch, but {problem}.")
    expect_collect(ch, chunks, data)


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_dispatch_non_tensor_fields_follow_their_rows(ch):
    # the uids and ground truths of rank r are those of its rows; a dict per row stays a dict
    data = make_batch(9)
    for world in (2, 4):
        for rank, chunk in enumerate(expect_dispatch(ch, data, world)):
            rows = rows_of(chunk)
            if list(chunk.non_tensor_batch["uid"]) != [f"uid-{i // 2}" for i in rows]:
                fail(f"{dispatch_text(data, world)}: rank {rank} has rows {rows} but the uids "
                     f"{list(chunk.non_tensor_batch['uid'])}: a uid belongs to its row.")


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_dispatch_every_chunk_has_the_meta_info(ch):
    data = make_batch(5, meta={"temperature": 1.0, "validate": False, "eos_token_id": [2, 7]})
    for world in (1, 2, 5):
        for rank, chunk in enumerate(expect_dispatch(ch, data, world)):
            if chunk.meta_info != data.meta_info:
                fail(f"{dispatch_text(data, world)}: rank {rank}'s meta_info is {chunk.meta_info!r}, expected "
                     f"{data.meta_info!r}: every rank needs the call's settings.")
    # a batch with no meta_info at all
    expect_dispatch(ch, make_batch(5, meta={}), 2)


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_dispatch_refuses_fewer_rows_than_ranks(ch):
    for rows, world in ((3, 7), (0, 2), (1, 4)):
        data = make_batch(rows)
        text = dispatch_text(data, world)
        error = raised(ch.dp_dispatch, data, world)
        if error is None:
            fail(f"{text} returned without an error: some ranks would get no row. Raise a ValueError when "
                 "len(data) < world_size.")
        if not isinstance(error, ValueError):
            fail(f"{text} raised {type(error).__name__}: {error}. Raise a ValueError, with a message that says "
                 "what is wrong.")
        if str(world) not in str(error):
            fail(f"{text} raised ValueError({str(error)!r}): the message does not say how many ranks there are "
                 f"({world}). Name the number of rows and the number of ranks, so that the user knows what to "
                 "change.")
    # as many rows as ranks is fine: one row each
    expect_dispatch(ch, make_batch(4), 4)


@pytest.mark.exercise("10.1", "dp_dispatch")
def test_dp_collect_gives_back_the_rows_in_order(ch):
    data = make_batch(11)
    for world in (2, 3, 4):
        chunks = minirl_dispatch(data, world)
        # each rank adds a field, as compute_log_prob does; the driver joins them row by row
        outputs = [DataProto({"old_log_probs": -chunk.batch["scores"]}, {"uid": chunk.non_tensor_batch["uid"]},
                             dict(chunk.meta_info)) for chunk in chunks]
        expect_collect(ch, chunks, data)
        expect_collect(ch, outputs, minirl_collect(outputs))


@st.composite
def batches(draw):
    rows = draw(st.integers(1, 50))
    world = draw(st.integers(1, min(8, rows)))
    meta = draw(st.sampled_from([META, {}, {"temperature": 1.0}]))
    return make_batch(rows, meta), world


@pytest.mark.exercise("10.1", "dp_dispatch")
@FUZZ
@given(case=batches())
def test_dp_dispatch_round_trip(ch, case):
    data, world = case
    found_by = " (a failing case found by hypothesis, shrunk)"
    text, n = dispatch_text(data, world), len(data)
    chunks = dispatched(ch, data, world)
    sizes = sizes_of(chunks)
    if sum(sizes) != n:
        fail(f"{text}: the chunks hold {sum(sizes)} rows in all (sizes {sizes}), expected {n}: no row may be lost "
             f"or repeated.{why_sizes(n, world, sizes)}{found_by}")
    if len(sizes) != world or max(sizes) - min(sizes) > 1 or sizes != sorted(sizes, reverse=True):
        fail(f"{text}: chunk sizes {sizes}, expected {want_sizes(n, world)}: {world} chunks whose sizes differ by "
             f"at most 1, the longer ones first.{why_sizes(n, world, sizes)}{found_by}")
    chunks = expect_dispatch(ch, data, world, found_by)
    expect_collect(ch, chunks, data, found_by)  # collect(dispatch(x)) == x, field by field


# ----------------------------------------------------------------------------------------------
# 10.2 step_stages
# ----------------------------------------------------------------------------------------------

STAGE_NAMES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
               "update_weights")
WHO = ("rollout", "actor", "reference", "critic", "driver")
NOT_STAGES = ("step", "save_checkpoint", "testing")  # timed by fit around the step, not stages of train_step


def want_stages(config, step: int, *, ref_always=False, old_in_bypass=False, actor_first=False, no_warmup=False,
                warmup_strict=False, gae_decides=False, no_weight_sync=False) -> list[tuple[str, str]]:
    """The stages of minirl's train_step (checked against the real trainer below); the keywords make mistakes."""
    algo = config.algorithm
    use_reference = ref_always or algo.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss
    use_critic = (algo.adv_estimator == "gae" if gae_decides or config.critic.enable is None
                  else config.critic.enable)
    stages = [("gen", "rollout"), ("reward", "driver")]
    if old_in_bypass or not algo.rollout_correction.bypass_mode:
        stages.append(("old_log_prob", "actor"))
    if use_reference:
        stages.append(("ref", "reference"))
    if use_critic:
        stages.append(("values", "critic"))
    stages.append(("adv", "driver"))
    warm = config.trainer.critic_warmup
    updates = [("update_critic", "critic")] if use_critic else []
    if no_warmup or (warm < step if warmup_strict else warm <= step):
        actor = [("update_actor", "actor")] + ([] if no_weight_sync else [("update_weights", "rollout")])
        updates = actor + updates if actor_first else updates + actor
    return stages + updates


def why_stages(config, step: int, got: list) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    want = want_stages(config, step)
    mistakes = [
        (want_stages(config, step, ref_always=True),
         "you always ran the reference. It runs only when a KL term needs its log-probs: "
         "algorithm.use_kl_in_reward or actor_rollout_ref.actor.use_kl_loss."),
        (want_stages(config, step, old_in_bypass=True),
         "in bypass mode (algorithm.rollout_correction.bypass_mode=true) the actor does not compute old_log_prob "
         "again: the rollout's own log-probs stand in for pi_old."),
        (want_stages(config, step, actor_first=True),
         "you updated the actor before the critic. verl updates the critic first (update_critic), then the actor."),
        (want_stages(config, step, no_warmup=True),
         "you forgot trainer.critic_warmup: while step < critic_warmup only the critic trains. There is no "
         "update_actor and no update_weights."),
        (want_stages(config, step, warmup_strict=True),
         "the actor is updated when critic_warmup <= step (verl: `if critic_warmup <= global_steps`), not only "
         "when critic_warmup < step."),
        (want_stages(config, step, gae_decides=True),
         "the setting critic.enable decides when it is true or false. Only when it is null does the estimator "
         "decide (a critic for gae only)."),
        (want_stages(config, step, no_weight_sync=True),
         "after update_actor, the rollout engine gets the new weights: (\"update_weights\", \"rollout\")."),
    ]
    hints = [hint for wrong, hint in mistakes if got == wrong and wrong != want]
    hints = list(dict.fromkeys(hints))[:2]
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


@functools.cache
def _config(overrides: tuple[str, ...]):
    return load_config(list(overrides))


def config_of(overrides) -> object:
    """A fresh Config for these overrides (a copy: the reader's function may not change the cached one)."""
    return copy.deepcopy(_config(tuple(overrides)))


def stages_text(overrides, step) -> str:
    return f"step_stages(load_config({list(overrides)}), step={step})"


def stages_of(ch, config, text: str, step: int | None) -> list[tuple[str, str]]:
    """Call the reader's step_stages; check that it returned a list of (stage, who) pairs of known names."""
    out = call(ch.step_stages, config) if step is None else call(ch.step_stages, config, step)
    if not isinstance(out, list | tuple):
        fail(f"{text} returned a {type(out).__name__}; return a list of (stage, who) tuples.")
    stages = []
    for item in out:
        if not isinstance(item, tuple | list) or len(item) != 2 or not all(isinstance(s, str) for s in item):
            fail(f"{text} returned {list(out)}: the item {item!r} is not a pair of strings (stage, who).")
        name, who = item
        if name not in STAGE_NAMES:
            fail(f"{text} returned a stage named {name!r}. Use the trainer's timing names: {', '.join(STAGE_NAMES)}.")
        if who not in WHO:
            fail(f"{text}: stage {name!r} is run by {who!r}. Who runs a stage is one of {', '.join(WHO)}.")
        stages.append((name, who))
    return stages


def stage_difference(want: list[str], got: list[str]) -> str:
    """'missing [...]; extra [...]', or a word on the order when the same stages came back."""
    missing, extra = [name for name in want if name not in got], [name for name in got if name not in want]
    parts = [f"missing {missing}" if missing else "", f"extra {extra}" if extra else ""]
    return "; ".join(part for part in parts if part) or "the right stages, in another order"


def expect_stages(ch, overrides, step: int | None = 1, config=None, found_by: str = "") -> list[tuple[str, str]]:
    """Fail, naming the first wrong stage and the likely mistake, unless the reader agrees with minirl (verl)."""
    config = config_of(overrides) if config is None else config
    text = stages_text(overrides, 1 if step is None else step)
    if step is None:
        text = text.replace(", step=1)", ")")
    got = stages_of(ch, copy.deepcopy(config), text, step)
    want = want_stages(config, 1 if step is None else step)
    if got != want:
        names, want_names = [name for name, _ in got], [name for name, _ in want]
        if names == want_names:
            i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            fail(f"{text}: the stages are right, but {got[i][0]!r} is run by {got[i][1]!r}, expected {want[i][1]!r}. "
                 f"Expected {want}.{found_by}")
        fail(f"{text}: {stage_difference(want_names, names)}.{why_stages(config, 1 if step is None else step, got)} "
             f"Got the stages {names}, expected {want_names}.{found_by}")
    return got


GRPO = [("gen", "rollout"), ("reward", "driver"), ("old_log_prob", "actor"), ("adv", "driver"),
        ("update_actor", "actor"), ("update_weights", "rollout")]


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_grpo(ch):
    got = expect_stages(ch, [])  # verl's defaults here: GRPO, no KL, no critic
    assert got == GRPO
    expect_stages(ch, ["algorithm.adv_estimator=rloo"])
    expect_stages(ch, ["algorithm.adv_estimator=remax", "actor_rollout_ref.hybrid_engine=false"])


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_gae_updates_the_critic_first(ch):
    got = expect_stages(ch, ["algorithm.adv_estimator=gae"])
    assert got == [("gen", "rollout"), ("reward", "driver"), ("old_log_prob", "actor"), ("values", "critic"),
                   ("adv", "driver"), ("update_critic", "critic"), ("update_actor", "actor"),
                   ("update_weights", "rollout")]


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_reference_only_for_kl(ch):
    expect_stages(ch, ["algorithm.adv_estimator=grpo"])
    got = expect_stages(ch, ["actor_rollout_ref.actor.use_kl_loss=true"])
    assert ("ref", "reference") in got
    expect_stages(ch, ["algorithm.use_kl_in_reward=true"])
    expect_stages(ch, ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true",
                       "actor_rollout_ref.actor.use_kl_loss=true"])


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_bypass_mode(ch):
    got = expect_stages(ch, ["algorithm.rollout_correction.bypass_mode=true"])
    assert ("old_log_prob", "actor") not in got
    expect_stages(ch, ["algorithm.rollout_correction.bypass_mode=true", "algorithm.adv_estimator=gae",
                       "actor_rollout_ref.actor.use_kl_loss=true"])


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_critic_warmup(ch):
    # critic_warmup=3: steps 1 and 2 train the critic alone; from step 3 on the actor trains too
    for step in (1, 2, 3, 4):
        expect_stages(ch, ["algorithm.adv_estimator=gae", "trainer.critic_warmup=3"], step)
    # no critic at all: a warmup step then only scores and computes advantages
    expect_stages(ch, ["trainer.critic_warmup=2"], 1)
    expect_stages(ch, ["trainer.critic_warmup=2"], 2)
    # step defaults to 1
    expect_stages(ch, ["trainer.critic_warmup=1"], None)
    expect_stages(ch, ["algorithm.adv_estimator=gae", "trainer.critic_warmup=2"], None)


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_critic_enable_decides(ch):
    got = expect_stages(ch, ["critic.enable=true"])  # GRPO advantages, but a critic is trained beside them
    assert ("update_critic", "critic") in got
    expect_stages(ch, ["critic.enable=false"])
    expect_stages(ch, ["algorithm.adv_estimator=gae", "critic.enable=true"])


@st.composite
def configs(draw):
    """A Config built by setting the fields on a copy of the defaults (load_config is slow for 200 cases)."""
    estimator = draw(st.sampled_from(["grpo", "gae", "rloo", "reinforce_plus_plus"]))
    enable = draw(st.sampled_from([None, True] if estimator == "gae" else [None, True, False]))
    fields = {"algorithm.adv_estimator": estimator, "critic.enable": enable,
              "algorithm.rollout_correction.bypass_mode": draw(st.booleans()),
              "algorithm.use_kl_in_reward": draw(st.booleans()),
              "actor_rollout_ref.actor.use_kl_loss": draw(st.booleans()),
              "trainer.critic_warmup": draw(st.integers(0, 4))}
    config = config_of([])
    for key, value in fields.items():
        *path, name = key.split(".")
        setattr(functools.reduce(getattr, path, config), name, value)
    default = config_of([])
    overrides = [f"{key}={'null' if value is None else str(value).lower()}" for key, value in fields.items()
                 if functools.reduce(getattr, key.split("."), default) != value]  # only what differs from default
    return config, overrides, draw(st.integers(1, 5))


@pytest.mark.exercise("10.2", "step_stages")
@FUZZ
@given(case=configs())
def test_step_stages_agree_with_minirl(ch, case):
    config, overrides, step = case
    expect_stages(ch, overrides, step, config=config, found_by=" (a failing config found by hypothesis, shrunk)")


REAL_RUN = ["trainer.total_training_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false",
            "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.n=2", "trainer.logger=[]", "trainer.resume_mode=disable"]


@pytest.mark.exercise("10.2", "step_stages")
def test_step_stages_match_the_real_trainer(ch, tmp_path):
    from minirl.trainer import train

    cases = [[], ["algorithm.adv_estimator=gae"], ["actor_rollout_ref.actor.use_kl_loss=true"],
             ["algorithm.rollout_correction.bypass_mode=true"],
             ["algorithm.adv_estimator=gae", "trainer.critic_warmup=2"]]
    answers = [stages_of(ch, config_of(case), stages_text(case, 1), 1) for case in cases]  # todo before any run
    for i, (case, got) in enumerate(zip(cases, answers)):
        history = train([f"trainer.default_local_dir={tmp_path / str(i)}", *REAL_RUN, *case], show_progress=False)
        logged = [key.removeprefix("timing_s/") for key in history[-1] if key.startswith("timing_s/")]
        ran = [name for name in logged if name not in NOT_STAGES]  # in the order the trainer timed them
        assert ran == [name for name, _ in want_stages(config_of(case), 1)], (case, ran)  # the grader agrees
        names = [name for name, _ in got]
        if names != ran:
            fail(f"{stages_text(case, 1)}, compared with the real trainer (minirl.trainer.train, one step, its "
                 f"timing_s/ keys): {stage_difference(ran, names)}.{why_stages(config_of(case), 1, got)} "
                 f"Got the stages {names}; the trainer ran {ran}.")
        expect_stages(ch, case, 1)
