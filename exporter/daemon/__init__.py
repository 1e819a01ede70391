"""`rig-exporter` as a program: its flags and config file made into a Config (`cli`),
and the process that serves until it is stopped (`lifecycle`)."""
