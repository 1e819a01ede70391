"""The rule modules, one per concern, as the monitoring mixins split theirs."""
