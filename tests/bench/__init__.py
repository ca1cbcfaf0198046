"""Benchmarks: a load generator for AI SDK chat endpoints (`loadgen`) and the gateway benchmark (`run`)."""
