"""The simulated SGLang engine: its scheduler model, state, generation streams, control
endpoint and HTTP server."""
