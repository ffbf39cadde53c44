"""Authentication and authorisation: password files, ACL files, failure back-off, and the
broker's security state built from ``[auth]`` (see DESIGN.md)."""
