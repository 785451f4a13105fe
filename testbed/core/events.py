"""The timeline's action vocabulary: what an event does, and which action undoes which. PURE,
standard library only.

The plan writes these names into a timeline, the event runner applies them (and undoes a fault
still in force when a run ends), the analysis pairs a fault's start with its end: one copy, so
an action added here is known to every layer.
"""

from __future__ import annotations

# a fault's start -> the action that ends (undoes) it
UNDO = {
    "blackhole": "unblackhole",
    "reset": "unreset",
    "link_down": "link_up",
    "gateway_down": "gateway_up",
}
# a fault's end -> the action it ends
ENDS = {v: k for k, v in UNDO.items()}
# every action of a timeline's events: ``set`` (new link settings), then each start and its end
ACTIONS = ("set", *(a for pair in UNDO.items() for a in pair))
