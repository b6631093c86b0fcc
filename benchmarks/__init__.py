"""Benchmarks that report Thaw's numbers side by side with peers measured in the same run."""
