"""Fakes with behaviour for the seams of Thaw's packages, shared by every package's tests.

Each module is one fake of one seam (a Protocol the product declares), e.g. `model_service`:
an in-memory `ModelService` for the runtime's HTTP surface. Import them from here instead of
from another test module, so a test file never depends on a sibling's private helpers.
"""
