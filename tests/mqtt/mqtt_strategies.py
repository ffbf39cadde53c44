"""Hypothesis strategies: every packet type, valid for a given protocol version.

"Valid" means what the codec must round-trip exactly: the decoder returns an object
equal to the one encoded. Properties are drawn only where the property table allows
them; 3.1.x packets carry no properties and only the reason codes 3.1.1 can express.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    RetainHandling,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from broker.mqtt.properties import (
    EMPTY_PROPERTIES,
    PROPERTY_TABLE,
    Context,
    Properties,
    PropertyId,
    WireType,
)
from broker.mqtt.reason_codes import ReasonCode, allowed_reason_codes
from broker.mqtt.wire import MAX_VARINT

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1
V31 = ProtocolVersion.MQTT_3_1
VERSIONS = (V31, V311, V5)

_chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
text = st.text(alphabet=_chars, max_size=12)
topic_names = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00+#"), max_size=12
)
utf8_bytes = text.map(lambda t: t.encode("utf-8"))
nonempty_utf8_bytes = st.text(alphabet=_chars, min_size=1, max_size=12).map(
    lambda t: t.encode("utf-8")
)
packet_ids = st.integers(1, 0xFFFF)
qos_levels = st.integers(0, 2)


def _value(wire: WireType, value_range: tuple[int, int] | None) -> st.SearchStrategy[Any]:
    if wire is WireType.BYTE:
        low, high = value_range or (0, 255)
        return st.integers(low, high)
    if wire is WireType.TWO_BYTE_INTEGER:
        low, high = value_range or (0, 0xFFFF)
        return st.integers(low, high)
    if wire is WireType.FOUR_BYTE_INTEGER:
        low, high = value_range or (0, 0xFFFFFFFF)
        return st.integers(low, high)
    if wire is WireType.UTF8_STRING:
        return text
    return st.binary(max_size=12)  # BINARY_DATA


def properties(context: Context) -> st.SearchStrategy[Properties]:
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for row in PROPERTY_TABLE:
        if context not in row.contexts:
            continue
        if row.id is PropertyId.USER_PROPERTY:
            optional[row.name] = st.lists(st.tuples(text, text), max_size=3).map(tuple)
        elif row.id is PropertyId.RESPONSE_TOPIC:
            optional[row.name] = topic_names  # a Topic Name: no wildcards [MQTT-3.3.2-14]
        elif row.id is PropertyId.SUBSCRIPTION_IDENTIFIER:
            most = 3 if context in row.repeatable_in else 1
            optional[row.name] = st.lists(st.integers(1, MAX_VARINT), max_size=most).map(tuple)
        else:
            optional[row.name] = _value(row.wire_type, row.value_range)
    return st.fixed_dictionaries({}, optional=optional).map(lambda d: Properties(**d))


def _props(version: ProtocolVersion, context: Context) -> st.SearchStrategy[Properties]:
    return properties(context) if version is V5 else st.just(EMPTY_PROPERTIES)


def _codes(ptype: PacketType) -> st.SearchStrategy[ReasonCode]:
    return st.sampled_from(sorted(allowed_reason_codes(ptype))).map(ReasonCode)


@st.composite
def connects(draw: st.DrawFn, version: ProtocolVersion) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(
            draw(utf8_bytes),
            draw(st.binary(max_size=12)),
            draw(qos_levels),
            draw(st.booleans()),
            draw(_props(version, Context.WILL)),
        )
    username = draw(st.none() | text)
    password = draw(st.none() | st.binary(max_size=12))
    if version is not V5 and username is None:
        password = None
    return Connect(
        version,
        draw(nonempty_utf8_bytes).decode("utf-8"),
        draw(st.booleans()),
        draw(st.integers(0, 0xFFFF)),
        username,
        password,
        will,
        draw(_props(version, Context.CONNECT)),
    )


_V3_CONNACK_CODES = (
    ReasonCode.SUCCESS,
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    ReasonCode.SERVER_UNAVAILABLE,
    ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.NOT_AUTHORIZED,
)


def connacks(version: ProtocolVersion) -> st.SearchStrategy[Connack]:
    codes = _codes(PacketType.CONNACK) if version is V5 else st.sampled_from(_V3_CONNACK_CODES)
    return st.builds(Connack, st.booleans(), codes, _props(version, Context.CONNACK))


@st.composite
def publishes(draw: st.DrawFn, version: ProtocolVersion) -> Publish:
    qos = draw(qos_levels)
    return Publish(
        draw(utf8_bytes),
        draw(st.binary(max_size=40)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(packet_ids) if qos else None,
        draw(_props(version, Context.PUBLISH)),
    )


def _acks(cls: Any, ptype: PacketType, version: ProtocolVersion) -> st.SearchStrategy[Packet]:
    if version is not V5:
        return st.builds(cls, packet_ids)
    return st.builds(cls, packet_ids, _codes(ptype), _props(version, Context(ptype)))


def subscriptions(version: ProtocolVersion) -> st.SearchStrategy[Subscription]:
    if version is not V5:
        return st.builds(Subscription, utf8_bytes, qos_levels)
    return st.builds(
        Subscription,
        utf8_bytes,
        qos_levels,
        st.booleans(),
        st.booleans(),
        st.sampled_from(list(RetainHandling)),
    )


def subscribes(version: ProtocolVersion) -> st.SearchStrategy[Subscribe]:
    return st.builds(
        Subscribe,
        packet_ids,
        st.lists(subscriptions(version), min_size=1, max_size=4).map(tuple),
        _props(version, Context.SUBSCRIBE),
    )


def subacks(version: ProtocolVersion) -> st.SearchStrategy[Suback]:
    codes = (
        _codes(PacketType.SUBACK)
        if version is V5
        else st.sampled_from(
            [
                ReasonCode.GRANTED_QOS_0,
                ReasonCode.GRANTED_QOS_1,
                ReasonCode.GRANTED_QOS_2,
                ReasonCode.UNSPECIFIED_ERROR,
            ]
        )
    )
    return st.builds(
        Suback,
        packet_ids,
        st.lists(codes, min_size=1, max_size=4).map(tuple),
        _props(version, Context.SUBACK),
    )


def unsubscribes(version: ProtocolVersion) -> st.SearchStrategy[Unsubscribe]:
    return st.builds(
        Unsubscribe,
        packet_ids,
        st.lists(utf8_bytes, min_size=1, max_size=4).map(tuple),
        _props(version, Context.UNSUBSCRIBE),
    )


def unsubacks(version: ProtocolVersion) -> st.SearchStrategy[Unsuback]:
    if version is not V5:
        return st.builds(Unsuback, packet_ids)
    return st.builds(
        Unsuback,
        packet_ids,
        st.lists(_codes(PacketType.UNSUBACK), min_size=1, max_size=4).map(tuple),
        properties(Context.UNSUBACK),
    )


def disconnects(version: ProtocolVersion) -> st.SearchStrategy[Disconnect]:
    if version is not V5:
        return st.just(Disconnect())
    return st.builds(Disconnect, _codes(PacketType.DISCONNECT), properties(Context.DISCONNECT))


def auths() -> st.SearchStrategy[Auth]:
    return st.builds(Auth, _codes(PacketType.AUTH), properties(Context.AUTH))


def packets_of(ptype: PacketType, version: ProtocolVersion) -> st.SearchStrategy[Packet]:
    """Valid packets of one type for one version (AUTH only exists in 5.0)."""
    table: dict[PacketType, st.SearchStrategy[Any]] = {
        PacketType.CONNECT: connects(version),
        PacketType.CONNACK: connacks(version),
        PacketType.PUBLISH: publishes(version),
        PacketType.PUBACK: _acks(Puback, PacketType.PUBACK, version),
        PacketType.PUBREC: _acks(Pubrec, PacketType.PUBREC, version),
        PacketType.PUBREL: _acks(Pubrel, PacketType.PUBREL, version),
        PacketType.PUBCOMP: _acks(Pubcomp, PacketType.PUBCOMP, version),
        PacketType.SUBSCRIBE: subscribes(version),
        PacketType.SUBACK: subacks(version),
        PacketType.UNSUBSCRIBE: unsubscribes(version),
        PacketType.UNSUBACK: unsubacks(version),
        PacketType.PINGREQ: st.just(Pingreq()),
        PacketType.PINGRESP: st.just(Pingresp()),
        PacketType.DISCONNECT: disconnects(version),
        PacketType.AUTH: auths(),
    }
    return table[ptype]


def type_version_pairs() -> list[tuple[PacketType, ProtocolVersion]]:
    return [
        (ptype, version)
        for version in VERSIONS
        for ptype in PacketType
        if ptype is not PacketType.AUTH or version is V5
    ]


def any_packet(version: ProtocolVersion) -> st.SearchStrategy[Packet]:
    return st.one_of(*(packets_of(t, v) for t, v in type_version_pairs() if v is version))
