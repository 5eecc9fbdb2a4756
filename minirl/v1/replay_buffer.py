"""The replay buffer of verl 0.9.1's v1 trainer (sync mode): whole prompt groups in, whole groups out.

The trainer does not generate a batch; it *dispatches* prompts and asks the buffer for `train_batch_size`
finished groups. A group is one prompt's n sessions (one `uid`); it can be sampled only when all of them are
done, and the oldest groups (by the step that dispatched them) go first. DAPO's group filter lives here:

    a finished group whose metric has no spread (every answer right, or every answer wrong) is evicted;
    for each evicted group, sync mode dispatches two new prompts (refill 2k), never more in flight than
    algorithm.filter_groups.max_inflight_gen_batches * train_batch_size;
    once enough groups are sampleable, it stops refilling, lets in-flight groups finish (draining), takes the
    oldest train_batch_size groups and discards the surplus.

(verl 0.9.1: `trainer/ppo/v1/replay_buffer.py::ReplayBuffer.sample`, `_dapo_filtered_keys`; its state lives in
TransferQueue and is rebuilt at every poll, here it is this object. `max_num_gen_batches` is not read by v1.)

In minirl's sync mode the agent loops run while the trainer waits in `sample`: `generate_fn` takes every
pending group to the end (sessions, then the reward loop), so a poll finds no group still running.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minirl.v1.agent_loop import AgentLoopOutput


def dapo_evictions(values_by_uid: dict[str, list[float]], mode: str) -> tuple[list[str], int]:
    """DAPO's group filter inside the replay buffer: which finished groups leave, and how many prompts replace them.

    A group is evicted when it has more than one answer and no spread in the filter metric (np.std == 0: every
    answer right, or every answer wrong), since GRPO gives such a group zero advantage. Sync mode dispatches two new
    prompts per evicted group (refill 2k), the async modes one (refill k).

    Args:
        values_by_uid: uid -> the filter metric of each answer of that finished group, in dispatch order.
        mode: "sync", "colocate_async" or "separate_async".
    Returns:
        (the evicted uids, in the order given; the number of prompts to dispatch in their place).
    (verl 0.9.1: `trainer/ppo/v1/replay_buffer.py::ReplayBuffer._dapo_filtered_keys` and the refill in `sample`.)
    """
    if mode not in ("sync", "colocate_async", "separate_async"):
        raise ValueError(f"mode={mode!r} is not one of sync, colocate_async, separate_async")
    evicted = [uid for uid, values in values_by_uid.items() if len(values) > 1 and float(np.std(values)) == 0.0]
    return evicted, (2 if mode == "sync" else 1) * len(evicted)


def stale_evictions(groups: list[tuple[str, int, bool]], global_steps: int, threshold: int | None,
                    strategy: str) -> tuple[list[str], bool]:
    """The staleness bound of the async replay buffer, at one poll of step `global_steps`.

        span = global_steps - dispatch_step + 1        steps a group has lived, counting both ends

    strategy "drop": every finished group with span > threshold is evicted (the trainer replaces it with a new
    prompt); groups still in flight are never evicted. strategy "wait": nothing is evicted, but sampling holds while
    a group in flight has span >= threshold, so it can finish and be trained before it would be too old.
    threshold None: no bound.

    Args:
        groups: (uid, dispatch_step, finished) for every group in the buffer.
    Returns:
        (the evicted uids, in the order given; whether sampling must wait).
    (verl 0.9.1: `trainer/ppo/v1/replay_buffer.py::ReplayBufferAsync._stale_terminal_keys`, `_has_enough_samples`.)
    """
    if threshold is None:
        return [], False
    span = {uid: global_steps - step + 1 for uid, step, _ in groups}
    if strategy == "drop":
        return [uid for uid, _, finished in groups if finished and span[uid] > threshold], False
    return [], any(not finished and span[uid] >= threshold for uid, _, finished in groups)


@dataclass
class Trajectory:
    """One session of a group: its agent-loop output, its score and the reward function's extra values."""

    session_id: int
    output: AgentLoopOutput
    score: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PromptGroup:
    """One prompt and its n sessions. status: pending (dispatched), finished (all sessions done and scored).
    `seeds` holds one sampling seed per session, fixed at dispatch."""

    uid: str
    row: dict
    dispatch_step: int
    seeds: list[int]
    status: str = "pending"
    trajectories: list[Trajectory] = field(default_factory=list)


class ReplayBuffer:
    """verl's sync-mode replay buffer.

    Args:
        generate_fn: runs the given pending groups' sessions and scores them (marks them finished).
        refill_fn: dispatches `count` new prompts (calls `add` for each).
        filter_groups_metric: None (DAPO off), "reward" (the score) or a key the reward function returns.
        train_batch_size: prompts per step; max_inflight_gen_batches: DAPO's cap on prompts in flight, in
            train-batch units.
    """

    def __init__(self, generate_fn: Callable[[list[PromptGroup]], None], refill_fn: Callable[[int], None],
                 train_batch_size: int, filter_groups_metric: str | None = None, max_inflight_gen_batches: int = 1,
                 max_prompts_per_sample: int | None = None):
        if filter_groups_metric is not None and (not isinstance(max_inflight_gen_batches, int)
                                                 or max_inflight_gen_batches < 1):
            raise ValueError("algorithm.filter_groups.max_inflight_gen_batches must be a positive integer (got "
                             f"{max_inflight_gen_batches!r}): it caps DAPO's prompts in flight, in train batches.")
        self.generate_fn = generate_fn
        self.refill_fn = refill_fn
        self.train_batch_size = train_batch_size
        self.filter_groups_metric = filter_groups_metric
        self.max_inflight_gen_batches = max_inflight_gen_batches
        self.max_prompts_per_sample = max_prompts_per_sample
        self.groups: dict[str, PromptGroup] = {}  # uid -> group, in dispatch order

    def add(self, group: PromptGroup) -> None:
        """Register a dispatched prompt group (pending until `generate_fn` has run its sessions)."""
        if group.uid in self.groups:
            raise ValueError(f"prompt uid {group.uid!r} is already in the replay buffer")
        self.groups[group.uid] = group

    def __len__(self) -> int:
        return len(self.groups)

    def _filter_values(self, group: PromptGroup) -> list[float]:
        """The filter metric of each answer of a finished group."""
        if self.filter_groups_metric == "reward":
            return [t.score for t in group.trajectories]
        try:
            return [float(t.extra[self.filter_groups_metric]) for t in group.trajectories]
        except KeyError:
            raise ValueError(f"algorithm.filter_groups.metric={self.filter_groups_metric!r}: the reward function "
                             "returns no such value. Use reward, or a key your compute_score returns in its "
                             "dict (e.g. acc).") from None

    def _dapo_evictions(self, groups: list[PromptGroup], mode: str) -> tuple[list[PromptGroup], int]:
        """`dapo_evictions` on buffer groups (none without DAPO)."""
        if self.filter_groups_metric is None:
            return [], 0
        evicted, refill = dapo_evictions({g.uid: self._filter_values(g) for g in groups}, mode)
        return [self.groups[uid] for uid in evicted], refill

    def sample(self, global_steps: int, batch_size: int) -> tuple[list[PromptGroup], dict[str, float]]:
        """Take `batch_size` finished groups, oldest dispatch first, generating (and with DAPO refilling) as
        needed. The taken groups leave the buffer. Returns (groups, metrics).

        Raises:
            RuntimeError: DAPO dispatched more prompts than `max_prompts_per_sample` (a whole pass over the
                training set) without finding enough groups with a spread: the run would wait forever.
        """
        metrics: dict[str, float] = {}
        filtering = self.filter_groups_metric is not None
        if filtering:
            metrics["training/filter_groups/evicted_samples"] = 0
        draining, refill_credit, dispatched = False, 0, 0
        while True:
            pending = [g for g in self.groups.values() if g.status == "pending"]
            if pending:  # the agent loops run while the trainer waits here
                self.generate_fn(pending)
                dispatched += len(pending)
            evicted, refill = self._dapo_evictions(pending, "sync")
            for group in evicted:
                del self.groups[group.uid]
            if filtering:
                metrics["training/filter_groups/evicted_samples"] += len(evicted)
            sampleable = [g for g in self.groups.values() if g.status == "finished"]
            enough = len(sampleable) >= batch_size
            if filtering:
                if enough:
                    draining, refill_credit = True, 0
                elif not draining:
                    refill_credit += refill  # sync DAPO refills two prompts per evicted group
                in_flight = sum(g.status == "pending" for g in self.groups.values())
                dispatch = min(refill_credit, self.max_inflight_gen_batches * self.train_batch_size - in_flight)
                if not draining and dispatch > 0:
                    if self.max_prompts_per_sample is not None and dispatched >= self.max_prompts_per_sample:
                        raise RuntimeError(
                            f"filter_groups: {dispatched} prompts dispatched this step (a pass over the training "
                            f"set) and only {len(sampleable)} of {batch_size} groups had a spread in "
                            f"{self.filter_groups_metric}. Start from a model whose answers vary more, raise "
                            "rollout.n, or turn algorithm.filter_groups.enable off.")
                    self.refill_fn(dispatch)
                    refill_credit -= dispatch
                    continue
            if enough:
                sampleable.sort(key=lambda g: g.dispatch_step)  # stable: dispatch order within a step
                taken = sampleable[:batch_size]
                for group in taken:
                    del self.groups[group.uid]
                if filtering:  # verl clears the surplus groups in sync DAPO
                    surplus = sampleable[batch_size:]
                    for group in surplus:
                        del self.groups[group.uid]
                    metrics["training/filter_groups/discarded_surplus_samples"] = len(surplus)
                return taken, metrics
            if not any(g.status == "pending" for g in self.groups.values()):
                raise RuntimeError(f"the replay buffer holds {len(sampleable)} finished groups and nothing in flight, "
                                   f"but {batch_size} were asked for: dispatch prompts before sampling.")


class ReplayBufferAsync(ReplayBuffer):
    """verl's `ReplayBufferAsync` (colocate_async): groups stay in flight across steps, and a batch may be older
    than the weights it trains.

    `sample` drives the agent loops only until `batch_size` groups are sampleable, then takes the oldest; the
    groups still in flight are left where they are (verl aborts them at the weight sync and resumes them after,
    with the new weights: partial rollouts), and finished groups beyond the batch wait for a later step.
    Each poll evicts, and replaces one for one (refill k):

        stale groups: finished, dispatched more than max_off_policy_threshold steps ago
            span = global_steps - dispatch_step + 1 > threshold    (strategy "drop"; "wait" instead holds
            sampling while an in-flight group has span >= threshold, so it can finish and be trained)
        DAPO's groups without a spread (filter_groups_metric).

    (verl 0.9.1: `trainer/ppo/v1/replay_buffer.py::ReplayBufferAsync.wait_for_sampleable`, `_stale_terminal_keys`,
    `_has_enough_samples`.)

    Args:
        drive_fn(ready): runs the agent loops, calling `ready()` whenever every session waits for the engine,
            until it returns True (or nothing is in flight).
        score_fn(): scores the groups whose sessions have all finished (status "done" -> "finished").
        refill_fn(count): dispatches `count` new prompts (started at once).
        max_off_policy_threshold: None switches staleness control off.
        mode: colocate_async or separate_async (both refill DAPO's evictions one for one).
    """

    def __init__(self, drive_fn: Callable[[Callable[[], bool]], None], score_fn: Callable[[], None],
                 refill_fn: Callable[[int], None], train_batch_size: int, filter_groups_metric: str | None = None,
                 max_off_policy_threshold: int | None = 8, max_off_policy_strategy: str = "drop",
                 mode: str = "colocate_async"):
        super().__init__(lambda groups: None, refill_fn, train_batch_size, filter_groups_metric)
        self.mode = mode
        if max_off_policy_threshold is not None and max_off_policy_threshold < 1:
            raise ValueError("trainer.v1.sampler.max_off_policy_threshold must be a positive integer or null (got "
                             f"{max_off_policy_threshold})")
        if max_off_policy_strategy not in ("drop", "wait"):
            raise ValueError(f"trainer.v1.sampler.max_off_policy_strategy={max_off_policy_strategy!r} is not one of "
                             "drop, wait")
        self.drive_fn = drive_fn
        self.score_fn = score_fn
        self.threshold = max_off_policy_threshold
        self.strategy = max_off_policy_strategy

    def _span(self, group: PromptGroup, global_steps: int) -> int:
        return global_steps - group.dispatch_step + 1

    def in_flight(self) -> list[PromptGroup]:
        """Groups whose sessions are still running (or not yet scored)."""
        return [g for g in self.groups.values() if g.status != "finished"]

    def sample(self, global_steps: int, batch_size: int) -> tuple[list[PromptGroup], dict[str, float]]:
        """Drive the agent loops until `batch_size` groups are sampleable, then take the oldest. Returns (groups,
        metrics): verl's eviction counts (`training/off_policy/evicted_samples`, with the evicted groups' spans,
        and `training/filter_groups/evicted_samples` with DAPO)."""
        evicted_spans: list[int] = []
        filtered = [0]

        def ready() -> bool:  # the trainer's poll
            self.score_fn()
            stale_uids, hold = stale_evictions([(g.uid, g.dispatch_step, g.status == "finished")
                                                for g in self.groups.values()], global_steps, self.threshold,
                                               self.strategy)
            stale = [self.groups[uid] for uid in stale_uids]
            finished = [g for g in self.groups.values() if g.status == "finished" and g.uid not in stale_uids]
            spread_less, refill = self._dapo_evictions(finished, self.mode)
            for group in stale + spread_less:
                del self.groups[group.uid]
            evicted_spans.extend(self._span(g, global_steps) for g in stale)
            filtered[0] += len(spread_less)
            if stale or spread_less:
                self.refill_fn(len(stale) + refill)  # async refills one for one
                return False
            return not hold and sum(g.status == "finished" for g in self.groups.values()) >= batch_size

        while True:
            self.drive_fn(ready)
            if ready():  # the drive stopped on it (this poll changes nothing), or ran out of sessions
                break
            if not self.in_flight():
                raise RuntimeError(f"the replay buffer has {sum(g.status == 'finished' for g in self.groups.values())}"
                                   f" sampleable groups and nothing in flight, but {batch_size} were asked for.")
        finished = sorted((g for g in self.groups.values() if g.status == "finished"), key=lambda g: g.dispatch_step)
        taken = finished[:batch_size]
        for group in taken:
            del self.groups[group.uid]
        metrics = {"training/off_policy/evicted_samples": len(evicted_spans)}
        if evicted_spans:
            metrics.update({"training/off_policy/evicted_samples_staleness/mean": float(np.mean(evicted_spans)),
                            "training/off_policy/evicted_samples_staleness/max": float(max(evicted_spans)),
                            "training/off_policy/evicted_samples_staleness/min": float(min(evicted_spans))})
        if self.filter_groups_metric is not None:
            metrics["training/filter_groups/evicted_samples"] = filtered[0]
        return taken, metrics

