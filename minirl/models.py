"""Tiny but real Hugging Face models and tokenizers, and the one loading path every model goes through.

Nothing can be downloaded on a laptop with no network, yet the book must run the code a verl user
runs on `Qwen/Qwen2.5-0.5B-Instruct`. So minirl builds its own tiny artifacts in code and saves
them as ordinary Hugging Face directories:

    build_tokenizer()  a character-level fast tokenizer (the `tokenizers` library) with BOS, EOS,
                       PAD and a chat template
    build_tiny_model() a Qwen2 causal LM (the architecture of verl's examples), ~0.3M parameters,
                       dropout off
    save_tiny_model()  both, `save_pretrained` into one directory

and then loads *any* model directory or hub id the way verl does:

    load_tokenizer(path)  AutoTokenizer; pad token set to EOS if missing (verl's hf_tokenizer)
    load_policy(path)     AutoModelForCausalLM                      (actor, reference, rollout)
    load_critic(path)     AutoModelForTokenClassification(num_labels=1)   (verl's critic: one value per token)

and runs them the way verl's workers do (`compute_log_probs`, `compute_values`).

Swapping in Qwen is `load_policy("Qwen/Qwen2.5-0.5B-Instruct")`: same code, bigger directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils import logging as transformers_logging

from minirl.core import entropy_from_logits, logprobs_from_logits

# Special tokens of the tiny tokenizer. PAD differs from EOS here; minirl still handles PAD == EOS
# (the rollout builds its masks with get_response_mask, which looks for EOS, not padding).
BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"
USER, ASSISTANT, SYSTEM = "<|user|>", "<|assistant|>", "<|system|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK, SYSTEM, USER, ASSISTANT]
# A chat template in the usual Jinja form, kept short (3 special tokens of overhead per turn) so CPU
# sequences stay tens of tokens long. add_generation_prompt=True ends the prompt with <|assistant|>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}<|user|>{{ message['content'] }}"
    "{% else %}<|assistant|>{{ message['content'] }}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# The same template with a `tool` role, for multi-turn tool rollouts (Chapter 13): a tool's result comes back as a
# user turn wrapped in <tool_response> tags, as Qwen2.5's template renders it. Tokenizers built by build_tokenizer
# keep CHAT_TEMPLATE (so every warm start's bytes stay what they were); a tool task sets this one.
TOOL_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}<|user|>{{ message['content'] }}"
    "{% elif message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|user|>{% endif %}"
    "<tool_response>{{ message['content'] }}</tool_response>"
    "{% else %}<|assistant|>{{ message['content'] }}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with no merges: one token per byte, i.e. per character for ASCII text.

    Qwen's tokenizer is a byte-level BPE; this is the same kind of tokenizer with an empty merge
    list, built with the `tokenizers` library (a BPE model over the 256 byte symbols, the
    ByteLevel pre-tokenizer and decoder) and wrapped as a `PreTrainedTokenizerFast`. Every string
    can be encoded (any byte has a token), answers stay tens of tokens long, and the saved
    directory loads with `AutoTokenizer.from_pretrained` like any Qwen2 checkpoint.
    """
    byte_symbols = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + sorted(byte_symbols))}
    core_tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core_tokenizer.decoder = decoders.ByteLevel()
    core_tokenizer.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core_tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[SYSTEM, USER, ASSISTANT],
        padding_side="left",  # prompts are left-padded so they all end at the same column
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 256,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM sized for a laptop CPU (~0.3M parameters by default).

    Dropout is off (attention_dropout=0; Qwen2 has no other dropout): with dropout, the log-probs
    recomputed for the PPO ratio would not match the policy that sampled, and RL collapses
    (measured in ../shared/DESIGN.md).
    """
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        attention_dropout=0.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def save_tiny_model(path: str | Path, seed: int = 0, **model_kwargs) -> Path:
    """Build the tiny tokenizer and model and save both into `path` (a normal HF model directory)."""
    path = Path(path)
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed, **model_kwargs)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_progress():
        tokenizer.save_pretrained(path)
        model.save_pretrained(path)
    return path


def save_model_atomically(model, tokenizer, out_dir: str | Path, summary_name: str, summary: dict) -> Path:
    """`save_pretrained` model and tokenizer plus a JSON summary into a temporary sibling of `out_dir`, then
    rename it into place: an interrupted save leaves the previous directory (or none), never half of one."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        with quiet_progress():
            model.save_pretrained(building)
            tokenizer.save_pretrained(building)
        (building / summary_name).write_text(json.dumps(summary, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(building, out_dir)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return out_dir


def _check_model_path(path: str | Path) -> str:
    """A local directory must exist and hold a config.json; anything else is treated as a hub id."""
    text = str(path)
    local = Path(text).expanduser()
    looks_local = text.startswith((".", "/", "~")) or local.exists() or text.count("/") != 1
    if looks_local:
        if not local.is_dir():
            raise FileNotFoundError(
                f"model path {text!r} is not a directory. Pass a model directory (for the tiny model: "
                f"minirl.models.save_tiny_model(path)) or a hub id such as 'Qwen/Qwen2.5-0.5B-Instruct'.")
        if not (local / "config.json").exists():
            raise FileNotFoundError(
                f"{text!r} has no config.json, so it is not a Hugging Face model directory: point the model path "
                "(actor_rollout_ref.model.path, critic.model.path, reward.reward_model.model_path) at a directory "
                "written by save_pretrained, or at a hub id.")
        return str(local)
    return text


@contextlib.contextmanager
def quiet_progress():
    """Hide transformers' per-file progress bars ("Loading weights", "Writing model shards") and the
    load report: noise for a model that loads in milliseconds, and widgets in a saved notebook."""
    bars, verbosity = transformers_logging.is_progress_bar_enabled(), transformers_logging.get_verbosity()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()


def _from_pretrained(loader, path: str, **kwargs):
    try:
        with quiet_progress():
            return loader.from_pretrained(path, **kwargs)
    except Exception as error:
        if Path(path).is_dir():  # a local model directory whose files are broken (truncated weights, ...)
            raise ValueError(f"the model directory {path!r} could not be loaded ({type(error).__name__}: {error}). "
                             "Its files may be truncated or incomplete: save or download it again.") from error
        if isinstance(error, OSError):  # a ValueError, so the command line reports it without a traceback
            raise ValueError(
                f"could not load {path!r} ({error}). A hub id needs network access (or a filled Hugging Face "
                f"cache); offline, download the model elsewhere and pass its local directory instead.") from error
        raise


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer the way verl's `verl/utils/tokenizer/tokenizer.py::hf_tokenizer` does.

    Raises ValueError if it has no EOS token (responses could never end, and the response mask
    would be wrong). If it has no PAD token, PAD is set to EOS, as verl does; prompts are padded on
    the left.
    """
    tokenizer = _from_pretrained(AutoTokenizer, _check_model_path(path))
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer of {str(path)!r} has no EOS token: set tokenizer.eos_token (the token "
                         "that ends a response) before using it for RL.")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_policy(path: str | Path, dtype: torch.dtype = torch.float32):
    """Load a causal LM (actor, reference or rollout model) with AutoModelForCausalLM."""
    model = _from_pretrained(AutoModelForCausalLM, _check_model_path(path), dtype=dtype)
    _disable_dropout(model)
    return model


def load_critic(path: str | Path, dtype: torch.dtype = torch.float32):
    """Load a critic as verl does: AutoModelForTokenClassification with one label, i.e. the same
    backbone with a scalar value head on every token. The head is freshly initialised when `path`
    holds a causal LM."""
    # (quiet_progress also hides the "score.weight MISSING" report, which is expected: a new head.)
    model = _from_pretrained(AutoModelForTokenClassification, _check_model_path(path), num_labels=1, dtype=dtype)
    _disable_dropout(model)
    return model


def _disable_dropout(model: torch.nn.Module) -> None:
    """Set every dropout probability to 0 (config and modules), as RL needs deterministic log-probs."""
    for name in ("attention_dropout", "hidden_dropout", "classifier_dropout", "resid_pdrop", "embd_pdrop"):
        if getattr(model.config, name, None):
            setattr(model.config, name, 0.0)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


# ----------------------------------------------------------------------------------------------
# Running a model on a batch of prompt + response sequences
# ----------------------------------------------------------------------------------------------


def compute_log_probs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    calculate_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropy) of the response tokens under `model`, in one forward pass.

    Mirrors `verl/workers/engine/fsdp/transformer_impl.py::FSDPEngineWithLMHead.prepare_model_outputs`: the logits
    at position t predict token t+1, so the response's logits are those at [-R-1, -1); they are
    divided by the rollout temperature (the distribution the tokens were sampled from) before
    `logprobs_from_logits`.

    Args:
        model: a causal LM.
        input_ids, attention_mask, position_ids: (B, P+R) prompt and response side by side.
        response_length: R.
        temperature: `actor_rollout_ref.rollout.temperature`.
        calculate_entropy: also return the entropy of each next-token distribution.
    Returns:
        (log_probs (B, R), entropy (B, R) or None). Gradients flow if called with grad enabled.
    """
    logits = response_logits(model, input_ids, attention_mask, position_ids, response_length, temperature)
    log_probs = logprobs_from_logits(logits, input_ids[:, -response_length:])
    return log_probs, entropy_from_logits(logits) if calculate_entropy else None


def response_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                    response_length: int, temperature: float = 1.0) -> torch.Tensor:
    """(B, R, V) float32 logits of the distribution each response token was sampled from: the logits at position t
    predict token t+1, so the response's are those at [-R-1, -1), divided by the rollout temperature."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits
    return logits[:, -response_length - 1 : -1, :].float() / temperature


def compute_values(critic, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                   response_length: int, response_mask: torch.Tensor) -> torch.Tensor:
    """The critic's value V(s_t) for each response token, 0 on padding.

    Mirrors `verl/workers/engine/fsdp/transformer_impl.py::FSDPEngineWithValueHead.prepare_model_outputs`: the
    value of the state *before* response token t is read at position t-1 (the same shift as the
    logits), and values are multiplied by the response mask.

    Returns:
        (B, R) values.
    """
    values = critic(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=False).logits  # (B, P+R, 1)
    return values[:, -response_length - 1 : -1, 0].float() * response_mask
