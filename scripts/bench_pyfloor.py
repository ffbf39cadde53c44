"""The Python floor of a broker wake-up: a null MQTT broker in plain Python (for
``scripts/bench_broker.sh``'s ``pyfloor`` group; never a broker to use).

One thread, one ``select.epoll``, no framework: CONNACK to every CONNECT, SUBACK (granted
QoS 1) to every SUBSCRIBE, PUBACK to a QoS 1 PUBLISH, PINGRESP to PINGREQ, and every
PUBLISH forwarded verbatim (same packet id, same properties) to every subscribed
connection, whatever its filter. Nothing is checked, stored or kept per session. What it
costs per message at a paced rate (the ``latency`` scenario) is what the interpreter and
the kernel cost for the wake-ups, reads and writes alone, the part no MQTT logic written
in Python can go below:

    BENCH_GROUPS="pyfloor mosquitto jetmq" scripts/bench_broker.sh latency

Only for scenarios with one subscriber per topic of interest (latency, qos1, fanin).
"""

from __future__ import annotations

import argparse
import select
import socket

CONNACK = b"\x20\x03\x00\x00\x00"  # MQTT 5: session present 0, success, no properties
PINGRESP = b"\xd0\x00"


def _varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < len(buf):
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return None


def serve(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)
    epoll = select.epoll()
    epoll.register(listener.fileno(), select.EPOLLIN)
    conns: dict[int, socket.socket] = {}
    pending: dict[int, bytes] = {}
    subscribers: list[socket.socket] = []
    while True:
        for fd, _events in epoll.poll():
            if fd == listener.fileno():
                sock, _addr = listener.accept()
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[sock.fileno()] = sock
                pending[sock.fileno()] = b""
                epoll.register(sock.fileno(), select.EPOLLIN)
                continue
            sock = conns[fd]
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                epoll.unregister(fd)
                del conns[fd], pending[fd]
                if sock in subscribers:
                    subscribers.remove(sock)
                sock.close()
                continue
            buf = pending[fd] + data
            pos = 0
            out: list[bytes] = []
            forward: list[bytes] = []
            while len(buf) - pos >= 2:
                head = _varint(buf, pos + 1)
                if head is None or head[1] + head[0] > len(buf):
                    break
                length, body = head
                kind = buf[pos] >> 4
                if kind == 1:  # CONNECT
                    out.append(CONNACK)
                elif kind == 8:  # SUBSCRIBE: packet id, then properties and filters
                    subscribers.append(sock)
                    out.append(b"\x90\x04" + buf[body : body + 2] + b"\x00\x01")
                elif kind == 3:  # PUBLISH
                    if buf[pos] & 0x06:  # QoS 1 or 2: PUBACK with its packet id
                        topic_end = body + 2 + ((buf[body] << 8) | buf[body + 1])
                        out.append(b"\x40\x02" + buf[topic_end : topic_end + 2])
                    forward.append(buf[pos : body + length])
                elif kind == 12:  # PINGREQ
                    out.append(PINGRESP)
                pos = body + length
            pending[fd] = buf[pos:]
            try:
                if out:
                    sock.send(b"".join(out))
                if forward:
                    packets = b"".join(forward)
                    for sub in subscribers:
                        sub.send(packets)
            except OSError:
                pass  # the peer is gone: its close is read next


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    serve(parser.parse_args().port)


if __name__ == "__main__":
    main()
