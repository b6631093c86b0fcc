"""benchmarks/front_profile.py: which stage a perf sample's call chain names."""

from __future__ import annotations

import pytest

from benchmarks import front_profile
from benchmarks.front_profile import STAGE_NAMES, UNATTRIBUTED, stage_of, stage_shares

SCRIPT = """\
    ffffffff8100 _raw_spin_unlock_irqrestore
    7f0000000001 __libc_sendmsg
    5600000000a1 tokio::io::async_fd::AsyncFdReadyGuard<Inner>::try_io
    5600000000a2 thaw_front::seqpacket::SeqPacket::send::{{closure}}
    5600000000a3 thaw_front::hot::serve::{{closure}}
    5600000000a4 hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_catch
    5600000000a5 tokio::runtime::scheduler::current_thread::Context::park

    ffffffff8101 do_epoll_wait
    7f0000000002 epoll_wait
    5600000000b1 mio::poll::Poll::poll
    5600000000b2 tokio::runtime::io::Driver::turn
    5600000000b3 tokio::runtime::scheduler::current_thread::Context::park

    7f0000000003 _int_malloc

    5600000000c1 <serde_json::value::de::Value>::deserialize
    5600000000c2 thaw_front::accept::accept
    5600000000c3 thaw_front::hot::serve::{{closure}}
"""


def test_the_innermost_specific_stage_wins_over_waiting_and_dispatch() -> None:
    frames = [
        "thaw_front::wire::parse",
        "thaw_front::relay::take_front_answers",
        "tokio::runtime::task::harness::Harness<T,S>::poll",
    ]
    assert stage_of(frames) == "from the stub: recvmsg, the answer's header JSON"
    assert stage_of(["epoll_wait", "tokio::runtime::io::Driver::turn"]).startswith("waiting")
    assert stage_of(["tokio::runtime::task::raw::schedule"]).startswith("tokio's task polls")
    assert stage_of(["h2::hpack::decoder::Decoder::decode", "hyper::x"]).startswith("HTTP/2")


def test_a_chain_with_no_named_frame_is_unattributed() -> None:
    assert stage_of(["_int_malloc"]) == UNATTRIBUTED
    assert stage_of([]) == UNATTRIBUTED


def test_shares_count_each_sample_once_and_sum_to_one() -> None:
    shares = stage_shares(SCRIPT)
    assert set(shares) == set(STAGE_NAMES)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["to the stub: header JSON, frame, sendmsg"] == 0.25
    assert shares["waiting and waking (epoll, tokio's park)"] == 0.25
    assert shares["request check and decode into the execute"] == 0.25
    assert shares[UNATTRIBUTED] == 0.25


def test_no_samples_give_zero_shares() -> None:
    assert set(stage_shares("").values()) == {0.0}


def test_without_perf_it_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(front_profile.shutil, "which", lambda _name: None)
    assert front_profile.main([]) == 2
    assert "is not installed" in capsys.readouterr().err
