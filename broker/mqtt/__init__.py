"""Sans-I/O MQTT 5.0 / 3.1.1 / 3.1 codec and per-connection protocol machine.

Standard library only: no trio, no sockets, no clock, no logging.
"""
