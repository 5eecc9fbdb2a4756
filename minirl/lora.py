"""LoRA: train a low-rank update of each weight matrix instead of the matrix (Hu et al., 2021), through PEFT as verl.

For a frozen weight W (d_out x d_in) the layer computes

    W' x = W x + (alpha / r) * B (A x),    A: (r, d_in) random,  B: (d_out, r) zeros   -> W' = W at step 0

so a matrix trains r * (d_in + d_out) numbers instead of d_in * d_out, and AdamW keeps two float32 moments for those
only. verl 0.9.1 has two spellings of the same idea:
- the FSDP engine's flat keys, `model.lora_rank`, `lora_alpha`, `target_modules` (default "all-linear": every linear
  layer but the output head), `exclude_modules`, `lora_adapter_path`
  (`verl/workers/engine/fsdp/transformer_impl.py::FSDPEngine._build_lora_module`: PEFT's get_peft_model with
  LoraConfig(task_type=CAUSAL_LM, r, lora_alpha, target_modules, exclude_modules, bias="none"), or
  PeftModel.from_pretrained(adapter, is_trainable=True));
- the Megatron engine's group `model.lora.*` (rank, alpha 32, dropout, target_modules in Megatron's module names,
  lora_A_init_method xavier), which `lora_settings` maps to the same PEFT adapter.

Around the adapter, verl's trainer (and minirl's):
- the reference policy is the actor with its adapter switched off (`ref_in_actor`, ray_trainer.py): no second copy;
- the rollout engine samples with the merged weights W + (alpha / r) B A (`model.lora.merge=true`; with false verl
  gives vLLM the adapter instead, the same function): `merged_state_dict`;
- a checkpoint holds the adapter only; `merge_adapter_directory` (`python -m minirl merge`) writes a plain Hugging
  Face directory (verl: `python -m verl.model_merger merge`).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

MEGATRON_TO_HF = {"linear_qkv": ["q_proj", "k_proj", "v_proj"], "linear_proj": ["o_proj"],
                  "linear_fc1": ["gate_proj", "up_proj"], "linear_fc2": ["down_proj"]}
"""Megatron's fused module names (model.lora.target_modules) -> the Hugging Face Qwen2/Llama modules they fuse."""


@dataclass(frozen=True)
class LoraSettings:
    """One adapter, whichever spelling configured it."""

    rank: int
    alpha: float
    target_modules: str | list[str]
    exclude_modules: list[str] | str | None = None
    dropout: float = 0.0
    init_a: str = "kaiming"
    """How A starts: "kaiming" (PEFT's default, kaiming_uniform with a = sqrt(5)) or "xavier" (Megatron's default)."""
    adapter_path: str | None = None
    """Continue training this saved adapter (its own rank, alpha and modules) instead of a new one."""
    spelling: str = "lora_rank"
    """Which keys set it: "lora_rank" (FSDP's) or "lora.rank" (Megatron's)."""

    @property
    def scaling(self) -> float:
        """alpha / r: the factor in front of B A."""
        return self.alpha / self.rank


def lora_settings(model_config) -> LoraSettings | None:
    """The adapter `model_config` (actor_rollout_ref.model or critic.model) asks for, or None for full fine-tuning.

    FSDP's keys: lora_rank > 0 with lora_alpha, target_modules, exclude_modules, lora_adapter_path. Megatron's:
    lora.rank > 0 with lora.alpha, lora.dropout, lora.target_modules (Megatron's names are mapped by MEGATRON_TO_HF;
    others pass through), lora.exclude_modules, lora.lora_A_init_method, lora.adapter_path. The config check refuses
    both at once (`minirl.config.lora_problems`).
    """
    if model_config.lora_rank > 0:
        return LoraSettings(model_config.lora_rank, model_config.lora_alpha, model_config.target_modules,
                            model_config.exclude_modules, adapter_path=model_config.lora_adapter_path)
    group = model_config.lora
    if group.rank > 0:
        targets = [hf for name in group.target_modules for hf in MEGATRON_TO_HF.get(name, [name])]
        return LoraSettings(group.rank, group.alpha, targets, list(group.exclude_modules) or None, group.dropout,
                            "xavier" if group.lora_A_init_method == "xavier" else "kaiming", group.adapter_path,
                            spelling="lora.rank")
    return None


