"""The stall tracker: how long decode has stood still, read from the engine's own
counters (plans), polled within a render budget (readers), and measured (tracker)."""
