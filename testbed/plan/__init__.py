"""PURE: a scenario becomes a NetworkPlan (topology), iproute2 batch text (render) and the
rank placement."""
