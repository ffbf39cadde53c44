"""The cffi extension is compiled and importable (filled in by the radix issue)."""

import radix


def test_extension_loads() -> None:
    assert radix.version() == "0.1.0"
