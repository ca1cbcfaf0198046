"""Benchmarks: the gateway benchmark (`run`), the comparison with ADK (`compare`) and the soak (`soak`);
their load generator is `adk_gateway.loadtest` (`adk-gateway loadtest`)."""
