"""Python models as Triton runs them: the model runner, and its stub process with its wire.

Imports only the standard library, numpy and Thaw's stdlib-only modules, so that a stub process
started with another Python environment (`EXECUTION_ENV_PATH`) can import it.
"""
