"""A consumer's pause state as nats-server's ``consumer_pause_response`` carries it: the
store's result of a pause (``store.pausing``) and the client's answer
(``client.jetstream``). Light: the client imports it without the store's engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PauseState:
    """Paused or not, until when (RFC 3339), how long still (ns; None when not paused)."""

    paused: bool
    pause_until: str
    pause_remaining: int | None

    def to_wire(self) -> dict[str, object]:
        out: dict[str, object] = {"paused": self.paused, "pause_until": self.pause_until}
        if self.pause_remaining is not None:
            out["pause_remaining"] = self.pause_remaining
        return out
