"""The one name for a JSON object as the API server speaks it: data crosses the API edge as
plain dicts (docs/architecture.md) and becomes typed dataclasses in our own code."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
