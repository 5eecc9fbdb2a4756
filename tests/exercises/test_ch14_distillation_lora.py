"""Grades exercises/ch14_distillation_lora.py (or solutions/ with --target solutions)."""

import pytest
import torch
from grading import call, fail, load_chapter, raised

from minirl import distillation, lora, models
from minirl.config import OptimConfig, load_config
from minirl.optim import build_optimizer


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch14_distillation_lora")


def batch(seed: int, spread: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    student = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    teacher = student + torch.randn(4, 6, generator=g, dtype=torch.float64) * spread
    mask = torch.ones(4, 6, dtype=torch.long)
    mask[1, 4:] = 0
    mask[3, 1:] = 0
    return student, teacher, mask


def minirl_k3(student, teacher, mask):
    config = load_config([], announce=False).distillation.distillation_loss  # verl's defaults: k3, supervised
    return distillation.distillation_loss({"log_probs": student}, {"teacher_logprobs": teacher[..., None]}, mask,
                                          config, "token-mean", {})[0]


def check_k3(ch, student, teacher, mask, why=""):
    leaf = student.clone().requires_grad_(True)
    got = call(ch.k3_distillation_loss, leaf, teacher, mask)
    if not (torch.is_tensor(got) and got.dim() == 0):
        fail(f"k3_distillation_loss must return a scalar tensor; yours returned {got!r}.")
    want_leaf = student.clone().requires_grad_(True)
    want = minirl_k3(want_leaf, teacher, mask)
    if not torch.allclose(got.double(), want, atol=1e-9):
        fail(f"k3_distillation_loss = {got.item():.6f}, want {want.item():.6f}.{why}")
    if not got.requires_grad:
        fail("k3_distillation_loss returned a tensor with no gradient: compute it from student_log_probs with torch "
             "operations (no .item(), no .detach()).")
    (grad,) = torch.autograd.grad(got, leaf)
    (want_grad,) = torch.autograd.grad(want, want_leaf)
    if not torch.allclose(grad.double(), want_grad, atol=1e-9):
        fail(f"k3_distillation_loss has the right value but not the right gradient.{why}")


@pytest.mark.exercise("14.1", "k3_distillation_loss")
def test_k3_toy(ch):
    student = torch.tensor([[-0.5, -1.0]], dtype=torch.float64)
    teacher = torch.tensor([[-0.5, -2.0]], dtype=torch.float64)
    check_k3(ch, student, teacher, torch.ones(1, 2), " Token 1 agrees (l = 0); token 2: x = -1, l = e^-1 + 1 - 1.")
    check_k3(ch, *batch(0), " A masked token-mean: sum of m_t l_t over the batch divided by sum of m_t.")


@pytest.mark.exercise("14.1", "k3_distillation_loss")
def test_k3_clamps_as_verl(ch):
    student, teacher, mask = batch(1, spread=40.0)
    check_k3(ch, student, teacher, mask, " Clamp the log-ratio to [-20, 20] before exp, and l_t to [-10, 10].")


@pytest.mark.exercise("14.1", "k3_distillation_loss")
def test_k3_refuses_an_empty_batch(ch):
    student, teacher, mask = batch(2)
    if not isinstance(raised(ch.k3_distillation_loss, student, teacher, torch.zeros_like(mask)), ValueError):
        fail("k3_distillation_loss with no valid token must raise ValueError (0 / 0 has no meaning).")


def topk_inputs(seed: int, k: int = 5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 4, 17, generator=g, dtype=torch.float64) * 2
    teacher = torch.log_softmax(logits + torch.randn(3, 4, 17, generator=g, dtype=torch.float64) * 3, -1).topk(k, -1)
    return logits, teacher.values, teacher.indices


def check_topk(ch, logits, teacher_lp, teacher_ids, why=""):
    leaf = logits.clone().requires_grad_(True)
    got = call(ch.forward_kl_topk, leaf, teacher_lp, teacher_ids)
    want_leaf = logits.clone().requires_grad_(True)
    mask = torch.ones(logits.shape[:2])
    config = load_config(["distillation.distillation_loss.loss_mode=forward_kl_topk",
                          f"distillation.distillation_loss.topk={teacher_ids.shape[-1]}"], announce=False)
    want, _ = distillation.forward_kl_topk_loss({"logits": want_leaf}, {"teacher_logprobs": teacher_lp,
                                                                        "teacher_ids": teacher_ids}, mask,
                                                config.distillation.distillation_loss)
    if not (torch.is_tensor(got) and got.shape == want.shape):
        fail(f"forward_kl_topk must return a (B, R) tensor of shape {tuple(want.shape)}; yours returned "
             f"{getattr(got, 'shape', got)!r}.")
    if not torch.allclose(got.double(), want.double(), atol=1e-5):  # verl computes the KL in float32
        fail(f"forward_kl_topk = {got.tolist()[0]}, want {want.tolist()[0]} (first row).{why}")
    (grad,) = torch.autograd.grad(got.sum(), leaf)
    (want_grad,) = torch.autograd.grad(want.sum(), want_leaf)
    if not torch.allclose(grad.double(), want_grad.double(), atol=1e-5):
        fail(f"forward_kl_topk has the right values but not the right gradient.{why}")


@pytest.mark.exercise("14.2", "forward_kl_topk")
def test_forward_kl_topk_matches_verl(ch):
    check_topk(ch, *topk_inputs(0), " log q(v) is log_softmax over the WHOLE vocabulary, then gathered at the "
                                    "teacher's ids; weight each term by p(v) = exp(log p(v)).")


@pytest.mark.exercise("14.2", "forward_kl_topk")
def test_forward_kl_topk_is_clamped_at_zero(ch):
    logits, _, ids = topk_inputs(1, k=2)
    student_lp = torch.log_softmax(logits, -1).gather(-1, ids)
    # a teacher that puts less mass on its top-2 than the student: the truncated KL is negative before the clamp
    check_topk(ch, logits, student_lp - 1.0, ids, " The top-k terms can sum below 0: clamp each position at 0.")


@pytest.mark.exercise("14.2", "forward_kl_topk")
def test_forward_kl_topk_in_float32_with_one_token(ch):
    logits, teacher_lp, ids = topk_inputs(2, k=1)
    check_topk(ch, logits.float(), teacher_lp.float(), ids, " With k = 1 each position is p(v) (log p(v) - log q(v)) "
               "for the teacher's top token; keep the computation in the inputs' dtype (here float32).")


@pytest.mark.exercise("14.3", "lora_cost")
def test_lora_cost_toy(ch):
    got = call(ch.lora_cost, [(8, 4)], 2)
    if tuple(got) != (24, 192):
        fail(f"lora_cost([(8, 4)], rank=2) = {got}, want (24, 192): A is 2 x 4 and B is 8 x 2 (24 numbers), and "
             "AdamW keeps 2 float32 moments (8 bytes) for each.")


@pytest.mark.exercise("14.3", "lora_cost")
def test_lora_cost_grows_with_the_rank_not_the_area(ch):
    shapes = [(4864, 896), (896, 4864)]  # Qwen2.5-0.5B's MLP up and down projections
    for rank in (1, 8):
        got = tuple(call(ch.lora_cost, shapes, rank))
        want = (rank * 2 * (4864 + 896), rank * 2 * (4864 + 896) * 8)
        if got != want:
            fail(f"lora_cost({shapes}, rank={rank}) = {got}, want {want}: r (d_in + d_out) per layer, linear in the "
                 "rank, never d_in x d_out.")


@pytest.mark.exercise("14.3", "lora_cost")
def test_lora_cost_matches_peft_on_the_book_model(ch, tmp_path):
    """The shapes of the tiny model's seven linear layers per block, as PEFT's all-linear targets them."""
    path = models.save_tiny_model(tmp_path / "tiny")
    model = models.load_policy(path)
    shapes = [tuple(m.weight.shape) for name, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and "lm_head" not in name]
    for rank in (1, 4, 16):
        adapted = lora.apply_lora(models.load_policy(path), lora.LoraSettings(rank, 16, "all-linear"))
        trained, _ = lora.count_parameters(adapted)
        optimizer = build_optimizer(adapted, OptimConfig())
        adapted(input_ids=torch.tensor([[5, 6, 7]])).logits.sum().backward()
        optimizer.step()
        steps = 4 * sum(1 for p in adapted.parameters() if p.requires_grad)  # AdamW's float32 step counters
        want = (trained, lora.optimizer_state_bytes(optimizer) - steps)
        got = tuple(call(ch.lora_cost, shapes, rank))
        if got != want:
            fail(f"lora_cost(the tiny model's {len(shapes)} linear layers, rank={rank}) = {got}, want {want} "
                 "(what PEFT trains and AdamW stores). A layer's weight is (d_out, d_in).")
