"""jetmq broker: the MQTT front end and everything that runs on the trio loop."""

import hotpath

hotpath.guard()  # before any compiled module loads (hotpath/__init__.py)

__version__ = "0.1.0"
