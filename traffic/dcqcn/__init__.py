"""DCQCN for UDP flows: the reaction point (rp), the notification point (np) and the offline
replay of a sender's log (replay); pure state machines, the socket programs drive them."""

from traffic.dcqcn.np import NotificationPoint
from traffic.dcqcn.replay import rate_trace, replay, replay_calls
from traffic.dcqcn.rp import ReactionPoint, RpCall, RpEvent

__all__ = [
    "NotificationPoint",
    "ReactionPoint",
    "RpCall",
    "RpEvent",
    "rate_trace",
    "replay",
    "replay_calls",
]
