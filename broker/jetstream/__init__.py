"""JetStream over MQTT 5: the $JS API, stream capture, pull and push delivery, acks."""
