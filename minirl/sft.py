"""Supervised fine-tuning (SFT): the warm start every RL chapter begins from.

From a random initialisation an exact-match reward gives almost no signal (no answer is ever
right), so RL starts from a model that imitated demonstrations first, as InstructGPT and
DeepSeek-R1 do. Our demonstrations are noisy (a fraction has a wrong answer): imitation alone is
then capped, and RL has room to beat it. verl's twin is `verl/trainer/sft_trainer.py`.

    python -m minirl.sft                      # build (or reuse) the cached default warm start
    default_warm_start()                      # the same, from Python: returns the model directory
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from minirl import data as data_lib
from minirl import models
from minirl.config import MultiTurnConfig, OptimConfig
from minirl.data import compute_position_ids
from minirl.evaluate import evaluate, evaluate_agent_loops
from minirl.optim import build_lr_scheduler
from minirl.parallel import apply_thread_policy
from minirl.rollout import generate_sequences
from minirl.tools import load_all_tools

TOOL_MAX_ASSISTANT_TURNS = 3  # the tool task: a call, its answer, and one more turn to spare
WARM_START_VERSION = 2  # bump when the build changes, so cached warm starts are rebuilt
# fields added since version 2, and their defaults
ADDED_FIELDS = {"demo_style": "plain", "worked_fraction": 0.5, "min_terms": 3, "max_terms": 4,
                "lr_scheduler_type": "constant"}


@dataclass
class SFTConfig:
    """Hyperparameters of the SFT warm start (the defaults build the book's tiny warm start)."""

    num_train: int = 2000
    """Number of training questions (each gets one demonstration)."""
    num_test: int = 200
    """Held-out questions for the greedy-accuracy check."""
    wrong_fraction: float = 0.4
    """Fraction of demonstrations with a wrong answer (noise that caps imitation)."""
    max_operand: int = 30
    """Questions are a+b with 0 <= a, b <= max_operand."""
    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 64
    """Demonstrations per step."""
    lr: float = 3e-3
    """AdamW learning rate (constant after a short linear warm-up; gradients clipped to norm 1, which keeps
    a late loss spike from knocking the model off a good state)."""
    warmup_steps: int = 20
    """Linear learning-rate warm-up."""
    lr_scheduler_type: str = "constant"
    """After the warm-up: "constant", or "cosine" (decays to 0 at the last step, verl's
    get_cosine_schedule_with_warmup), which ends in a settled model instead of one still bouncing at full lr."""
    max_length: int = 48
    """Maximum prompt + response tokens; longer demonstrations raise an error."""
    response_length: int = 20
    """Maximum new tokens when checking accuracy."""
    seed: int = 0
    """Seeds the data, the model initialisation and the data order."""
    model: dict = field(default_factory=dict)
    """Overrides for minirl.models.build_tiny_model (hidden_size, num_hidden_layers, ...)."""
    demo_style: str = "plain"
    """"plain" demonstrations ("a+b=c #### c"); "worked": the preference task of Chapters 3 and 6, half of
    whose demonstrations add tens and units before the answer (minirl.data.worked_sft_rows); "chain": the chain
    task of Chapters 5 and 8, direct or worked sums of 3-4 terms (minirl.data.chain_sft_rows); "word": Lab A's
    GSM8K-format word problems (minirl.data.word_sft_rows); "tool": Chapter 13's three-digit sums with an `add`
    tool, multi-turn demonstrations (minirl.data.tool_sft_rows)."""
    worked_fraction: float = 0.5
    """Share of worked demonstrations (demo_style "chain"), of demonstrations that call the tool ("tool")."""
    min_terms: int = 3
    """Fewest numbers in a chain question (demo_style "chain")."""
    max_terms: int = 4
    """Most numbers in a chain question (demo_style "chain")."""

    def key(self) -> str:
        """A short hash of the config (and WARM_START_VERSION): the cache key of the warm start it builds."""
        fields = asdict(self)
        for name, default in ADDED_FIELDS.items():  # a field at its default leaves the key of older caches as it was
            if fields[name] == default:
                del fields[name]
        content = json.dumps({"version": WARM_START_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(content.encode()).hexdigest()[:12]


CHAIN_SFT = SFTConfig(demo_style="chain", worked_fraction=0.3, wrong_fraction=0.3, max_operand=9, max_length=64,
                      response_length=48)
"""The warm start of the chain task (Chapters 5 and 8): 30% of its demonstrations write the running sums."""
CHAIN_ZERO_SFT = SFTConfig(demo_style="chain", worked_fraction=0.02, wrong_fraction=0.3, max_operand=9, max_length=64,
                           response_length=48)
"""R1-Zero's starting point in miniature: 2% of the demonstrations write steps (in the <think> format)."""
WORD_SFT = SFTConfig(demo_style="word", max_length=112, response_length=24)
"""The warm start of Lab A's GSM8K-format word problems: 40% of its demonstrations have a wrong answer."""
TOOL_SFT = SFTConfig(demo_style="tool", worked_fraction=0.5, wrong_fraction=0.3, max_operand=999, max_length=144,
                     response_length=128, steps=1000, lr_scheduler_type="cosine")
"""The warm start of Chapter 13's tool task: half of its demonstrations call `add`, 30% of either kind go wrong.
1000 steps ending in a cosine decay. Measured on an AMD EPYC (AVX2), seeds 0-2: the earlier 600 constant-rate steps
left seed 0 unable to copy the tool's result into its answer (sampled accuracy 0.0: GRPO had no right answer to
learn from); 1000 constant-rate steps lost seed 1's calls altogether (final loss 0.256, up from 0.162); with the
decay every seed calls in 0.40-0.43 of its sampled answers and is right in 0.26-0.58 of them, and the Chapter 13
effect test's 8 GRPO steps raise the call rate by 0.27-0.52."""
TEACHER_SFT = SFTConfig(wrong_fraction=0.0, steps=600, lr=2e-3, lr_scheduler_type="cosine",
                        model=dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
                                   intermediate_size=512))
"""The teacher of Chapter 14's distillation: the tiny task's questions, 5x the student's parameters (1.6M vs 0.33M),
demonstrations without mistakes, 600 steps (the student had 1000). Same tokenizer and chat template as every warm
start: greedy accuracy 0.98 on the held-out questions (the student's warm start: 0.45)."""
WARM_STARTS = {"tiny": SFTConfig(), "chain": CHAIN_SFT, "chain-zero": CHAIN_ZERO_SFT, "word": WORD_SFT,
               "tool": TOOL_SFT, "teacher": TEACHER_SFT}
"""The warm starts `python -m minirl warm-start NAME` builds: the tiny task's (Chapters 1-4, 7), the chain
task's two (Chapters 5 and 8), the word problems' (Lab A), the tool task's (Chapter 13) and the tiny task's
teacher (Chapter 14)."""


def demonstration_tokens(tokenizer, demo: dict,
                         tools: list[dict] | None = None) -> tuple[list[int], list[int], list[int]]:
    """One demonstration as (prompt ids, response ids, response loss mask).

    A single-turn demo ({"prompt", "response"}) is prompt + response + EOS, every response token trained. A
    multi-turn demo ({"prompt", "turns"}: assistant and tool messages) is the token stream the tool agent loop
    builds: each assistant turn + EOS (trained), each run of tool turns rendered by the chat template
    (`render_new_turns`, not trained), so SFT and RL see the same tokens with the same mask.
    """
    prompt_ids = data_lib.prompt_token_ids(tokenizer, demo["prompt"], tools)
    if "turns" not in demo:
        response = tokenizer(demo["response"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        return prompt_ids, response, [1] * len(response)
    response, loss = [], []
    turns = list(demo["turns"])
    while turns:
        if turns[0]["role"] == "assistant":
            ids = tokenizer(turns.pop(0)["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            response, loss = response + ids, loss + [1] * len(ids)
            continue
        tool_turns = []
        while turns and turns[0]["role"] != "assistant":
            tool_turns.append(turns.pop(0))
        ids = data_lib.render_new_turns(tokenizer, tool_turns, tools)
        response, loss = response + ids, loss + [0] * len(ids)
    return prompt_ids, response, loss


def tokenize_demonstrations(tokenizer, demos: list[dict], max_length: int,
                            tools: list[dict] | None = None) -> dict[str, torch.Tensor]:
    """Demonstrations (see `demonstration_tokens`), right-padded; the loss mask covers the model's own tokens.

    Returns {"input_ids", "attention_mask", "position_ids", "loss_mask"}, each (N, T). loss_mask[t]
    is 1 where token t+1 is a trained response token, aligned with the logits that predict it.
    """
    rows = []
    for demo in demos:
        prompt_ids, response_ids, response_loss = demonstration_tokens(tokenizer, demo, tools)
        if len(prompt_ids) + len(response_ids) > max_length:
            raise ValueError(f"a demonstration has {len(prompt_ids) + len(response_ids)} tokens, more than "
                             f"max_length={max_length}; raise max_length.")
        rows.append((prompt_ids, response_ids, response_loss))
    length = max(len(p) + len(r) for p, r, _ in rows)
    input_ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    loss_mask = torch.zeros_like(input_ids)
    for i, (prompt_ids, response_ids, response_loss) in enumerate(rows):
        ids = prompt_ids + response_ids
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        loss_mask[i, len(prompt_ids) - 1 : len(ids) - 1] = torch.tensor(response_loss)  # logits at t predict t+1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": compute_position_ids(attention_mask), "loss_mask": loss_mask}


def train_sft(model, tokenizer, demos: list[dict], config: SFTConfig, show_progress: bool = True,
              tools: list[dict] | None = None, callback=None):
    """Train `model` in place on `demos` with the next-token loss on response tokens only.

    Runs through accelerate (Accelerator, prepare, backward), so the same code uses one CPU, a GPU
    or several processes. The data order is seeded by `config.seed`. `callback(step, model, tokens, seconds,
    optimizer)`, if given, runs after every optimizer step (step counts from 1; tokens: prompt + response tokens of
    that step's batch; seconds: that step's time), e.g. to evaluate as training goes (Chapter 14's off-policy
    distillation). Only parameters that require a gradient are optimised (a LoRA adapter's, under PEFT).

    Returns:
        (the trained model, a list of per-step training losses).
    """
    set_seed(config.seed)
    apply_thread_policy()
    accelerator = Accelerator()
    tensors = tokenize_demonstrations(tokenizer, demos, config.max_length, tools)
    dataset = TensorDataset(tensors["input_ids"], tensors["attention_mask"], tensors["position_ids"],
                            tensors["loss_mask"])
    loader = DataLoader(dataset, batch_size=config.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(config.seed))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=0.0)
    schedule = OptimConfig(lr=config.lr, lr_warmup_steps=config.warmup_steps,
                           lr_scheduler_type=config.lr_scheduler_type)
    scheduler = build_lr_scheduler(optimizer, schedule, config.steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()
    losses, step = [], 0
    progress = tqdm(total=config.steps, desc="SFT", disable=not show_progress or not accelerator.is_main_process)
    while step < config.steps:
        for input_ids, attention_mask, position_ids, loss_mask in loader:
            started = time.perf_counter()
            logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
            log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            token_log_probs = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
            mask = loss_mask[:, :-1]
            loss = -(token_log_probs * mask).sum() / mask.sum()
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            step += 1
            if callback is not None:
                callback(step, accelerator.unwrap_model(model), attention_mask.sum().item(),
                         time.perf_counter() - started, optimizer)
            progress.update(1)
            progress.set_postfix(loss=f"{loss.item():.3f}")
            if step >= config.steps:
                break
    progress.close()
    return accelerator.unwrap_model(model), losses


@torch.no_grad()
def sample_demonstrations(model_dir: str | Path, rows: list[dict], response_length: int, max_prompt_length: int,
                          seed: int = 0, batch_size: int = 256) -> list[dict]:
    """One sampled answer (temperature 1) of the model in `model_dir` to each row's prompt, as SFT demonstrations
    {"prompt", "response"} (with the row's data_source and reward_model, to score them): what off-policy
    distillation trains a student on (a teacher's samples; Chapter 14).
    Answers cut off at response_length (no end-of-sequence token) are left out."""
    tokenizer, model = models.load_tokenizer(model_dir), models.load_policy(model_dir)
    generator = torch.Generator().manual_seed(seed)
    demos = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        prompts = data_lib.encode_prompts(tokenizer, [row["prompt"] for row in chunk], max_prompt_length)
        out = generate_sequences(model, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                                 tokenizer.pad_token_id, response_length, do_sample=True, generator=generator)
        for row, ids, length in zip(chunk, out["responses"], out["response_length"].tolist()):
            if length and ids[length - 1] == tokenizer.eos_token_id:  # finished: the EOS is the last valid token
                demos.append({"prompt": row["prompt"], "data_source": row["data_source"],
                              "reward_model": row["reward_model"],
                              "response": tokenizer.decode(ids[:length - 1], skip_special_tokens=False)})
    return demos


def train_on_demonstrations(model_dir: str | Path, demos: list[dict], val_rows: list[dict], config: SFTConfig,
                            lora_rank: int = 0, lora_alpha: float = 16, eval_every: int = 10) -> list[dict]:
    """SFT the model in `model_dir` on `demos` (optionally through a LoRA adapter) and log it like a trainer run.

    Off-policy distillation when the demonstrations are a teacher's samples (`sample_demonstrations`); Chapter 14
    also sweeps LoRA's learning rate with it. Validation is greedy on `val_rows`, every `eval_every` steps and
    at step 0 and the last step, under the trainer's name (val-core/<data_source>/acc/mean@1).

    Returns:
        metrics records as `metrics.jsonl` holds them (so minirl.book.notebook's band plots read them): per step
        {step, perf/total_num_tokens, timing_s/step, [val-core/...]}, and on the last record the cost:
        minirl/trainable_params, minirl/optimizer_state_bytes (AdamW's moments and steps), minirl/peak_rss_gb (the
        process's peak during this run, where Linux lets it be reset; else since the process started).
    """
    from minirl import lora
    from minirl.metrics import peak_rss_gb, reset_peak_rss

    apply_thread_policy()
    reset_peak_rss()  # this run's peak, also in a worker process that ran others before
    tokenizer, model = models.load_tokenizer(model_dir), models.load_policy(model_dir)
    if lora_rank:
        torch.manual_seed(config.seed)  # the adapter's random A: the same for a seed, whatever ran before
        model = lora.apply_lora(model, lora.LoraSettings(lora_rank, lora_alpha, "all-linear"))
    key = f"val-core/{val_rows[0]['data_source']}/acc/mean@1"
    prompt_budget = config.max_length

    def validate(model) -> float:
        model.eval()
        accuracy = evaluate(model, tokenizer, val_rows, config.response_length, prompt_budget)["acc"]
        model.train()
        return accuracy

    records = [{"step": 0, key: validate(model)}]

    def after_step(step, model, tokens, seconds, optimizer):
        record = {"step": step, "perf/total_num_tokens": tokens, "timing_s/step": seconds}
        if step % eval_every == 0 or step == config.steps:
            record[key] = validate(model)
        if step == config.steps:
            record.update({"minirl/trainable_params": lora.count_parameters(model)[0],
                           "minirl/optimizer_state_bytes": lora.optimizer_state_bytes(optimizer),
                           "minirl/peak_rss_gb": peak_rss_gb()})
        records.append(record)

    train_sft(model, tokenizer, demos, config, show_progress=False, callback=after_step)
    return records


def fine_tune(model_dir: str | Path, demos: list[dict], out_dir: str | Path, config: SFTConfig,
              show_progress: bool = True) -> Path:
    """SFT an existing model on `demos` and save the result to `out_dir` (atomically): R1's cold start.

    demos: {"prompt": chat messages, "response": text}; config: steps, batch_size, lr, max_length, seed.
    """
    tokenizer, model = models.load_tokenizer(model_dir), models.load_policy(model_dir)
    model, losses = train_sft(model, tokenizer, demos, config, show_progress)
    return models.save_model_atomically(model, tokenizer, out_dir, "sft.json",
                                        {"config": asdict(config), "from": str(model_dir), "demos": len(demos),
                                         "final_loss": losses[-1]})


def build_warm_start(out_dir: str | Path, config: SFTConfig | None = None, show_progress: bool = True) -> dict:
    """Build the tiny task's data, a tiny model, and SFT it; save model + tokenizer + data to `out_dir`.

    Writes `out_dir/` (a Hugging Face model directory), `out_dir/data/{train,test,sft,dpo}.parquet`
    and `out_dir/warm_start.json` (config, accuracy, timings). Returns that summary.
    """
    config = config or SFTConfig()
    out_dir = Path(out_dir)
    start = time.perf_counter()
    paths = data_lib.make_arithmetic_dataset(out_dir / "data", config.num_train, config.num_test, config.seed,
                                             config.wrong_fraction, config.max_operand, config.demo_style,
                                             config.worked_fraction, (config.min_terms, config.max_terms))
    models.save_tiny_model(out_dir, seed=config.seed, **config.model)
    tokenizer, model = models.load_tokenizer(out_dir), models.load_policy(out_dir)
    if config.demo_style == "tool":  # tool results come back as `tool` turns: the template needs the role
        tokenizer.chat_template = models.TOOL_CHAT_TEMPLATE
        with models.quiet_progress():
            tokenizer.save_pretrained(out_dir)
    tool_settings = tool_task_settings() if config.demo_style == "tool" else None
    demo_columns = ("prompt", "turns") if tool_settings else ("prompt", "response")
    demos = data_lib.read_parquet(paths["sft"], required_columns=demo_columns).to_list()
    test_rows = data_lib.read_parquet(paths["test"]).to_list()
    prompt_budget = config.max_length  # a prompt never exceeds a whole demonstration's budget

    def check(**sampling):
        if tool_settings is None:
            return evaluate(model, tokenizer, test_rows, config.response_length, prompt_budget, **sampling)
        sampling.pop("generator", None)
        return evaluate_agent_loops(model, tokenizer, test_rows, config.response_length, prompt_budget,
                                    *tool_settings, seed=config.seed, **sampling)

    before = check()
    model, losses = train_sft(model, tokenizer, demos, config, show_progress,
                              [t.tool_schema for t in tool_settings[1].values()] if tool_settings else None)
    train_seconds = time.perf_counter() - start
    after = check()
    sampled = check(do_sample=True, generator=torch.Generator().manual_seed(config.seed))
    with models.quiet_progress():
        model.save_pretrained(out_dir)
    summary = {"config": asdict(config), "key": config.key(), "greedy_acc_before": before["acc"],
               "greedy_acc": after["acc"], "sampled_acc": sampled["acc"], "final_loss": losses[-1],
               "seconds": round(train_seconds, 1),
               "data": {name: str(Path(path).relative_to(out_dir)) for name, path in paths.items()}}
    if tool_settings:  # how the warm start uses the tool, greedy and sampled
        summary.update({f"{mode}_{key}": result[key] for mode, result in (("greedy", after), ("sampled", sampled))
                        for key in ("tool_calls", "malformed_tool_calls", "num_turns", "response_length")})
    (out_dir / "warm_start.json").write_text(json.dumps(summary, indent=2))
    return summary


def tool_task_settings(function_tool_path: str | Path | None = None) -> tuple[MultiTurnConfig, dict]:
    """The tool task's loop limits (`multi_turn` as `train_overrides` sets them) and its tools (name -> tool)."""
    path = str(function_tool_path or data_lib.TOOL_FILE)
    multi_turn = MultiTurnConfig(enable=True, max_assistant_turns=TOOL_MAX_ASSISTANT_TURNS, function_tool_path=path)
    return multi_turn, {tool.name: tool for tool in load_all_tools(None, path)}


def default_cache_dir() -> Path:
    """Where cached warm starts live: $MINIRL_CACHE_DIR, else ~/.cache/minirl."""
    return Path(os.environ.get("MINIRL_CACHE_DIR", Path.home() / ".cache" / "minirl"))


def warm_start_dir(config: SFTConfig | None = None, cache_dir: str | Path | None = None) -> Path:
    """Where the warm start for `config` is (or will be) cached; complete once it holds warm_start.json."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cache_dir / f"warm_start-{(config or SFTConfig()).key()}"


def build_once(target: Path, marker: str, build) -> Path:
    """`target`, a cached directory that is complete once it holds the file `marker`; built on first use.

    If the marker is missing, `build(directory)` fills a temporary sibling of `target` (and must write the marker
    there), which is then renamed into place: an interrupted build leaves nothing half-written behind and the next
    call simply starts over. A builder holds a lock file of its own target (`.<name>.lock` beside it), so parallel
    processes (test workers) build each target once, different targets build at the same time, and a build that
    needs another cached thing (the preference task needs a warm start) simply waits for that one's lock.
    """
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / marker).exists():  # another process built it while we waited
            return target
        building = Path(tempfile.mkdtemp(prefix=f".building-{target.name}-", dir=target.parent))
        try:
            build(building)
            if target.exists():  # a stale, incomplete directory from an older version
                shutil.rmtree(target)
            os.replace(building, target)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return target


def default_warm_start(config: SFTConfig | None = None, cache_dir: str | Path | None = None,
                       show_progress: bool = True) -> Path:
    """The warm-start model directory for `config`, built on first use and cached by the config's hash
    (`build_once`: atomic, one builder at a time)."""
    config = config or SFTConfig()
    return build_once(warm_start_dir(config, cache_dir), "warm_start.json",
                      lambda building: build_warm_start(building, config, show_progress))


def train_overrides(model_dir: str | Path, config: SFTConfig, data_dir: str | Path | None = None) -> list[str]:
    """The trainer overrides that run RL from a warm start: its model, its task's data, its response budget.

    `model_dir` may be a warm start or any model fine-tuned from one (e.g. a cold start); the data come
    from `data_dir` (default: `model_dir/data`, where a warm start keeps its task). E.g. for the chain task:
    `train(sft.train_overrides(default_warm_start(CHAIN_SFT), CHAIN_SFT) + [...])`.
    """
    data_dir = Path(data_dir) if data_dir is not None else Path(model_dir) / "data"
    overrides = [f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={data_dir / 'train.parquet'}",
                 f"data.val_files={data_dir / 'test.parquet'}",
                 f"data.max_response_length={config.response_length}"]
    if config.demo_style == "tool":  # the rows run the tool loop (their agent_name), on the v1 trainer
        overrides += ["trainer.use_v1=true", "actor_rollout_ref.rollout.multi_turn.enable=true",
                      f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={TOOL_MAX_ASSISTANT_TURNS}",
                      f"actor_rollout_ref.rollout.multi_turn.function_tool_path={data_lib.TOOL_FILE}"]
    return overrides


if __name__ == "__main__":
    path = default_warm_start()
    print(path)
    print((path / "warm_start.json").read_text())
