"""Artifacts: tools that save files with `tool_context.save_artifact` (as ADK's artifact_save_text sample)."""

import struct
import zlib

from gemini_like import GeminiLike
from google.adk.agents import Agent
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from .script import script


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid PNG image of one colour (8-bit RGB, no interlace)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


CHART_PNG = _png(4, 4, (66, 133, 244))


async def save_report(title: str, tool_context: ToolContext) -> dict:
    """Writes a short text report and saves it as the artifact 'report.txt'."""
    report = f"{title}\nRevenue: 42\nCosts: 17\n".encode()
    version = await tool_context.save_artifact("report.txt", types.Part.from_bytes(data=report, mime_type="text/plain"))
    return {"filename": "report.txt", "version": version}


async def make_chart(tool_context: ToolContext) -> dict:
    """Draws a chart and saves it as the PNG artifact 'chart.png'."""
    version = await tool_context.save_artifact(
        "chart.png", types.Part.from_bytes(data=CHART_PNG, mime_type="image/png")
    )
    return {"filename": "chart.png", "version": version}


root_agent = Agent(
    name="artifact_agent",
    model=GeminiLike(script=script),
    description="Writes reports and draws charts, saved as artifacts.",
    instruction="""When asked for a report, call save_report. When asked for a chart, call make_chart.
    Then tell the user which files were saved.""",
    tools=[save_report, make_chart],
)