def apply_lora(model, settings: LoraSettings):
    """Wrap `model` (a Hugging Face model) in a PEFT LoRA adapter: only the adapter's A and B train.

    With settings.adapter_path, load that adapter (trainable) instead. Returns the PeftModel.
    """
    try:
        from peft import LoraConfig, PeftModel, TaskType, get_peft_model
    except ImportError as error:
        raise ImportError("LoRA needs PEFT, minirl's `lora` extra: pip install -e '.[lora]' "
                          "(make test and make lab install it)") from error

    if settings.adapter_path is not None:
        with quiet_peft():
            return PeftModel.from_pretrained(model, settings.adapter_path, is_trainable=True)
    config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=settings.rank, lora_alpha=settings.alpha,
                        target_modules=settings.target_modules, exclude_modules=settings.exclude_modules,
                        lora_dropout=settings.dropout, bias="none")
    with quiet_peft():
        model = get_peft_model(model, config)
    if settings.init_a == "xavier":  # Megatron-Bridge's default: A ~ Xavier-uniform, B = 0
        for name, parameter in model.named_parameters():
            if ".lora_A." in name:
                torch.nn.init.xavier_uniform_(parameter.data)
    return model


def is_lora(model) -> bool:
    """Whether `model` is a PEFT model (an adapter over frozen weights)."""
    return hasattr(model, "peft_config")


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held in the optimizer's state (AdamW: exp_avg and exp_avg_sq per trained parameter, plus a step)."""
    return sum(value.numel() * value.element_size() for state in optimizer.state.values()
               for value in state.values() if torch.is_tensor(value))


@torch.no_grad()
def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The plain model's state dict with every adapter folded in: W + (alpha / r) B A under W's own name.

    What verl's weight sync sends the rollout engine with model.lora.merge=true (the engine holds a plain model).
    """
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    state = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            weight = module.base_layer.weight
            for adapter in module.active_adapters:
                weight = weight + module.get_delta_weight(adapter)
            state[f"{name}.weight"] = weight
            if module.base_layer.bias is not None:
                state[f"{name}.bias"] = module.base_layer.bias
    for name, tensor in base.state_dict().items():
        if "lora_" in name or ".base_layer." in name:
            continue
        state.setdefault(name, tensor)
    return state


def merged_copy(model, dtype: torch.dtype = torch.float32):
    """A plain Hugging Face model holding `model`'s merged weights (for a rollout engine's own copy)."""
    import copy

    plain = copy.deepcopy(model).merge_and_unload()
    return plain.to(dtype).eval().requires_grad_(False)


def save_adapter(model, directory: Path) -> None:
    """`directory/adapter_config.json` and `adapter_model.safetensors`: the adapter alone (PEFT's save_pretrained)."""
    model.save_pretrained(directory)


def load_adapter(model, directory: Path) -> None:
    """Load an adapter saved by `save_adapter` into `model` (a PeftModel with the same modules and rank)."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    result = set_peft_model_state_dict(model, load_peft_weights(str(directory)))
    missing = [key for key in result.missing_keys if "lora_" in key]
    if missing:
        raise ValueError(f"the adapter in {directory} lacks {len(missing)} of this model's LoRA weights (e.g. "
                         f"{missing[0]}): it was saved with another rank or other target modules.")


def merge_adapter_directory(adapter_dir: str | Path, out_dir: str | Path, base: str | Path | None = None) -> Path:
    """Merge a saved adapter into its base model and save a plain Hugging Face directory (with the tokenizer).

    `base` defaults to the base model the adapter records (adapter_config.json's base_model_name_or_path).
    """
    import json

    from peft import PeftModel

    from minirl import models

    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").exists():
        raise ValueError(f"{adapter_dir} holds no adapter_config.json: point at a LoRA checkpoint's actor directory "
                         "(e.g. runs/minirl/global_step_10/actor).")
    base = base or json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"]
    with quiet_peft():
        merged = PeftModel.from_pretrained(models.load_policy(base), adapter_dir).merge_and_unload()
    return models.save_model_atomically(merged, models.load_tokenizer(base), out_dir, "merged.json",
                                        {"adapter": str(adapter_dir), "base": str(base)})


@contextlib.contextmanager
def quiet_peft():
    """Hide PEFT 0.21's FutureWarning about transformers 5's renamed is_gradient_checkpointing (nothing to act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield
