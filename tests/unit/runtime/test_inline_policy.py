"""InlinePolicy: a model runs on the event loop only once proven tiny, and loses that quickly."""

from __future__ import annotations

from runtime.scheduling.inline_policy import InlinePolicy

US = 1_000
MS = 1_000_000


def _proven(policy: InlinePolicy, runs: int = 0) -> InlinePolicy:
    for _ in range(runs or policy.warmup_runs):
        policy.observe(10 * US, ran_inline=False)
    return policy


def test_a_model_runs_inline_only_after_its_warm_up_runs_were_fast() -> None:
    policy = InlinePolicy(max_inline_ns=200 * US)
    for _ in range(policy.warmup_runs - 1):
        policy.observe(10 * US, ran_inline=False)
        assert not policy.inline
    policy.observe(10 * US, ran_inline=False)
    assert policy.inline


def test_a_slow_model_never_runs_inline() -> None:
    policy = InlinePolicy(max_inline_ns=200 * US)
    for _ in range(1000):
        policy.observe(2 * MS, ran_inline=False)
    assert not policy.inline


def test_one_outlier_does_not_cost_the_fast_path() -> None:
    policy = _proven(InlinePolicy(max_inline_ns=200 * US))
    policy.observe(900 * US, ran_inline=True)  # e.g. the process was preempted mid-run
    assert policy.inline


def test_a_model_that_turns_slow_goes_back_to_its_thread_within_a_few_runs() -> None:
    policy = _proven(InlinePolicy(max_inline_ns=200 * US))
    inline_runs = 0
    while policy.inline:
        policy.observe(1 * MS, ran_inline=True)
        inline_runs += 1
    assert inline_runs <= 4


def test_a_model_that_blocks_the_loop_long_is_sent_back_and_finally_banned() -> None:
    policy = _proven(InlinePolicy(max_inline_ns=200 * US))
    for strike in range(policy.strikes):
        assert policy.inline
        policy.observe(50 * MS, ran_inline=True)  # held the loop for 50 ms
        assert not policy.inline
        if strike < policy.strikes - 1:
            _proven(policy, runs=200)  # fast again in its thread: it may come back...
    for _ in range(10_000):
        policy.observe(10 * US, ran_inline=False)
    assert not policy.inline  # ...but not after its last strike


def test_zero_disables_inline_runs() -> None:
    assert not _proven(InlinePolicy(max_inline_ns=0)).inline


def test_rare_stalls_are_forgiven_so_they_never_add_up_to_a_ban() -> None:
    policy = _proven(InlinePolicy(max_inline_ns=200 * US, forgive_runs=1000))
    for _ in range(10):  # a 50 ms preemption every few thousand runs, for a long time
        policy.observe(50 * MS, ran_inline=True)
        _proven(policy, runs=3000)
        assert policy.inline
