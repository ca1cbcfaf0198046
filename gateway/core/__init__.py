"""The pure core: wire shapes (chunks, requests), their encoding, the approval table, the
ADK-to-chunk converter, errors and the bounded JSON parser.

Nothing here does I/O, knows asyncio, aiohttp or ADK: ADK's types reach the core through the
adapters in `agents/`. Every other layer may import the core; the core imports none of them
(the import contract in pyproject.toml checks it).
"""
