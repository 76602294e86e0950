"""benchdnn's per-problem statuses and its summary line."""
from __future__ import annotations

from dataclasses import dataclass, field

PASSED, FAILED, SKIPPED, UNIMPLEMENTED, INVALID_ARGUMENTS, MISTRUSTED = (
    "PASSED", "FAILED", "SKIPPED", "UNIMPLEMENTED", "INVALID_ARGUMENTS", "MISTRUSTED")
# oneDNN's skip reasons (benchdnn's reason_t)
INVALID_CASE = "Invalid case"
CASE_NOT_SUPPORTED = "Case not supported"


@dataclass
class Summary:
    """Counts of each status over a run; ``line()`` is benchdnn's closing line."""

    counts: dict[str, int] = field(default_factory=dict)
    listed: int = 0

    def report(self, status: str, reason: str, repro: str) -> None:
        """Print benchdnn's status line for one problem and count it."""
        n = sum(self.counts.values())
        self.counts[status] = self.counts.get(status, 0) + 1
        self.listed += 1
        why = f" ({reason})" if reason else ""
        print(f"{n}:{status}{why} __REPRO: {repro}", flush=True)

    def get(self, status: str) -> int:
        return self.counts.get(status, 0)

    @property
    def failed(self) -> int:
        return self.get(FAILED)

    def line(self) -> str:
        tests = sum(self.counts.values())
        return (f"tests:{tests} passed:{self.get(PASSED)} skipped:{self.get(SKIPPED)} "
                f"mistrusted:{self.get(MISTRUSTED)} unimplemented:{self.get(UNIMPLEMENTED)} "
                f"invalid_arguments:{self.get(INVALID_ARGUMENTS)} failed:{self.failed} "
                f"listed:{self.listed}")
