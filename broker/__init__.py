"""jetmq broker: the MQTT front end and everything that runs on the trio loop."""

from broker import native as _native

_native.guard()  # before any compiled module loads (broker/native.py)

__version__ = "0.1.0"
