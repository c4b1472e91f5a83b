"""The optional AI license classifier: a client on the engine's fetcher, and the backfill that
asks it again for the rows of a registry's VERSION table whose LICENSE_AI is NULL."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, MemoryQueue, WorkLoop
from stagecrawl.errors import FetchError

if TYPE_CHECKING:
    from stagecrawl.storage.owners import VersionTable

log = logging.getLogger("stagecrawl.licenses")


@dataclass
class AiBackfillReport:
    rows: int = 0  # rows whose LICENSE_AI was NULL with a LICENSE to classify
    texts: int = 0  # distinct license texts asked about
    filled: int = 0
    failed: int = 0  # rows still NULL (the classifier failed again): the next backfill asks


async def backfill_ai(
    versions: VersionTable,
    client: AiLicenseClient,
    stop: GracefulStop | None = None,
    concurrency: int = 4,
) -> AiBackfillReport:
    """Ask the classifier again for every row whose LICENSE_AI is NULL (a failure during
    collect, or a classifier added later), on the work loop: one call per distinct text, the
    rows of each batch of answers updated (through the table's owner) in one transaction."""
    report = AiBackfillReport()
    rows = versions.without_license_ai()
    report.rows = len(rows)
    by_text: dict[str, list[tuple[str, str]]] = {}
    for key, version, text in rows:
        if text.strip():
            by_text.setdefault(text, []).append((key, version))
    report.texts = len(by_text)

    async def ask(text: str) -> tuple[str, str | None]:
        return text, await client.classify(text)

    def commit(answers: Sequence[tuple[str, str | None]]) -> None:
        updates = [
            (key, version, ids)
            for text, ids in answers
            if ids is not None
            for key, version in by_text[text]
        ]
        report.filled += len(updates)
        versions.set_license_ai(updates)

    queue: MemoryQueue[str, tuple[str, str | None]] = MemoryQueue(sorted(by_text), commit)
    await WorkLoop(queue, ask, LoopSettings(concurrency=concurrency), stop).run()
    report.failed = report.rows - report.filled
    return report


class AiLicenseClient:
    """Optional AI license classification: POST `{"license": text}` to a service that answers
    a JSON list of reference IDs (or `{"ids": [...]}`).

    The call goes through the engine's fetcher on the `ai` lane, so it is paced, carries the
    contact User-Agent and is retried like any request. One call per distinct expression per
    run, shared by every concurrent asker (they await the same future: no asker gets a NULL
    because another is still waiting). A failure gives None, is counted, and is not cached as
    an answer: `licenses backfill --ai-license-url …` asks again for those rows."""

    def __init__(self, fetcher: Fetcher, url: str, lane: str = "ai") -> None:
        self.fetcher = fetcher
        self.url = url
        self.lane = lane
        self.warnings = 0
        self.calls = 0
        self._answers: dict[str, asyncio.Future[str | None]] = {}

    async def classify(self, expression: str | None) -> str | None:
        if expression is None or not expression.strip():
            return None
        future = self._answers.get(expression)
        if future is None:
            future = asyncio.ensure_future(self._ask(expression))
            self._answers[expression] = future
        return await asyncio.shield(future)

    async def _ask(self, expression: str) -> str | None:
        self.calls += 1
        try:
            response = await self.fetcher.post_json(
                self.url, {"license": expression}, lane=self.lane
            )
            answer = response.json()
            ids = answer.get("ids") if isinstance(answer, dict) else answer
            if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids
            ):
                raise ValueError(f"unexpected answer {str(answer)[:100]!r}")
            return json.dumps(ids, separators=(",", ":"))
        except (FetchError, ValueError) as exc:
            self.warnings += 1
            log.warning("AI license classification failed for %r: %s", expression, exc)
            return None

    async def aclose(self) -> None:
        """Nothing of its own to close: the fetcher belongs to the run."""
