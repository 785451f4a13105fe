"""PURE: a scenario becomes a NetworkPlan (topology; its data in model), a timeline of changes
(timeline), iproute2 batch text (render) and the ranks on hosts (ranks)."""
