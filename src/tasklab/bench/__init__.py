"""Benchmarks (`tasklab bench …`): numbers with their conditions, never timed tests."""
