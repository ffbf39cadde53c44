"""The NATS bridge (issue 22): MQTT topics to NATS subjects and back, at least once where
the configuration asks for it. See DESIGN.md. Importing this package imports nothing;
``broker.bridge.link`` is the only module that imports nats-py."""
