"""The simulator's floor: a simulated rig (SGLang, two 7900 XTX cards, the host) that
a real exporter reads, and the scenarios played on it (`rigctl sim`,
docs/simulator.md). It stands on the daemon and the spine."""
