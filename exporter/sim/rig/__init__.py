"""The simulated rig: SimRig, its healthy baseline and state, the sysfs and /proc
writers, its clock and its control endpoint."""
