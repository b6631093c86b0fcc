"""Fakes with behaviour for the seams of Thaw's packages, shared by every package's tests.

Each module is one fake of one seam (a Protocol the product declares), never `unittest.mock`
patching. Import them from here instead of from another test module, so a test file never
depends on a sibling's private helpers:

- `model_service`: an in-memory `ModelService` for the runtime's HTTP surface;
- `clock.FakeClock`: a stepped clock (seconds) for any pure policy;
- `stepped_clock.SteppedClock`: a `runtime.scheduling.clock.Clock` (ns, timers) for the dispatcher;
- `scaler_backend.FakeScalerBackend`: a ScalerBackend whose starts wait on a gate, fail or lose
  replicas on command;
- `upstream`: a tiny replica app the activator proxies to;
- `fallback.FakeDoor`: a handoff link's fallback that records what it was given;
- `loop`: helpers that order events by event-loop turns.
"""
