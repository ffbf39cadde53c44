"""jetmq broker: the MQTT front end and everything that runs on the trio loop."""

__version__ = "0.1.0"
