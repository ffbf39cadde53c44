"""LMDB storage engine: streams, consumers, acks, sessions and retained messages.

Imports lmdb and the standard library only; never ``broker`` or trio.
"""
