"""MQTT topic <-> NATS subject conversion for the broker (stream capture, the bridge): the
rules are ``store.topics``, shared with the pipeline."""

from __future__ import annotations

from store.topics import (
    SubjectConversionError,
    filter_to_subject,
    subject_to_topic,
    topic_to_subject,
)

__all__ = ["SubjectConversionError", "filter_to_subject", "subject_to_topic", "topic_to_subject"]
