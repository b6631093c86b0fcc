"""Fakes with behaviour for tests (never `unittest.mock` patching).

`clock.FakeClock` a stepped clock for any pure policy; `scaler_backend.FakeScalerBackend` a
ScalerBackend whose starts wait on a gate, fail or lose replicas on command; `upstream` a tiny
replica app the activator proxies to; `fallback.FakeDoor` a handoff link's fallback that
records what it was given; `loop` helpers that order events by event-loop turns.
"""
